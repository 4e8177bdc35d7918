package fsm

import (
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// A job's trace context (docs/tracing.md) is data of the job: kept as
// submitted, opaque, and through a snapshot round trip; a job submitted
// without one has none.
func TestQueueJobKeepsItsTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	f := New()
	traced := submitOne(t, f, t0, jspec("q", "send", func(s *fsmv1.QueueJobSpec) { s.TraceParent, s.TraceState = tp, "vendor=x" }))
	plain := submitOne(t, f, t0, jspec("q", "send"))
	if traced.TraceParent != tp || traced.TraceState != "vendor=x" || plain.TraceParent != "" || plain.TraceState != "" {
		t.Fatalf("stored %q %q and %q %q", traced.TraceParent, traced.TraceState, plain.TraceParent, plain.TraceState)
	}
	g := restored(t, f)
	if j, ok := g.QueueJob(traced.ID); !ok || j.TraceParent != tp || j.TraceState != "vendor=x" {
		t.Fatalf("after a restore: %+v", j)
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest changed by a snapshot round trip")
	}
}
