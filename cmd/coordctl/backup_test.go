package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/testcluster"
)

// snapshot save writes a verified backup of the leader's state; inspect
// prints its header and counts; bad input is a usage error or a clear one.
func TestSnapshotSaveAndInspect(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	ctlOK(t, eps, "lease", "acquire", "a", "--owner", "alice", "--ttl", "30s")
	ctlOK(t, eps, "lease", "acquire", "b", "--owner", "alice", "--ttl", "30s")
	ctlOK(t, eps, "lease", "release", "b", "--owner", "alice", "--generation", "1")
	ctlOK(t, eps, "lease", "acquire", "b", "--owner", "bob", "--ttl", "30s")
	file := filepath.Join(t.TempDir(), "b.snap")
	if out := ctlOK(t, eps, "snapshot", "save", file); !strings.HasPrefix(out, "saved "+file+": index ") || !strings.Contains(out, "(verified)") {
		t.Fatalf("save: %q", out)
	}
	out := ctlOK(t, nil, "snapshot", "inspect", file)
	for _, want := range []string{"format               backup v1, snapshot v1", "leases               2 (2 held, highest generation 2)", "(verified)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect: no %q in\n%s", want, out)
		}
	}
	var js struct {
		Header struct{ Index, Size uint64 }
		Counts struct {
			Leases     int `json:"leases"`
			LiveLeases int `json:"live_leases"`
		}
	}
	if err := json.Unmarshal([]byte(ctlOK(t, nil, "-o", "json", "snapshot", "inspect", file)), &js); err != nil ||
		js.Header.Index == 0 || js.Header.Size == 0 || js.Counts.Leases != 2 || js.Counts.LiveLeases != 2 {
		t.Fatalf("inspect -o json: %+v %v", js, err)
	}
	if r := ctl(t, eps, "snapshot", "save"); r.code != exitUsage {
		t.Errorf("save without a file: exit %d %s", r.code, r.errOut)
	}
	if r := ctl(t, eps, "snapshot", "save", filepath.Join(t.TempDir(), "no", "such", "dir", "b.snap")); r.code != exitError ||
		!strings.Contains(r.errOut, "no such file or directory") {
		t.Errorf("save into a missing directory: exit %d %s", r.code, r.errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	b, _ := os.ReadFile(file)
	b[len(b)-1] ^= 1
	os.WriteFile(bad, b, 0o600)
	if r := ctl(t, nil, "snapshot", "inspect", bad); r.code != exitError || !strings.Contains(r.errOut, "checksum mismatch") {
		t.Errorf("inspect of a corrupt file: exit %d %s", r.code, r.errOut)
	}
}
