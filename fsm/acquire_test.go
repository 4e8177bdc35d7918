package fsm

import (
	"reflect"
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// TestCheckAcquireAgreesWithApply: the read-only acquire predicate answers
// exactly when the apply would answer without a write, and with the same
// answer; when it cannot answer, the apply writes.
func TestCheckAcquireAgreesWithApply(t *testing.T) {
	const now = 1000
	setup := func() *FSM {
		f := New()
		run(t, f, now-100, &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 500, RequestId: "r1", Identity: "id-a"})
		run(t, f, now-100, &fsmv1.Acquire{Name: "gone", Owner: "o", TtlMs: 50, RequestId: "r0"})
		run(t, f, now-100, &fsmv1.Acquire{Name: "done", Owner: "o", TtlMs: 50})
		run(t, f, now-100, &fsmv1.ClaimWindow{Job: "j", Window: "w1", LeaseName: "done", Owner: "o", Generation: 1})
		run(t, f, now-100, &fsmv1.CompleteWindow{Job: "j", Window: "w1", LeaseName: "done", Owner: "o", Generation: 1})
		run(t, f, now, &fsmv1.Tick{})
		return f
	}
	for _, tc := range []struct {
		name     string
		cmd      *fsmv1.Acquire
		answered bool // CheckAcquire answers: the apply writes nothing
	}{
		{"held by another owner", &fsmv1.Acquire{Name: "held", Owner: "p", TtlMs: 100, RequestId: "r1", Identity: "id-a"}, true},
		{"held: the holder's owner without a request id", &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 100, Identity: "id-a"}, true},
		{"held: another identity with the holder's owner and request id", &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 100, RequestId: "r1", Identity: "id-b"}, true},
		{"held: the holder's owner with another request id", &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 100, RequestId: "r2", Identity: "id-a"}, true},
		{"own grant: a retry", &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 100, RequestId: "r1", Identity: "id-a"}, true},
		{"own grant with a claim: recorded by the apply", &fsmv1.Acquire{Name: "held", Owner: "o", TtlMs: 100, RequestId: "r1", Identity: "id-a",
			ClaimJob: "j", ClaimWindow: "w2"}, false},
		{"completed window", &fsmv1.Acquire{Name: "gone", Owner: "p", TtlMs: 100, ClaimJob: "j", ClaimWindow: "w1"}, true},
		{"completed window, lease held", &fsmv1.Acquire{Name: "held", Owner: "p", TtlMs: 100, ClaimJob: "j", ClaimWindow: "w1"}, true},
		{"too early", &fsmv1.Acquire{Name: "gone", Owner: "p", TtlMs: 100, ClaimJob: "j", ClaimWindow: "w3", ClaimNotBeforeMs: now + 5}, true},
		{"malformed", &fsmv1.Acquire{Name: "gone", TtlMs: 100}, true},
		{"half a claim", &fsmv1.Acquire{Name: "gone", Owner: "p", TtlMs: 100, ClaimJob: "j"}, true},
		{"expired: free", &fsmv1.Acquire{Name: "gone", Owner: "p", TtlMs: 100, RequestId: "r0"}, false},
		{"never existed: free", &fsmv1.Acquire{Name: "new", Owner: "p", TtlMs: 100}, false},
		{"free, with a claim", &fsmv1.Acquire{Name: "new", Owner: "p", TtlMs: 100, ClaimJob: "j", ClaimWindow: "w2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup()
			before := f.Digest()
			answer, ok := f.CheckAcquire(now, now, tc.cmd)
			if f.Digest() != before {
				t.Fatal("CheckAcquire changed the state")
			}
			if ok != tc.answered {
				t.Fatalf("answered %v (%#v), want %v", ok, answer, tc.answered)
			}
			applied := run(t, f, now, tc.cmd)
			if !ok {
				if f.Digest() == before {
					t.Fatalf("CheckAcquire left it to the apply, which wrote nothing: %#v", applied)
				}
				return
			}
			if f.Digest() != before {
				t.Fatalf("CheckAcquire answered %#v, but the apply wrote (%#v)", answer, applied)
			}
			if !reflect.DeepEqual(answer, applied) {
				t.Fatalf("CheckAcquire answered %#v, the apply %#v", answer, applied)
			}
		})
	}
}
