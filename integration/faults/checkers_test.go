//go:build faults

package faults

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/coordd/coordd/client"
)

// checkGenerations: per lease, granted generations are unique and strictly
// increasing in real-time order, also across restarts (checker 1).
func checkGenerations(t *testing.T, h history) {
	t.Helper()
	type grant struct {
		gen       uint64
		call, ret int64
		client    string
	}
	var gs []grant
	seen := map[uint64]string{}
	for _, o := range h.ops {
		if o.call.Op != "acquire" || !o.ok() || !o.ret.Accepted {
			continue
		}
		if c, dup := seen[o.ret.Gen]; dup {
			t.Errorf("generation %d granted to %s and %s", o.ret.Gen, c, o.client)
		}
		seen[o.ret.Gen] = o.client
		gs = append(gs, grant{o.ret.Gen, o.callNs, o.retNs, o.client})
	}
	for i := range gs {
		for j := range gs {
			if gs[i].ret < gs[j].call && gs[i].gen >= gs[j].gen {
				t.Errorf("generation %d (%s) granted before generation %d (%s) in real time", gs[i].gen, gs[i].client, gs[j].gen, gs[j].client)
			}
		}
	}
	t.Logf("checker 1: %d grants, generations unique and increasing", len(gs))
}

// The fencing authority's model for porcupine: one lease, one resource.
type fenceState struct {
	cur  uint64 // current generation
	held bool   // granted and not released
	max  uint64 // highest accepted generation
}

type acquireIn struct{}
type releaseIn struct{ gen uint64 }
type commitIn struct{ gen uint64 }
type out struct {
	unknown   bool
	ok        bool // the call succeeded
	granted   bool // acquire
	gen       uint64
	accepted  bool
	duplicate bool
	reason    string
}

var fenceModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{fenceState{}} },
	Step: func(st, in, o interface{}) []interface{} {
		s, res := st.(fenceState), o.(out)
		switch in := in.(type) {
		case acquireIn:
			switch {
			case res.unknown:
				return []interface{}{s, fenceState{cur: s.cur + 1, held: true, max: s.max}}
			case res.granted:
				if res.gen != s.cur+1 {
					return nil
				}
				return []interface{}{fenceState{cur: res.gen, held: true, max: s.max}}
			default:
				return []interface{}{s}
			}
		case releaseIn:
			released := fenceState{cur: s.cur, held: false, max: s.max}
			switch {
			case res.unknown:
				if in.gen == s.cur {
					return []interface{}{s, released}
				}
				return []interface{}{s}
			case res.ok:
				if in.gen != s.cur {
					return nil
				}
				return []interface{}{released}
			default:
				return []interface{}{s}
			}
		case commitIn:
			valid := in.gen == s.cur && s.held && in.gen >= s.max
			applied := fenceState{cur: s.cur, held: s.held, max: in.gen}
			switch {
			case res.duplicate:
				return []interface{}{s}
			case res.unknown:
				if valid {
					return []interface{}{s, applied}
				}
				return []interface{}{s}
			case res.accepted:
				if !valid {
					return nil
				}
				return []interface{}{applied}
			case res.reason == "STALE_TOKEN":
				if in.gen == s.cur && in.gen >= s.max {
					return nil // a current token was called stale
				}
				return []interface{}{s}
			default:
				return []interface{}{s} // expiry is not modelled: refusals for it are allowed
			}
		}
		return nil
	},
	DescribeOperation: func(in, o interface{}) string { return fmt.Sprintf("%T%+v -> %+v", in, in, o) },
}

// checkFencing runs porcupine over acquires, releases and commits
// (checker 2: accepted commits never go down and never come from a
// generation that was no longer current).
func checkFencing(t *testing.T, h history) {
	t.Helper()
	var ops []porcupine.Operation
	ids := map[string]int{}
	for _, o := range h.ops {
		id, ok := ids[o.client]
		if !ok {
			id = len(ids)
			ids[o.client] = id
		}
		res := out{unknown: o.unknown(), ok: o.ok(), reason: o.ret.Reason}
		var in interface{}
		switch o.call.Op {
		case "acquire":
			in = acquireIn{}
			res.granted, res.gen = o.ok() && o.ret.Accepted, o.ret.Gen
		case "release":
			in = releaseIn{gen: o.call.Gen}
		case "commit":
			in = commitIn{gen: o.call.Gen}
			res.accepted, res.duplicate = o.ok() && o.ret.Accepted && !o.ret.Duplicate, o.ok() && o.ret.Duplicate
		default:
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: id, Input: in, Call: o.callNs, Output: res, Return: o.retNs})
	}
	result := porcupine.CheckOperationsTimeout(fenceModel.ToModel(), ops, 90*time.Second)
	if result != porcupine.Ok {
		t.Errorf("checker 2: the fencing history is %s (%d operations)", result, len(ops))
		return
	}
	t.Logf("checker 2: %d operations linearizable against the fencing model", len(ops))
}

// checkWindows: each window completed at most once (checker 3).
func checkWindows(t *testing.T, h history) {
	t.Helper()
	by := map[string]map[uint64]bool{}
	for _, o := range h.ops {
		if o.call.Op == "complete" && o.ok() {
			if by[o.call.Window] == nil {
				by[o.call.Window] = map[uint64]bool{}
			}
			by[o.call.Window][o.call.Gen] = true
		}
	}
	for w, gens := range by {
		if len(gens) > 1 {
			t.Errorf("checker 3: window %s completed by generations %v", w, gens)
		}
	}
	t.Logf("checker 3: %d windows, each completed once", len(by))
}

// checkDurable: after healing, every acknowledged commit is still there —
// its key answers as a duplicate with the same generation — and the
// resource's max generation covers every accepted one (checker 4).
func checkDurable(t *testing.T, endpoints []string, h history, lease string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, endpoints, client.WithOwner("checker"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var maxGen uint64
	var keys []op
	resource := ""
	for _, o := range h.ops {
		if o.call.Op == "commit" && o.ok() && o.ret.Accepted && !o.ret.Duplicate {
			keys = append(keys, o)
			maxGen = max(maxGen, o.call.Gen)
			resource = o.call.Resource
		}
	}
	if len(keys) == 0 {
		return
	}
	res, err := c.GetResource(ctx, resource)
	if err != nil || res.GetMaxGeneration() < maxGen {
		t.Fatalf("checker 4: resource %v (%v), highest acknowledged generation %d", res, err, maxGen)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].call.Key < keys[j].call.Key })
	for _, k := range keys {
		r, err := c.FencedCommit(ctx, resource, client.FormatToken(lease, k.call.Gen), k.call.Key, nil)
		if err != nil || !r.Duplicate || r.Generation != k.call.Gen {
			t.Errorf("checker 4: acknowledged commit %s (generation %d) is not there: %+v %v", k.call.Key, k.call.Gen, r, err)
		}
	}
	t.Logf("checker 4: %d acknowledged commits present", len(keys))
}
