package fsm

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// run applies body at lease time now through the encoded entry point, as
// a replica would.
func run(t testing.TB, f *FSM, now int64, body any) any {
	t.Helper()
	data, err := proto.Marshal(Envelope(now, body))
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(data)
}

func acq(name, owner string, ttl int64, rid string) *fsmv1.Acquire {
	return &fsmv1.Acquire{Name: name, Owner: owner, TtlMs: ttl, RequestId: rid}
}

func mustAcquire(t *testing.T, f *FSM, now int64, name, owner string, ttl int64) Lease {
	t.Helper()
	r, ok := run(t, f, now, acq(name, owner, ttl, "")).(*AcquireResult)
	if !ok || !r.Acquired {
		t.Fatalf("acquire %s by %s at %d: %#v", name, owner, now, r)
	}
	return r.Lease
}

func wantReason(t *testing.T, got any, want Reason) {
	t.Helper()
	var rej *Rejection
	if e, ok := got.(error); !ok || !errors.As(e, &rej) {
		t.Fatalf("want rejection %s, got %#v", want, got)
	}
	if rej.Reason != want {
		t.Fatalf("want rejection %s, got %s (%s)", want, rej.Reason, rej.Message)
	}
}

func TestAcquireGenerations(t *testing.T) {
	f := New()
	l := mustAcquire(t, f, 1000, "job", "a", 100)
	if l.Generation != 1 || l.ExpiresAt != 1100 || l.AcquiredAt != 1000 {
		t.Fatalf("first grant: %+v", l)
	}
	// Held: another owner sees the holder, no error.
	r := run(t, f, 1050, acq("job", "b", 100, "")).(*AcquireResult)
	if r.Acquired || r.Lease.Owner != "a" || r.Lease.Generation != 1 {
		t.Fatalf("contended acquire: %+v", r)
	}
	// The holder itself asking again with a new request is not a second grant.
	if r := run(t, f, 1060, acq("job", "a", 100, "other")).(*AcquireResult); r.Acquired {
		t.Fatalf("re-acquire by holder granted: %+v", r)
	}
	// Expiry: exactly at the deadline the lease is free (expires_at > now is live).
	if l := mustAcquire(t, f, 1100, "job", "b", 100); l.Generation != 2 {
		t.Fatalf("after expiry: %+v", l)
	}
	// Release keeps the record; the next grant continues the sequence.
	if r := run(t, f, 1120, &fsmv1.Release{Name: "job", Owner: "b", Generation: 2}).(*ReleaseResult); !r.Released || !r.Lease.Released {
		t.Fatalf("release: %+v", r)
	}
	if l, _, ok := f.Lease("job"); !ok || l.Generation != 2 || !l.Released {
		t.Fatalf("released record: %+v %v", l, ok)
	}
	if l := mustAcquire(t, f, 1121, "job", "c", 100); l.Generation != 3 {
		t.Fatalf("after release: %+v", l)
	}
}

func TestAcquireRequestIDDedupes(t *testing.T) {
	f := New()
	first := run(t, f, 10, acq("l", "a", 100, "req-1")).(*AcquireResult)
	again := run(t, f, 20, acq("l", "a", 100, "req-1")).(*AcquireResult)
	if !again.Acquired || again.Lease != first.Lease {
		t.Fatalf("retry: %+v, first %+v", again, first)
	}
	// Same request id from another owner is not the same request.
	if r := run(t, f, 30, acq("l", "b", 100, "req-1")).(*AcquireResult); r.Acquired {
		t.Fatalf("foreign owner with same request id granted: %+v", r)
	}
	// Once the grant lapsed, a late retry does not resurrect it: it is a new
	// grant with a new generation, never the old one.
	r := run(t, f, 200, acq("l", "a", 100, "req-1")).(*AcquireResult)
	if !r.Acquired || r.Lease.Generation != 2 {
		t.Fatalf("late retry: %+v", r)
	}
}

func TestHolderFence(t *testing.T) {
	f := New()
	mustAcquire(t, f, 0, "l", "a", 100)                                     // gen 1 expires at 100
	mustAcquire(t, f, 150, "l", "b", 100)                                   // gen 2 expires at 250
	mustAcquire(t, f, 150, "gone", "x", 10)                                 // gen 1
	run(t, f, 151, &fsmv1.Release{Name: "gone", Owner: "x", Generation: 1}) // released
	mustAcquire(t, f, 150, "lapsed", "y", 10)                               // expires at 160

	cases := []struct {
		name  string
		now   int64
		owner string
		lease string
		gen   uint64
		want  Reason
	}{
		{"old generation", 160, "a", "l", 1, coorderr.LeaseLost},
		{"right generation, wrong owner", 160, "a", "l", 2, coorderr.LeaseLost},
		{"future generation", 160, "b", "l", 3, coorderr.LeaseLost},
		{"unknown lease", 160, "b", "nope", 1, coorderr.LeaseNotFound},
		{"released", 160, "x", "gone", 1, coorderr.LeaseReleased},
		{"expired", 170, "y", "lapsed", 1, coorderr.LeaseExpired},
		{"current", 160, "b", "l", 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops := map[string]any{
				"renew": &fsmv1.Renew{Name: c.lease, Owner: c.owner, Generation: c.gen, TtlMs: 100},
				"claim": &fsmv1.ClaimWindow{Job: "j-" + c.name, Window: "w", LeaseName: c.lease, Owner: c.owner, Generation: c.gen},
			}
			for _, op := range []string{"claim", "renew"} {
				got := run(t, f, c.now, ops[op])
				if c.want == 0 {
					if _, bad := got.(error); bad {
						t.Fatalf("%s: %v", op, got)
					}
					continue
				}
				wantReason(t, got, c.want)
			}
		})
	}
	// A renew extends from the FSM clock (170: it never goes back), with the
	// given TTL.
	if l, _, _ := f.Lease("l"); l.ExpiresAt != 270 || l.Renewals != 1 {
		t.Fatalf("renewed lease: %+v", l)
	}
}

func TestRelease(t *testing.T) {
	f := New()
	mustAcquire(t, f, 0, "l", "a", 100)
	wantReason(t, run(t, f, 10, &fsmv1.Release{Name: "l", Owner: "b", Generation: 1}), coorderr.LeaseLost)
	if r := run(t, f, 10, &fsmv1.Release{Name: "l", Owner: "a", Generation: 1}).(*ReleaseResult); !r.Released || r.Lease.ExpiresAt != 10 {
		t.Fatalf("release: %+v", r)
	}
	// Twice is harmless.
	if r := run(t, f, 11, &fsmv1.Release{Name: "l", Owner: "a", Generation: 1}).(*ReleaseResult); r.Released {
		t.Fatalf("second release: %+v", r)
	}
	mustAcquire(t, f, 20, "m", "a", 10)
	wantReason(t, run(t, f, 40, &fsmv1.Release{Name: "m", Owner: "a", Generation: 1}), coorderr.LeaseExpired)
}

func TestWindowLedger(t *testing.T) {
	f := New()
	claim := func(now int64, owner string, gen uint64) any {
		return run(t, f, now, &fsmv1.ClaimWindow{Job: "daily-close", Window: "2026-09-25", LeaseName: "daily-close", Owner: owner, Generation: gen})
	}
	complete := func(now int64, owner string, gen uint64, result string) any {
		return run(t, f, now, &fsmv1.CompleteWindow{Job: "daily-close", Window: "2026-09-25", LeaseName: "daily-close",
			Owner: owner, Generation: gen, Result: []byte(result)})
	}
	mustAcquire(t, f, 0, "daily-close", "a", 100)
	if r := claim(1, "a", 1).(*ClaimResult); !r.Claimed || r.Window.Attempts != 1 || r.Window.StartedAt != 1 {
		t.Fatalf("first claim: %+v", r)
	}
	// The same holder claiming again is the same attempt.
	if r := claim(2, "a", 1).(*ClaimResult); !r.Claimed || r.Window.Attempts != 1 {
		t.Fatalf("repeat claim: %+v", r)
	}
	// Completing without a claim is refused.
	wantReason(t, run(t, f, 3, &fsmv1.CompleteWindow{Job: "daily-close", Window: "other", LeaseName: "daily-close", Owner: "a", Generation: 1}), coorderr.WindowNotClaimed)
	// a crashes; b takes over after the TTL and resumes the window.
	mustAcquire(t, f, 100, "daily-close", "b", 100)
	wantReason(t, complete(101, "a", 1, "a's"), coorderr.LeaseLost)
	wantReason(t, complete(101, "b", 2, "too early"), coorderr.WindowNotClaimed)
	r := claim(102, "b", 2).(*ClaimResult)
	if !r.Claimed || r.Window.Attempts != 2 || r.Window.FirstStartedAt != 1 || r.Window.StartedAt != 102 {
		t.Fatalf("resume: %+v", r)
	}
	w := complete(103, "b", 2, "done").(*WindowResult).Window
	if !w.Completed || w.CompletedAt != 103 || string(w.Result) != "done" {
		t.Fatalf("complete: %+v", w)
	}
	// Completed once: a retry by b returns the record, others are refused.
	if again := complete(104, "b", 2, "x").(*WindowResult).Window; string(again.Result) != "done" || again.CompletedAt != 103 {
		t.Fatalf("retry changed the record: %+v", again)
	}
	mustAcquire(t, f, 300, "daily-close", "c", 100)
	rej := complete(301, "c", 3, "second")
	wantReason(t, rej, coorderr.WindowCompleted)
	if rej.(*Rejection).Metadata["completed_by"] != "b" {
		t.Fatalf("rejection lacks who completed: %+v", rej)
	}
	// A late claim learns the window is complete, with the record.
	if r := claim(302, "c", 3).(*ClaimResult); r.Claimed || r.Window.Owner != "b" || r.Window.Attempts != 2 {
		t.Fatalf("late claim: %+v", r)
	}
}

func TestFencedCommit(t *testing.T) {
	commit := func(f *FSM, now int64, gen uint64, key, payload string) any {
		return run(t, f, now, &fsmv1.FencedCommit{Resource: "payments/store-42", LeaseName: "daily-close",
			Generation: gen, IdempotencyKey: key, Payload: []byte(payload)})
	}
	t.Run("paused holder, successor committed first", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		mustAcquire(t, f, 200, "daily-close", "b", 100)
		if r := commit(f, 201, 2, "", "b").(*CommitResult); !r.Accepted || r.MaxGeneration != 2 {
			t.Fatalf("successor: %+v", r)
		}
		wantReason(t, commit(f, 202, 1, "", "a"), coorderr.StaleToken)
	})
	t.Run("paused holder, successor not yet committed", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		if r := commit(f, 1, 1, "", "a").(*CommitResult); !r.Accepted {
			t.Fatalf("holder: %+v", r)
		}
		mustAcquire(t, f, 200, "daily-close", "b", 100)
		wantReason(t, commit(f, 202, 1, "", "a-late"), coorderr.StaleToken)
		if r, _ := f.Resource("payments/store-42"); r.MaxGeneration != 1 || r.Commits != 1 {
			t.Fatalf("refused commit changed the resource: %+v", r)
		}
	})
	t.Run("paused holder, nobody took over", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		wantReason(t, commit(f, 150, 1, "", "a-late"), coorderr.LeaseExpired)
	})
	t.Run("idempotency", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		first := commit(f, 1, 1, "close-2026-09-25-store-42", "42.00").(*CommitResult)
		if !first.Accepted || first.Duplicate {
			t.Fatalf("first: %+v", first)
		}
		// A retry after the lease lapsed still learns the first outcome.
		again := commit(f, 500, 1, "close-2026-09-25-store-42", "99.00").(*CommitResult)
		if !again.Accepted || !again.Duplicate || string(again.Payload) != "42.00" || again.Generation != 1 {
			t.Fatalf("repeat: %+v", again)
		}
		if r, _ := f.Resource("payments/store-42"); r.Commits != 1 {
			t.Fatalf("repeat counted as a commit: %+v", r)
		}
	})
	t.Run("refused key stays free", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		mustAcquire(t, f, 200, "daily-close", "b", 100)
		wantReason(t, commit(f, 201, 1, "k", "a"), coorderr.StaleToken)
		if r := commit(f, 202, 2, "k", "b").(*CommitResult); !r.Accepted || r.Duplicate || string(r.Payload) != "b" {
			t.Fatalf("rightful holder: %+v", r)
		}
	})
	t.Run("resource bound to one lease", func(t *testing.T) {
		f := New()
		mustAcquire(t, f, 0, "daily-close", "a", 100)
		mustAcquire(t, f, 0, "other", "a", 100)
		commit(f, 1, 1, "", "")
		wantReason(t, run(t, f, 2, &fsmv1.FencedCommit{Resource: "payments/store-42", LeaseName: "other", Generation: 1}), coorderr.ResourceLeaseMismatch)
	})
}

func TestPrune(t *testing.T) {
	f := New()
	mustAcquire(t, f, 0, "l", "a", 10_000)
	for i, now := range []int64{10, 20, 30} {
		w := string(rune('a' + i))
		run(t, f, now, &fsmv1.ClaimWindow{Job: "j", Window: w, LeaseName: "l", Owner: "a", Generation: 1})
		run(t, f, now, &fsmv1.CompleteWindow{Job: "j", Window: w, LeaseName: "l", Owner: "a", Generation: 1})
		run(t, f, now, &fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1, IdempotencyKey: w})
	}
	run(t, f, 40, &fsmv1.ClaimWindow{Job: "j", Window: "open", LeaseName: "l", Owner: "a", Generation: 1})
	r := run(t, f, 50, &fsmv1.Prune{CutoffMs: 25}).(*PruneResult)
	if r.Windows != 2 || r.Idempotency != 2 {
		t.Fatalf("prune: %+v", r)
	}
	ws, _ := f.Windows("j", "", 10)
	if len(ws) != 2 || ws[0].Window != "c" || ws[1].Window != "open" {
		t.Fatalf("left: %+v", ws)
	}
	// Leases and resource fences are never pruned.
	if _, _, ok := f.Lease("l"); !ok {
		t.Fatal("lease pruned")
	}
	if res, _ := f.Resource("r"); res.MaxGeneration != 1 {
		t.Fatalf("resource: %+v", res)
	}
	// The pruned key is free again, the kept one still deduplicates.
	if c := run(t, f, 60, &fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1, IdempotencyKey: "c"}).(*CommitResult); !c.Duplicate {
		t.Fatalf("kept key: %+v", c)
	}
}

func TestClockOnlyMovesForward(t *testing.T) {
	f := New()
	run(t, f, 1000, &fsmv1.Tick{})
	// A command stamped earlier (applied after a later one) is judged at the
	// FSM clock, so an expired lease cannot come back to life.
	mustAcquire(t, f, 1000, "l", "a", 100)
	run(t, f, 1200, &fsmv1.Tick{})
	wantReason(t, run(t, f, 1050, &fsmv1.Renew{Name: "l", Owner: "a", Generation: 1}), coorderr.LeaseExpired)
	if f.LeaseTime() != 1200 {
		t.Fatalf("clock went back: %d", f.LeaseTime())
	}
}

func TestUnknownCommandStops(t *testing.T) {
	f := New()
	data, _ := proto.Marshal(&fsmv1.Command{Type: 999})
	defer func() {
		if recover() == nil {
			t.Fatal("unknown command applied without stopping")
		}
	}()
	f.Apply(data)
}

func TestNonCommandEntriesIgnored(t *testing.T) {
	f := New()
	if out := f.ApplyBatch([][]byte{nil}); len(out) != 1 || out[0] != nil {
		t.Fatalf("%v", out)
	}
}

func TestListLeasesPaging(t *testing.T) {
	f := New()
	for _, n := range []string{"a/1", "a/2", "a/3", "b/1"} {
		mustAcquire(t, f, 0, n, "o", 10)
	}
	page, more := f.Leases("a/", "", 2)
	if len(page) != 2 || !more || page[1].Name != "a/2" {
		t.Fatalf("page 1: %+v %v", page, more)
	}
	page, more = f.Leases("a/", "a/2", 2)
	if len(page) != 1 || more || page[0].Name != "a/3" {
		t.Fatalf("page 2: %+v %v", page, more)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	f, g := twins(t, buildState)
	// Both continue identically: generations continue, windows stay complete,
	// idempotency and prune queues survive.
	for _, x := range []*FSM{f, g} {
		if l := mustAcquire(t, x, 10_000, "lease-1", "z", 10); l.Generation != 3 {
			t.Fatalf("generation after restore: %+v", l)
		}
		if r := run(t, x, 10_001, &fsmv1.Prune{CutoffMs: 2500}).(*PruneResult); r.Windows != 3 || r.Idempotency != 3 {
			t.Fatalf("prune after restore: %+v", r)
		}
	}
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after continuing")
	}
	if _, err := readSnapshot(bytes.NewReader([]byte("garbage"))); err == nil {
		t.Fatal("garbage snapshot accepted")
	}
	buf := snapshotOf(t, f)
	if _, err := readSnapshot(bytes.NewReader(buf.Bytes()[:buf.Len()-3])); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
}

func buildState(t testing.TB, f *FSM) {
	for i := int64(0); i < 5; i++ {
		name := "lease-" + string(rune('0'+i))
		base := i * 1000
		run(t, f, base, acq(name, "a", 100, "r"))
		if r := run(t, f, base+200, acq(name, "b", 1000, "")).(*AcquireResult); r.Lease.Generation != 2 {
			t.Fatalf("build: %+v", r)
		}
		run(t, f, base+201, &fsmv1.ClaimWindow{Job: "j", Window: name, LeaseName: name, Owner: "b", Generation: 2})
		run(t, f, base+202, &fsmv1.CompleteWindow{Job: "j", Window: name, LeaseName: name, Owner: "b", Generation: 2, Result: []byte("ok")})
		run(t, f, base+203, &fsmv1.FencedCommit{Resource: "res/" + name, LeaseName: name, Generation: 2, IdempotencyKey: "k", Payload: []byte("p")})
	}
	run(t, f, 5000, &fsmv1.SetMember{Id: "n1", GrpcAddress: "127.0.0.1:1"})
	run(t, f, 5001, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{Name: "lease-1", Schedule: "@daily"}})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestRegisterJob(t *testing.T) {
	f := New()
	rec := &fsmv1.JobRecord{Name: "daily-close", Schedule: "5 0 * * *", TimeZone: "America/Sao_Paulo", RegisteredBy: "r1"}
	first := run(t, f, 10, &fsmv1.RegisterJob{Job: rec}).(*RegistryJobResult)
	if !first.Changed || first.RegistryJob.RegisteredAt != 10 {
		t.Fatalf("register: %+v", first)
	}
	// The same spec from another replica changes nothing.
	again := run(t, f, 20, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{Name: "daily-close", Schedule: "5 0 * * *",
		TimeZone: "America/Sao_Paulo", RegisteredBy: "r2"}}).(*RegistryJobResult)
	if again.Changed || again.RegistryJob.UpdatedAt != 10 || again.RegistryJob.RegisteredBy != "r1" {
		t.Fatalf("re-register: %+v", again)
	}
	// Completions are noted on the job.
	mustAcquire(t, f, 30, "daily-close", "a", 100)
	run(t, f, 31, &fsmv1.ClaimWindow{Job: "daily-close", Window: "2026-09-25", LeaseName: "daily-close", Owner: "a", Generation: 1})
	run(t, f, 32, &fsmv1.CompleteWindow{Job: "daily-close", Window: "2026-09-25", LeaseName: "daily-close", Owner: "a", Generation: 1})
	// A changed spec keeps the registration time and the last completion.
	changed := run(t, f, 40, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{Name: "daily-close", Schedule: "10 0 * * *",
		TimeZone: "America/Sao_Paulo"}}).(*RegistryJobResult)
	if !changed.Changed || changed.RegistryJob.RegisteredAt != 10 || changed.RegistryJob.UpdatedAt != 40 ||
		changed.RegistryJob.LastCompletedWindow != "2026-09-25" || changed.RegistryJob.LastCompletedAt != 32 {
		t.Fatalf("update: %+v", changed)
	}
	wantReason(t, run(t, f, 50, &fsmv1.RegisterJob{Job: &fsmv1.JobRecord{Name: "x"}}), coorderr.InvalidArgument)
	if ws := f.RecentWindows("daily-close", 5); len(ws) != 1 || ws[0].Window != "2026-09-25" {
		t.Fatalf("recent: %+v", ws)
	}
}

// A batch applies its commands in order, each at its own stamp, with one
// result each; it ends in the same state as the commands one by one.
func TestBatch(t *testing.T) {
	cmds := []*fsmv1.Command{
		Envelope(100, acq("l", "a", 50, "")),
		Envelope(120, &fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1, IdempotencyKey: "k"}),
		Envelope(200, acq("l", "b", 50, "")), // a's lease expired at 150
		Envelope(201, &fsmv1.FencedCommit{Resource: "r", LeaseName: "l", Generation: 1}),
		Envelope(202, &fsmv1.Batch{}),
	}
	batched, single := New(), New()
	res := run(t, batched, 0, &fsmv1.Batch{Commands: cmds}).(BatchResult)
	if len(res) != 5 {
		t.Fatalf("results: %v", res)
	}
	if r := res[2].(*AcquireResult); !r.Acquired || r.Lease.Generation != 2 {
		t.Fatalf("second acquire in the batch: %+v", r)
	}
	wantReason(t, res[3], coorderr.StaleToken)
	wantReason(t, res[4], coorderr.InvalidArgument)
	for _, c := range cmds[:4] {
		single.ApplyCommand(c)
	}
	if batched.Digest() != single.Digest() || batched.LeaseTime() != 201 {
		t.Fatalf("batch and single differ (clock %d)", batched.LeaseTime())
	}
}

func TestIdentityBinding(t *testing.T) {
	f := New()
	a := &fsmv1.Acquire{Name: "job", Owner: "o", TtlMs: 100, RequestId: "r1", Identity: "billing"}
	r := run(t, f, 1000, a).(*AcquireResult)
	if !r.Acquired || r.Lease.Identity != "billing" {
		t.Fatalf("acquire: %+v", r)
	}
	// Another identity with the right owner and generation is refused for
	// every holder operation.
	wantReason(t, run(t, f, 1001, &fsmv1.Renew{Name: "job", Owner: "o", Generation: 1, Identity: "mallory"}), coorderr.IdentityMismatch)
	wantReason(t, run(t, f, 1002, &fsmv1.Release{Name: "job", Owner: "o", Generation: 1, Identity: "mallory"}), coorderr.IdentityMismatch)
	wantReason(t, run(t, f, 1003, &fsmv1.ClaimWindow{Job: "j", Window: "w", LeaseName: "job", Owner: "o", Generation: 1, Identity: "mallory"}), coorderr.IdentityMismatch)
	wantReason(t, run(t, f, 1003, &fsmv1.CompleteWindow{Job: "j", Window: "w", LeaseName: "job", Owner: "o", Generation: 1, Identity: ""}), coorderr.IdentityMismatch)
	// A retry of the grant by another identity with the same request id is
	// not that grant.
	if r := run(t, f, 1004, &fsmv1.Acquire{Name: "job", Owner: "o", TtlMs: 100, RequestId: "r1", Identity: "mallory"}).(*AcquireResult); r.Acquired {
		t.Fatalf("retry by another identity granted: %+v", r)
	}
	// The bound identity can.
	if _, ok := run(t, f, 1005, &fsmv1.Renew{Name: "job", Owner: "o", Generation: 1, Identity: "billing"}).(*LeaseResult); !ok {
		t.Fatal("renew by the bound identity refused")
	}
	if r := run(t, f, 1006, &fsmv1.Release{Name: "job", Owner: "o", Generation: 1, Identity: "billing"}).(*ReleaseResult); !r.Released {
		t.Fatalf("release by the bound identity: %+v", r)
	}
	// After release, any identity may take the next generation, bound to it.
	r = run(t, f, 1007, &fsmv1.Acquire{Name: "job", Owner: "o2", TtlMs: 100, Identity: "ops"}).(*AcquireResult)
	if !r.Acquired || r.Lease.Generation != 2 || r.Lease.Identity != "ops" {
		t.Fatalf("next grant: %+v", r)
	}
	// The binding survives a snapshot.
	g := restored(t, f)
	wantReason(t, run(t, g, 1008, &fsmv1.Renew{Name: "job", Owner: "o2", Generation: 2, Identity: "billing"}), coorderr.IdentityMismatch)
}

func TestLiveLeaseLimit(t *testing.T) {
	f := New()
	acquire := func(now int64, name, identity string) any {
		return run(t, f, now, &fsmv1.Acquire{Name: name, Owner: "o", TtlMs: 100, Identity: identity, MaxLiveLeases: 2})
	}
	for _, name := range []string{"a", "b"} {
		if r, ok := acquire(1000, name, "x").(*AcquireResult); !ok || !r.Acquired {
			t.Fatalf("acquire %s: %#v", name, r)
		}
	}
	wantReason(t, acquire(1001, "c", "x"), coorderr.LeaseLimit)
	// Other identities are not affected.
	if r, ok := acquire(1001, "c", "y").(*AcquireResult); !ok || !r.Acquired {
		t.Fatalf("other identity: %#v", r)
	}
	// A released lease and an expired one stop counting.
	run(t, f, 1002, &fsmv1.Release{Name: "a", Owner: "o", Generation: 1, Identity: "x"})
	if r, ok := acquire(1003, "d", "x").(*AcquireResult); !ok || !r.Acquired {
		t.Fatalf("after release: %#v", r)
	}
	wantReason(t, acquire(1004, "e", "x"), coorderr.LeaseLimit)
	if r, ok := acquire(1100, "e", "x").(*AcquireResult); !ok || !r.Acquired { // b expired at 1100
		t.Fatalf("after expiry: %#v", r)
	}
	// The limit survives a restore (the index is rebuilt from the leases).
	g := restored(t, f)
	wantReason(t, run(t, g, 1101, &fsmv1.Acquire{Name: "f", Owner: "o", TtlMs: 100, Identity: "x", MaxLiveLeases: 2}), coorderr.LeaseLimit)
}

func TestAcquireWithClaimAndCompleteWithRelease(t *testing.T) {
	f := New()
	a := &fsmv1.Acquire{Name: "job", Owner: "a", TtlMs: 100, RequestId: "r1", ClaimJob: "job", ClaimWindow: "w1"}
	r := run(t, f, 1000, a).(*AcquireResult)
	if !r.Acquired || r.Claim == nil || !r.Claim.Claimed || r.Claim.Window.Attempts != 1 || r.Claim.Window.Generation != 1 {
		t.Fatalf("acquire+claim: %+v %+v", r, r.Claim)
	}
	// A retry with the same request id is the same grant and the same claim.
	if r := run(t, f, 1001, a).(*AcquireResult); !r.Acquired || r.Lease.Generation != 1 || r.Claim.Window.Attempts != 1 {
		t.Fatalf("retry: %+v %+v", r, r.Claim)
	}
	// Another owner: held, no claim.
	if r := run(t, f, 1002, &fsmv1.Acquire{Name: "job", Owner: "b", TtlMs: 100, ClaimJob: "job", ClaimWindow: "w1"}).(*AcquireResult); r.Acquired || r.Claim != nil {
		t.Fatalf("held: %+v", r)
	}
	// Complete and release in one command.
	done := &fsmv1.CompleteWindow{Job: "job", Window: "w1", LeaseName: "job", Owner: "a", Generation: 1, Result: []byte("ok"), Release: true}
	w := run(t, f, 1003, done).(*WindowResult)
	if !w.Window.Completed || !w.Released {
		t.Fatalf("complete+release: %+v", w)
	}
	if l, _, _ := f.Lease("job"); !l.Released {
		t.Fatalf("lease not released: %+v", l)
	}
	// A retry returns the record; the lease is already released.
	if w := run(t, f, 1004, done).(*WindowResult); !w.Window.Completed || w.Released {
		t.Fatalf("retry of complete+release: %+v", w)
	}
	// The completed window grants nothing: no new generation.
	r = run(t, f, 1005, &fsmv1.Acquire{Name: "job", Owner: "c", TtlMs: 100, ClaimJob: "job", ClaimWindow: "w1"}).(*AcquireResult)
	if r.Acquired || r.Claim == nil || r.Claim.Claimed || r.Claim.Window.Owner != "a" {
		t.Fatalf("acquire for a completed window: %+v %+v", r, r.Claim)
	}
	if l, _, _ := f.Lease("job"); l.Generation != 1 {
		t.Fatalf("a grant happened for a completed window: %+v", l)
	}
	// A resumed window counts a second attempt.
	run(t, f, 1006, &fsmv1.Acquire{Name: "job", Owner: "a", TtlMs: 100, ClaimJob: "job", ClaimWindow: "w2"})
	r = run(t, f, 1200, &fsmv1.Acquire{Name: "job", Owner: "c", TtlMs: 100, ClaimJob: "job", ClaimWindow: "w2"}).(*AcquireResult)
	if !r.Acquired || r.Lease.Generation != 3 || r.Claim.Window.Attempts != 2 {
		t.Fatalf("resume: %+v %+v", r, r.Claim)
	}
	wantReason(t, run(t, f, 1201, &fsmv1.Acquire{Name: "x", Owner: "c", TtlMs: 100, ClaimJob: "job"}), coorderr.InvalidArgument)
}

func TestClaimNotBefore(t *testing.T) {
	f := New()
	early := &fsmv1.Acquire{Name: "job", Owner: "a", TtlMs: 100, ClaimJob: "job", ClaimWindow: "w1", ClaimNotBeforeMs: 5000}
	rej := run(t, f, 4200, early)
	wantReason(t, rej, coorderr.TooEarly)
	if got := rej.(*Rejection).Metadata["wait_ms"]; got != "800" {
		t.Fatalf("wait_ms %q", got)
	}
	if _, _, ok := f.Lease("job"); ok {
		t.Fatal("a refused early claim granted the lease")
	}
	if r := run(t, f, 5000, early).(*AcquireResult); !r.Acquired || !r.Claim.Claimed {
		t.Fatalf("at the not-before time: %+v", r)
	}
	run(t, f, 5001, &fsmv1.CompleteWindow{Job: "job", Window: "w1", LeaseName: "job", Owner: "a", Generation: 1, Release: true})
	// A completed window answers "completed" whatever the time.
	if r := run(t, f, 10, early).(*AcquireResult); r.Acquired || r.Claim.Claimed {
		t.Fatalf("completed window: %+v", r)
	}
}

func TestReleaseHandsOffToTheNextWaiter(t *testing.T) {
	f := New()
	mustAcquire(t, f, 1000, "job", "a", 100)
	next := &fsmv1.Acquire{Name: "job", Owner: "b", TtlMs: 100, RequestId: "rb", Identity: "id-b"}
	r := run(t, f, 1010, &fsmv1.Release{Name: "job", Owner: "a", Generation: 1, Handoff: next}).(*ReleaseResult)
	h, ok := r.Handoff.(*AcquireResult)
	if !r.Released || !ok || !h.Acquired || h.Lease.Generation != 2 || h.Lease.Owner != "b" || h.Lease.Identity != "id-b" {
		t.Fatalf("handoff: %+v %#v", r, r.Handoff)
	}
	// A refused release hands nothing off.
	wantReason(t, run(t, f, 1020, &fsmv1.Release{Name: "job", Owner: "a", Generation: 1,
		Handoff: &fsmv1.Acquire{Name: "job", Owner: "c", TtlMs: 100}}), coorderr.IdentityMismatch)
	if l, _, _ := f.Lease("job"); l.Owner != "b" {
		t.Fatalf("after a refused release: %+v", l)
	}
	// A handoff must be for the released lease.
	r = run(t, f, 1030, &fsmv1.Release{Name: "job", Owner: "b", Generation: 2, Identity: "id-b", Handoff: &fsmv1.Acquire{Name: "other", Owner: "c", TtlMs: 100}}).(*ReleaseResult)
	wantReason(t, r.Handoff, coorderr.InvalidArgument)
}

// snapshotOf is f's snapshot.
func snapshotOf(tb testing.TB, f *FSM) *bytes.Buffer {
	tb.Helper()
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		tb.Fatal(err)
	}
	return &buf
}

// restoreFrom is a new FSM restored from snap.
func restoreFrom(tb testing.TB, snap []byte) *FSM {
	tb.Helper()
	g := New()
	if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		tb.Fatal(err)
	}
	return g
}

// restored is a new FSM restored from f's snapshot.
func restored(tb testing.TB, f *FSM) *FSM {
	tb.Helper()
	return restoreFrom(tb, snapshotOf(tb, f).Bytes())
}

// twins builds a state with build on a new FSM and restores a second one
// from its snapshot; the two must have the same digest.
func twins(t *testing.T, build func(testing.TB, *FSM)) (f, g *FSM) {
	t.Helper()
	f = New()
	build(t, f)
	g = restored(t, f)
	if f.Digest() != g.Digest() {
		t.Fatal("digest differs after restore")
	}
	return f, g
}

// Digest reuses its last result only while nothing changed: every applied
// command and every restore invalidates it.
func TestDigestFollowsChanges(t *testing.T) {
	f := New()
	d0 := f.Digest()
	if f.Digest() != d0 {
		t.Fatal("digest changed without a change")
	}
	run(t, f, 10, acq("a", "o", 1000, "r"))
	d1 := f.Digest()
	if d1 == d0 {
		t.Fatal("digest kept after a command")
	}
	g := restored(t, f)
	if g.Digest() != d1 {
		t.Fatal("restored replica digest differs")
	}
	if err := g.Restore(nopCloser{bytes.NewReader(nil)}); err == nil {
		t.Fatal("empty snapshot restored")
	}
	if err := g.Restore(nopCloser{bytes.NewReader(snapshotOf(t, New()).Bytes())}); err != nil {
		t.Fatal(err)
	}
	if g.Digest() != d0 {
		t.Fatal("digest kept across a restore")
	}
}
