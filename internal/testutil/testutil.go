// Package testutil holds the small helpers tests across coordd share: a
// poll loop, a buffer safe for concurrent writes and the process's CPU time. It is a leaf (the
// standard library only), so any package's tests can use it without an
// import cycle.
package testutil

import (
	"bytes"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer that is safe for concurrent writes (a process's
// or a goroutine's output) and the test's reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Poll calls cond every interval until it holds, and fails t when timeout
// passes first.
func Poll(t testing.TB, what string, timeout, interval time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// Recv receives from ch, and fails t when nothing arrives within 5 s of
// real time (what names the awaited value).
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
		var zero T
		return zero
	}
}

// Field reads a nested field of a decoded JSON document (nil when a step
// is missing or not an object).
func Field(doc map[string]any, path ...string) any {
	var v any = doc
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// ProcessCPU is this process's user and system CPU time so far (0 if the
// system will not say): benchmarks report CPU per operation with it.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
