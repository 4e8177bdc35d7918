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
		var buf bytes.Buffer
		if err := f.WriteSnapshot(&buf); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(buf.Len()))
	}
}

func BenchmarkSnapshotRestore100k(b *testing.B) {
	var buf bytes.Buffer
	if err := bigState(b, 100_000).WriteSnapshot(&buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := New().Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFootprint measures memory per lease+window, snapshot size and restore
// time at 1,000,000 leases and 1,000,000 completed windows. It takes about a
// minute: COORDD_FOOTPRINT=1 go test ./fsm -run Footprint -v
func TestFootprint(t *testing.T) {
	if os.Getenv("COORDD_FOOTPRINT") == "" {
		t.Skip("set COORDD_FOOTPRINT=1 to measure")
	}
	const n = 1_000_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	f := bigState(t, n)
	after := heap()
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g := New()
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	restore := time.Since(start)
	t.Logf("%d leases + %d completed windows: heap %.0f bytes per lease+window pair; snapshot %.1f MiB; restore %s",
		n, n, float64(after-before)/n, float64(buf.Len())/(1<<20), restore.Round(time.Millisecond))
	runtime.KeepAlive(f)
}
