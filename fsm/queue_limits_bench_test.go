package fsm

import (
	"runtime"
	"syscall"
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// BenchmarkFetchLimits is BenchmarkApplyFetchComplete (one job's share of
// a fetch of 100 and a completion of 100, decode and apply) without limits
// and with each kind of limit set high enough never to hold a job back,
// so the difference is the limits' bookkeeping (docs/benchmarks.md).
func BenchmarkFetchLimits(b *testing.B) {
	for _, c := range []struct {
		name string
		sp   *fsmv1.QueueLimitsSpec
	}{
		{"off", nil},
		{"concurrency", &fsmv1.QueueLimitsSpec{Concurrency: 1000}},
		{"kind", &fsmv1.QueueLimitsSpec{Kinds: []*fsmv1.KindLimit{{Kind: "send-report", Concurrency: 1000}}}},
		{"rate", &fsmv1.QueueLimitsSpec{RateMilli: MaxRateMilli, Burst: MaxRateBurst}},
		{"all", &fsmv1.QueueLimitsSpec{Concurrency: 1000, Kinds: []*fsmv1.KindLimit{{Kind: "send-report", Concurrency: 1000}},
			RateMilli: MaxRateMilli, Burst: MaxRateBurst}},
	} {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f := New()
			queueJobs(b, f, b.N)
			cal := t0 + 61_000
			if c.sp != nil {
				if _, ok := f.Apply(entryAt(b, 1, cal, &fsmv1.SetQueueLimits{Queue: "default", Limits: c.sp})).(*QueueLimits); !ok {
					b.Fatal("limits refused")
				}
			}
			f.Apply(entryAt(b, 1, cal, &fsmv1.Tick{})) // every job available before the clock starts
			var logs [][]byte
			next := uint64(1)
			for i := 0; i < b.N; i += 100 {
				fetch, complete := fetchAndComplete(b, 1, cal, &next, min(100, b.N-i))
				logs = append(logs, fetch, complete)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := threadCPU()
			out := f.ApplyBatch(logs)
			cpu := threadCPU() - cpu0
			b.StopTimer()
			// CPU time of this thread (the apply runs on it): on a shared,
			// loaded host wall time mostly measures the wait for a core.
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			if r, ok := out[len(out)-1].(JobResults); !ok || len(r) == 0 {
				b.Fatalf("%#v", out[len(out)-1])
			}
			if r, ok := out[len(out)-2].(*FetchResult); !ok || len(r.Jobs) != len(out[len(out)-1].(JobResults)) {
				b.Fatalf("the last fetch handed out %#v", out[len(out)-2])
			}
		})
	}
}

// threadCPU is the CPU time (user + system) of the calling OS thread, in
// ns (the goroutine is locked to it by the caller's LockOSThread).
func threadCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)
}
