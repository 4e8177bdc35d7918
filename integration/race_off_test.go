//go:build !race

package integration

// raceDetector: see race_on_test.go.
const raceDetector = false
