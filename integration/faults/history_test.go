//go:build faults

package faults

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// record mirrors faultclient.Record.
type record struct {
	Kind       string `json:"kind"`
	Client     string `json:"client"`
	Seq        int64  `json:"seq"`
	Op         string `json:"op"`
	Lease      string `json:"lease"`
	Resource   string `json:"resource"`
	Window     string `json:"window"`
	Key        string `json:"key"`
	Gen        uint64 `json:"gen"`
	AtNs       int64  `json:"at_ns"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	Accepted   bool   `json:"accepted"`
	Duplicate  bool   `json:"duplicate"`
	Claimed    bool   `json:"claimed"`
	DeadlineNs int64  `json:"deadline_ns"`
}

// op is a call paired with its return; a call without one (the client was
// killed) is unknown and never returned.
type op struct {
	client string
	call   record
	ret    record
	callNs int64
	retNs  int64 // math.MaxInt64 when it never returned
}

func (o op) unknown() bool { return o.retNs == math.MaxInt64 || o.ret.Outcome == "unknown" }
func (o op) ok() bool      { return o.retNs != math.MaxInt64 && o.ret.Outcome == "ok" }

// history is every client's operations and events.
type history struct {
	ops    []op
	events []record
}

func loadHistory(t *testing.T, dir string) history {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var h history
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		calls := map[int64]record{}
		rets := map[int64]record{}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // a line cut by kill -9
			}
			switch r.Kind {
			case "call":
				calls[r.Seq] = r
			case "ret":
				rets[r.Seq] = r
			case "event":
				h.events = append(h.events, r)
			}
		}
		fh.Close()
		for seq, c := range calls {
			o := op{client: c.Client, call: c, callNs: c.AtNs, retNs: math.MaxInt64}
			if r, ok := rets[seq]; ok {
				o.ret, o.retNs = r, r.AtNs
			}
			h.ops = append(h.ops, o)
		}
	}
	sort.Slice(h.ops, func(i, j int) bool { return h.ops[i].callNs < h.ops[j].callNs })
	return h
}

func (h history) count(opName string) (ok, failed, unknown int) {
	for _, o := range h.ops {
		if o.call.Op != opName {
			continue
		}
		switch {
		case o.unknown():
			unknown++
		case o.ok():
			ok++
		default:
			failed++
		}
	}
	return
}

// byLease splits a history per lease (each client fences one resource
// with one lease), so every checker looks at one lease at a time.
func (h history) byLease() map[string]history {
	out := map[string]history{}
	for _, o := range h.ops {
		x := out[o.call.Lease]
		x.ops = append(x.ops, o)
		out[o.call.Lease] = x
	}
	for _, e := range h.events {
		x := out[e.Lease]
		x.events = append(x.events, e)
		out[e.Lease] = x
	}
	return out
}

// firstGrant returns the call and return times of client's first granted
// Acquire (zeros when there is none).
func (h history) firstGrant(client string) (callNs, retNs int64) {
	for _, o := range h.ops {
		if o.client == client && o.call.Op == "acquire" && o.ok() && o.ret.Accepted {
			return o.callNs, o.retNs
		}
	}
	return 0, 0
}

// commitsAfter fails the test for every commit of client that started
// after the given time and was accepted as a first effect; it returns how
// many commits started then and how many were refused.
func (h history) commitsAfter(t *testing.T, client string, after int64) (made, refused int) {
	t.Helper()
	for _, o := range h.ops {
		if o.client != client || o.call.Op != "commit" || o.callNs <= after {
			continue
		}
		made++
		if o.ok() && o.ret.Accepted && !o.ret.Duplicate {
			t.Errorf("%s's commit %s started after the successor's grant and was accepted", client, o.call.Key)
		}
		if !o.ok() {
			refused++
		}
	}
	return made, refused
}
