package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/backup"
	"github.com/coordd/coordd/internal/logstore"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// writeBackup writes a backup of a state with a held lease (generation 2).
func writeBackup(t *testing.T, path string) {
	t.Helper()
	f := fsm.New()
	for i, owner := range []string{"a", "b"} {
		data, err := proto.Marshal(fsm.Envelope(int64(1000+100*i), &fsmv1.Acquire{Name: "l", Owner: owner, TtlMs: 50}))
		if err != nil {
			t.Fatal(err)
		}
		f.Apply(data)
	}
	var snap bytes.Buffer
	if err := f.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	w, err := backup.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(snap.Bytes())
	sum := sha256.Sum256(snap.Bytes())
	if _, err := w.Commit(backup.Header{SnapshotFormat: fsm.SnapshotFormat, Index: 77, Term: 5, NodeID: "old1", TakenAt: time.Now()},
		int64(snap.Len()), hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
}

// A restore writes, in either log store, one Raft snapshot at the
// backup's index and term with the new membership, the term as the
// current term, and the state with the lease released and bumped.
func TestRestoreSeedsEitherLogStore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	writeBackup(t, file)
	for _, kind := range []string{"wal", "bolt"} {
		data := filepath.Join(dir, kind)
		var out bytes.Buffer
		err := runRestore([]string{"--from", file, "--data-dir", data, "--id", "n2", "--raft-addr", "127.0.0.1:2",
			"--peers", "n1=127.0.0.1:1,n2=127.0.0.1:2", "--raft-log-store", kind, "--bump-generations", "10"}, &out)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if !strings.Contains(out.String(), "leases 1 (all released; generations +10, highest now 12)") {
			t.Errorf("%s: output %q", kind, out.String())
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(data, 2, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		list, err := snaps.List()
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: snapshots %v %v", kind, list, err)
		}
		m := list[0]
		if m.Index != 77 || m.Term != 5 || m.ConfigurationIndex != 77 || len(m.Configuration.Servers) != 2 ||
			m.Configuration.Servers[0].ID != "n1" || m.Configuration.Servers[1].Address != "127.0.0.1:2" {
			t.Fatalf("%s: snapshot meta %+v", kind, m)
		}
		_, rc, err := snaps.Open(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		g := fsm.New()
		if err := g.Restore(io.NopCloser(rc)); err != nil {
			t.Fatal(err)
		}
		if l, _, ok := g.Lease("l"); !ok || l.Generation != 12 || !l.Released {
			t.Fatalf("%s: lease after the restore %+v", kind, l)
		}
		st, err := logstore.Open(data, logstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		term, err := st.Stable.GetUint64([]byte("CurrentTerm"))
		last, _ := st.Logs.LastIndex()
		st.Close()
		if err != nil || term != 5 || last != 0 || string(st.Kind) != kind {
			t.Fatalf("%s: store %s, current term %d (%v), last index %d", kind, st.Kind, term, err, last)
		}
	}
}

func TestRestoreRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.snap")
	writeBackup(t, file)
	full := filepath.Join(dir, "full")
	os.MkdirAll(full, 0o750)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o600)
	base := []string{"--from", file, "--id", "n1", "--raft-addr", "127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", filepath.Join(dir, "d")}, "--from is required"},
		{append(base, "--data-dir", full), "is not empty (it holds x)"},
		{append(base, "--data-dir", filepath.Join(dir, "d"), "--peers", "n2=127.0.0.1:2"), "--peers must list this node as n1=127.0.0.1:1"},
		{append(base, "--data-dir", filepath.Join(dir, "d"), "--raft-log-store", "rocks"), "--raft-log-store"},
		{append(base, "--data-dir", filepath.Join(dir, "d"), "extra"), `unexpected argument "extra"`},
		{[]string{"--from", filepath.Join(dir, "missing.snap"), "--data-dir", filepath.Join(dir, "d"), "--id", "n1", "--raft-addr", "a:1"}, "no such file"},
	} {
		args := c.args
		if c.want == "--from is required" {
			args = append([]string{"--id", "n1", "--raft-addr", "127.0.0.1:1"}, args...)
		}
		err := runRestore(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err == nil {
		t.Error("a refused restore created the data dir")
	}
}
