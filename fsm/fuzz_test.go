package fsm

import (
	"bytes"
	"fmt"
	"testing"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// FuzzCommands applies random command sequences and checks the guarantees
// after every step: generations only grow and are never reused (G1), at most
// one live holder (G2), accepted commits carry the current generation and
// never go down per resource (G4), a window completes at most once (G5), and
// a snapshot round trip preserves the digest (G8).
func FuzzCommands(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 1, 0, 0, 10, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 1, 1, 200, 6, 1, 1, 3, 2, 1, 1, 50}, 8))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := New()
		var now int64
		names := []string{"l0", "l1"}
		owners := []string{"a", "b", "c"}
		maxGen := map[string]uint64{}
		resMax := map[string]uint64{}
		completed := map[string]Window{}
		for len(data) >= 4 {
			op, a, b, c := data[0]%8, data[1], data[2], data[3]
			data = data[4:]
			now += int64(c % 64)
			name, owner := names[int(a)%len(names)], owners[int(b)%len(owners)]
			before, _, existed := x.Lease(name)
			gen := before.Generation
			if c&0x80 != 0 && gen > 0 {
				gen-- // sometimes a stale token
			}
			wkey := fmt.Sprintf("w%d", b%2)
			var body any
			switch op {
			case 0:
				body = acq(name, owner, int64(c%50)+1, fmt.Sprintf("r%d", a%3))
			case 1:
				body = &fsmv1.Renew{Name: name, Owner: owner, Generation: gen, TtlMs: int64(c % 40)}
			case 2:
				body = &fsmv1.Release{Name: name, Owner: owner, Generation: gen}
			case 3:
				body = &fsmv1.Tick{}
			case 4:
				body = &fsmv1.ClaimWindow{Job: "j", Window: wkey, LeaseName: name, Owner: owner, Generation: gen}
			case 5:
				body = &fsmv1.CompleteWindow{Job: "j", Window: wkey, LeaseName: name, Owner: owner, Generation: gen, Result: []byte{c}}
			case 6:
				body = &fsmv1.FencedCommit{Resource: "r-" + name, LeaseName: name, Generation: gen, IdempotencyKey: fmt.Sprintf("k%d", c%4)}
			case 7:
				body = &fsmv1.Prune{CutoffMs: now - int64(c)}
			}
			cmdNow := now - int64(a%8) // stamps may arrive slightly out of order
			clockBefore := x.Clock()
			out := run(t, x, cmdNow, body)
			at := max(clockBefore, cmdNow)
			switch r := out.(type) {
			case *AcquireResult:
				if r.Acquired && (!existed || r.Lease.Generation != before.Generation) {
					if existed && before.Live(at) {
						t.Fatalf("G2: %s granted to %s while %s held gen %d", name, owner, before.Owner, before.Generation)
					}
					if r.Lease.Generation <= maxGen[name] {
						t.Fatalf("G1: %s generation %d after %d", name, r.Lease.Generation, maxGen[name])
					}
					maxGen[name] = r.Lease.Generation
				}
			case *CommitResult:
				if !r.Duplicate {
					fc := body.(*fsmv1.FencedCommit)
					if fc.Generation != before.Generation || !before.Live(at) {
						t.Fatalf("G4: commit with gen %d accepted, lease %+v at %d", fc.Generation, before, at)
					}
					if fc.Generation < resMax[fc.Resource] {
						t.Fatalf("G4: resource %s went down to %d from %d", fc.Resource, fc.Generation, resMax[fc.Resource])
					}
					resMax[fc.Resource] = fc.Generation
				}
			case *WindowResult:
				if prev, ok := completed[wkey]; ok && (prev.CompletedAt != r.Window.CompletedAt || !bytes.Equal(prev.Result, r.Window.Result)) {
					t.Fatalf("G5: window %s completed twice: %+v then %+v", wkey, prev, r.Window)
				}
				completed[wkey] = r.Window
			case *PruneResult:
				for k, w := range completed {
					if w.CompletedAt < fcutoff(body) {
						delete(completed, k)
					}
				}
			}
		}
		var buf bytes.Buffer
		if err := x.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		y := New()
		if err := y.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
			t.Fatal(err)
		}
		if x.Digest() != y.Digest() {
			t.Fatal("G8: digest differs after snapshot round trip")
		}
	})
}

func fcutoff(body any) int64 { return body.(*fsmv1.Prune).CutoffMs }
