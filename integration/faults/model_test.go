//go:build faults

package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The fencing model must reject what the server must never do; otherwise
// checker 2 proves nothing.
func TestFencingModelCatchesViolations(t *testing.T) {
	op := func(client int, in any, call, ret int64, o out) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: o, Return: ret}
	}
	base := []porcupine.Operation{
		op(0, acquireIn{}, 0, 10, out{ok: true, granted: true, gen: 1}),
		op(0, commitIn{gen: 1}, 20, 30, out{ok: true, accepted: true}),
		op(1, acquireIn{}, 40, 50, out{ok: true, granted: true, gen: 2}), // A's lease lapsed: B takes over
	}
	cases := map[string]struct {
		extra []porcupine.Operation
		want  porcupine.CheckResult
	}{
		"stale commit refused":       {[]porcupine.Operation{op(0, commitIn{gen: 1}, 60, 70, out{reason: "STALE_TOKEN"})}, porcupine.Ok},
		"stale commit accepted":      {[]porcupine.Operation{op(0, commitIn{gen: 1}, 60, 70, out{ok: true, accepted: true})}, porcupine.Illegal},
		"successor's commit":         {[]porcupine.Operation{op(1, commitIn{gen: 2}, 60, 70, out{ok: true, accepted: true})}, porcupine.Ok},
		"current token called stale": {[]porcupine.Operation{op(1, commitIn{gen: 2}, 60, 70, out{reason: "STALE_TOKEN"})}, porcupine.Illegal},
		"generation reused":          {[]porcupine.Operation{op(2, acquireIn{}, 60, 70, out{ok: true, granted: true, gen: 2})}, porcupine.Illegal},
		"commit after release":       {[]porcupine.Operation{op(1, releaseIn{gen: 2}, 60, 70, out{ok: true}), op(1, commitIn{gen: 2}, 80, 90, out{ok: true, accepted: true})}, porcupine.Illegal},
		"unknown acquire then grant": {[]porcupine.Operation{op(2, acquireIn{}, 60, 1<<62, out{unknown: true}), op(3, acquireIn{}, 70, 80, out{ok: true, granted: true, gen: 4})}, porcupine.Ok},
	}
	for name, c := range cases {
		got := porcupine.CheckOperationsTimeout(fenceModel.ToModel(), append(append([]porcupine.Operation(nil), base...), c.extra...), 10*time.Second)
		if got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
}
