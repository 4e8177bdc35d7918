//go:build race

package integration

// raceDetector: the race detector slows every goroutine several times, so
// latency bounds measured on a loaded machine do not hold under it.
const raceDetector = true
