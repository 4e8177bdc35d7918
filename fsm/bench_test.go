package fsm

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// entry encodes a command as a log entry's data.
func entry(b testing.TB, now int64, body any) []byte {
	data, err := proto.Marshal(Envelope(now, body))
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// entryAt encodes a command with a calendar time as a log entry's data.
func entryAt(tb testing.TB, now, cal int64, body any) []byte {
	tb.Helper()
	data, err := proto.Marshal(EnvelopeAt(now, cal, body))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// heapAlloc is the live heap after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// timedRestore restores a new FSM from a snapshot and says how long that took.
func timedRestore(tb testing.TB, snap []byte) (*FSM, time.Duration) {
	tb.Helper()
	start := time.Now()
	g := restoreFrom(tb, snap)
	return g, time.Since(start)
}

// benchRestore measures restoring f's snapshot into a new FSM.
func benchRestore(b *testing.B, f *FSM) {
	snap := snapshotOf(b, f).Bytes()
	b.SetBytes(int64(len(snap)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := New().Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			b.Fatal(err)
		}
	}
}

// fetchAndComplete encodes a fetch of n jobs from the default queue by
// worker "w" and the completion of their first attempts, taken to be jobs
// *next, *next+1, …; it advances *next past them.
func fetchAndComplete(tb testing.TB, now, cal int64, next *uint64, n int) (fetch, complete []byte) {
	tb.Helper()
	fetch = entryAt(tb, now, cal, &fsmv1.FetchJobs{Queues: []string{"default"}, Max: uint32(n), WorkerId: "w"})
	var done []*fsmv1.JobCompletion
	for k := 0; k < n; k++ {
		done = append(done, &fsmv1.JobCompletion{JobId: *next, Attempt: 1})
		*next++
	}
	return fetch, entryAt(tb, now, cal, &fsmv1.CompleteJobs{Completions: done, WorkerId: "w"})
}

// benchApply measures ApplyBatch (decode + apply) per command, in batches
// of 64 as Raft delivers them under load.
func benchApply(b *testing.B, setup func(f *FSM, n int), mk func(i int) any) {
	f := New()
	setup(f, b.N)
	logs := make([][]byte, b.N)
	for i := range logs {
		logs[i] = entry(b, 1_000_000+int64(i), mk(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		f.ApplyBatch(logs[i:min(i+64, b.N)])
	}
}

func noSetup(*FSM, int) {}

func holdAll(f *FSM, n int) {
	for i := 0; i < n; i++ {
		f.ApplyCommand(Envelope(1_000_000, &fsmv1.Acquire{Name: fmt.Sprintf("lease-%d", i), Owner: "o", TtlMs: 1 << 40}))
	}
}

func BenchmarkApplyAcquire(b *testing.B) {
	benchApply(b, noSetup, func(i int) any {
		return &fsmv1.Acquire{Name: fmt.Sprintf("lease-%d", i), Owner: "owner-1", TtlMs: 30000, RequestId: "r"}
	})
}

func BenchmarkApplyRenew(b *testing.B) {
	benchApply(b, holdAll, func(i int) any {
		return &fsmv1.Renew{Name: fmt.Sprintf("lease-%d", i), Owner: "o", Generation: 1, TtlMs: 30000}
	})
}

func BenchmarkApplyRelease(b *testing.B) {
	benchApply(b, holdAll, func(i int) any {
		return &fsmv1.Release{Name: fmt.Sprintf("lease-%d", i), Owner: "o", Generation: 1}
	})
}

func BenchmarkApplyClaimWindow(b *testing.B) {
	benchApply(b, func(f *FSM, _ int) { holdAll(f, 1) }, func(i int) any {
		return &fsmv1.ClaimWindow{Job: "job", Window: fmt.Sprintf("w-%d", i), LeaseName: "lease-0", Owner: "o", Generation: 1}
	})
}

func BenchmarkApplyCompleteWindow(b *testing.B) {
	benchApply(b, func(f *FSM, n int) {
		holdAll(f, 1)
		for i := 0; i < n; i++ {
			f.ApplyCommand(Envelope(1_000_000, &fsmv1.ClaimWindow{Job: "job", Window: fmt.Sprintf("w-%d", i), LeaseName: "lease-0", Owner: "o", Generation: 1}))
		}
	}, func(i int) any {
		return &fsmv1.CompleteWindow{Job: "job", Window: fmt.Sprintf("w-%d", i), LeaseName: "lease-0", Owner: "o", Generation: 1}
	})
}

func BenchmarkApplyFencedCommit(b *testing.B) {
	benchApply(b, func(f *FSM, _ int) { holdAll(f, 1) }, func(i int) any {
		return &fsmv1.FencedCommit{Resource: fmt.Sprintf("res-%d", i%1000), LeaseName: "lease-0", Generation: 1,
			IdempotencyKey: fmt.Sprintf("key-%d", i), Payload: []byte("42.00")}
	})
}

func BenchmarkApplyTick(b *testing.B) {
	benchApply(b, noSetup, func(int) any { return &fsmv1.Tick{} })
}

// bigState holds n leases and n completed windows.
func bigState(tb testing.TB, n int) *FSM {
	f := New()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("jobs/tenant-%06d/lease", i)
		f.ApplyCommand(Envelope(1_000_000, &fsmv1.Acquire{Name: name, Owner: "host-a:1234:9f3c", TtlMs: 30000, RequestId: "0123456789abcdef01234567"}))
		f.ApplyCommand(Envelope(1_000_000, &fsmv1.ClaimWindow{Job: name, Window: "2026-09-25", LeaseName: name, Owner: "host-a:1234:9f3c", Generation: 1}))
		f.ApplyCommand(Envelope(1_000_000, &fsmv1.CompleteWindow{Job: name, Window: "2026-09-25", LeaseName: name, Owner: "host-a:1234:9f3c", Generation: 1}))
	}
	return f
}

func BenchmarkSnapshotPersist100k(b *testing.B) {
	f := bigState(b, 100_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.SetBytes(int64(snapshotOf(b, f).Len()))
	}
}

func BenchmarkSnapshotRestore100k(b *testing.B) {
	benchRestore(b, bigState(b, 100_000))
}

// TestFootprint measures memory per lease+window, snapshot size and restore
// time at 1,000,000 leases and 1,000,000 completed windows. It takes about a
// minute: COORDD_FOOTPRINT=1 go test ./fsm -run Footprint -v
func TestFootprint(t *testing.T) {
	if os.Getenv("COORDD_FOOTPRINT") == "" {
		t.Skip("set COORDD_FOOTPRINT=1 to measure")
	}
	const n = 1_000_000
	before := heapAlloc()
	f := bigState(t, n)
	after := heapAlloc()
	buf := snapshotOf(t, f)
	_, restore := timedRestore(t, buf.Bytes())
	t.Logf("%d leases + %d completed windows: heap %.0f bytes per lease+window pair; snapshot %.1f MiB; restore %s",
		n, n, float64(after-before)/n, float64(buf.Len())/(1<<20), restore.Round(time.Millisecond))
	runtime.KeepAlive(f)
}

// queueJobs submits n scheduled jobs with 200-byte args through encoded
// log entries of 1,000 jobs, as the leader would, due 1..60 s after t0.
func queueJobs(tb testing.TB, f *FSM, n int) {
	args := bytes.Repeat([]byte("x"), 200)
	for i := 0; i < n; i += MaxSubmitBatch {
		specs := make([]*fsmv1.QueueJobSpec, 0, MaxSubmitBatch)
		for k := i; k < min(i+MaxSubmitBatch, n); k++ {
			s := &fsmv1.QueueJobSpec{Queue: "default", Kind: "send-report", Args: args, RunAtMs: t0 + 1000 + int64(k)*59_000/int64(n)}
			FillJobDefaults(s)
			specs = append(specs, s)
		}
		data, err := proto.Marshal(EnvelopeAt(1_000_000, t0, &fsmv1.SubmitJobs{Jobs: specs, Identity: "svc-billing"}))
		if err != nil {
			tb.Fatal(err)
		}
		if _, ok := f.Apply(data).(*SubmitResult); !ok {
			tb.Fatal("submit refused")
		}
	}
}

// queueFootprint is the heap per scheduled job (record, args, indexes).
func queueFootprint(tb testing.TB, n int) (perJob float64, f *FSM) {
	before := heapAlloc()
	f = New()
	queueJobs(tb, f, n)
	after := heapAlloc()
	return float64(after-before) / float64(n), f
}

// TestQueueFootprintSmall keeps the memory per scheduled job (200-byte
// args) under 1 KiB at 50,000 jobs; TestFootprint measures 1,000,000.
func TestQueueFootprintSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~50 MB")
	}
	per, f := queueFootprint(t, 50_000)
	t.Logf("50,000 scheduled jobs with 200-byte args: %.0f bytes per job", per)
	if per > 1024 {
		t.Fatalf("%.0f bytes per scheduled job; the budget is 1024", per)
	}
	runtime.KeepAlive(f)
}

// TestQueueFootprintSucceeded keeps a finished job (200-byte args, one
// succeeded attempt: what retention holds, up to DefaultMaxFinishedJobs)
// under 1 KiB too, and checks that its attempt log has no spare room.
func TestQueueFootprintSucceeded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100 MB")
	}
	const n = 50_000
	before := heapAlloc()
	f := New()
	queueJobs(t, f, n)
	cal := t0 + 61_000
	next := uint64(1)
	for i := 0; i < n; i += MaxFetchBatch {
		fetch, complete := fetchAndComplete(t, 1_000_000, cal, &next, MaxFetchBatch)
		if r, ok := f.Apply(fetch).(*FetchResult); !ok || len(r.Jobs) != MaxFetchBatch || cap(r.Jobs) != MaxFetchBatch {
			t.Fatalf("fetch: %T", r)
		}
		if _, ok := f.Apply(complete).(JobResults); !ok {
			t.Fatal("complete refused")
		}
	}
	per := float64(heapAlloc()-before) / n
	j, ok := f.QueueJob(n)
	if !ok || j.State != JobSucceeded || len(j.Log) != 1 || cap(j.Log) != 1 {
		t.Fatalf("job %d: %+v (log cap %d)", n, j, cap(j.Log))
	}
	t.Logf("%d succeeded jobs with 200-byte args: %.0f bytes per job", n, per)
	if per > 1024 {
		t.Fatalf("%.0f bytes per succeeded job; the budget is 1024", per)
	}
	runtime.KeepAlive(f)
}

// TestQueueFootprint measures memory per scheduled job, snapshot size and
// restore time at 1,000,000 jobs with 200-byte args:
// COORDD_FOOTPRINT=1 go test ./fsm -run QueueFootprint$ -v
func TestQueueFootprint(t *testing.T) {
	if os.Getenv("COORDD_FOOTPRINT") == "" {
		t.Skip("set COORDD_FOOTPRINT=1 to measure")
	}
	const n = 1_000_000
	start := time.Now()
	per, f := queueFootprint(t, n)
	submitTime := time.Since(start)
	buf := snapshotOf(t, f)
	f = nil // a restarting node holds only the state it restores
	runtime.GC()
	g, restore := timedRestore(t, buf.Bytes())
	t.Logf("%d scheduled jobs with 200-byte args: heap %.0f bytes per job; submit %s (%.0f jobs/s applied, in entries of 1,000); snapshot %.1f MiB; restore %s",
		n, per, submitTime.Round(time.Millisecond), n/submitTime.Seconds(), float64(buf.Len())/(1<<20), restore.Round(time.Millisecond))
	if per > 1024 {
		t.Errorf("%.0f bytes per scheduled job; the budget is 1024", per)
	}
	runtime.KeepAlive(g)
}

func BenchmarkApplySubmitJobs(b *testing.B) {
	// b.N jobs in entries of 100.
	args := bytes.Repeat([]byte("x"), 200)
	var logs [][]byte
	for i := 0; i < b.N; i += 100 {
		specs := make([]*fsmv1.QueueJobSpec, 0, 100)
		for k := i; k < min(i+100, b.N); k++ {
			s := &fsmv1.QueueJobSpec{Queue: "default", Kind: "k", Args: args}
			FillJobDefaults(s)
			specs = append(specs, s)
		}
		data, _ := proto.Marshal(EnvelopeAt(1, t0, &fsmv1.SubmitJobs{Jobs: specs}))
		logs = append(logs, data)
	}
	f := New()
	b.ReportAllocs()
	b.ResetTimer()
	f.ApplyBatch(logs)
}

// BenchmarkApplyFetchComplete measures one job's way through the queue:
// its share of a fetch of 100 and of a completion of 100.
func BenchmarkApplyFetchComplete(b *testing.B) {
	f := New()
	queueJobs(b, f, b.N)
	cal := t0 + 61_000
	var logs [][]byte
	next := uint64(1)
	for i := 0; i < b.N; i += 100 {
		fetch, complete := fetchAndComplete(b, 1, cal, &next, min(100, b.N-i))
		logs = append(logs, fetch, complete)
	}
	b.ReportAllocs()
	b.ResetTimer()
	out := f.ApplyBatch(logs)
	b.StopTimer()
	if r, ok := out[len(out)-1].(JobResults); !ok || len(r) == 0 {
		b.Fatalf("%#v", out[len(out)-1])
	}
}

func BenchmarkSnapshotRestoreQueue100k(b *testing.B) {
	f := New()
	queueJobs(b, f, 100_000)
	benchRestore(b, f)
}

// BenchmarkApplyQueueEvents measures one job's whole way (its share of a
// submit, a fetch and a completion of 100) as a node applies it: with a
// sink for the change events, three a job; on an empty state and on one
// that already holds 300,000 finished jobs (what a busy queue retains).
func BenchmarkApplyQueueEvents(b *testing.B) {
	for _, held := range []int{0, 300_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			f := New()
			next := uint64(1)
			cal := t0 + 61_000
			f.ApplyBatch(jobWays(b, held, cal, &next))
			logs := jobWays(b, b.N, cal, &next)
			events := 0
			b.ReportAllocs()
			b.ResetTimer()
			f.ApplyBatchTo(logs, func(_ int, evs []Event) { events += len(evs) })
			b.StopTimer()
			if events != 3*b.N {
				b.Fatalf("%d events for %d jobs", events, b.N)
			}
		})
	}
}

// jobWays is the entries that submit n jobs, fetch and complete them, in
// hundreds.
func jobWays(tb testing.TB, n int, cal int64, next *uint64) [][]byte {
	args := bytes.Repeat([]byte("x"), 200)
	var logs [][]byte
	for i := 0; i < n; i += 100 {
		k := min(100, n-i)
		specs := make([]*fsmv1.QueueJobSpec, 0, k)
		for range k {
			s := &fsmv1.QueueJobSpec{Queue: "default", Kind: "k", Args: args}
			FillJobDefaults(s)
			specs = append(specs, s)
		}
		fetch, complete := fetchAndComplete(tb, 1, cal, next, k)
		logs = append(logs, entryAt(tb, 1, cal, &fsmv1.SubmitJobs{Jobs: specs}), fetch, complete)
	}
	return logs
}
