package backup

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
)

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func write(t *testing.T, path string, body []byte) *Header {
	t.Helper()
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(body); i += 1000 {
		if _, err := w.Write(body[i:min(i+1000, len(body))]); err != nil {
			t.Fatal(err)
		}
	}
	h, err := w.Commit(Header{SnapshotFormat: 1, Index: 42, Term: 3, NodeID: "n1", TakenAt: time.Unix(1e9, 0).UTC(),
		Members: []Member{{ID: "n1", RaftAddress: "127.0.0.1:7402"}}}, int64(len(body)), sum(body))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestWriteVerifyRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.snap")
	body := bytes.Repeat([]byte("coordd"), 5000)
	h := write(t, path, body)
	if h.Index != 42 || h.Term != 3 || h.Size != int64(len(body)) || h.SHA256 != sum(body) || h.Format != Format {
		t.Fatalf("header %+v", h)
	}
	h2, rc, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) || h2.NodeID != "n1" || len(h2.Members) != 1 {
		t.Fatalf("read back %d bytes, %v, %+v", len(got), err, h2)
	}
	// Nothing but the file itself is left in the directory.
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
}

// A transfer whose bytes do not match the sender's checksum writes
// nothing, and leaves an existing backup in place.
func TestCommitRefusesCorruptTransfer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.snap")
	write(t, path, []byte("first"))
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("second"))
	if _, err := w.Commit(Header{}, 6, sum([]byte("SECOND"))); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("commit of a corrupt transfer: %v", err)
	}
	if _, err := w.Commit(Header{}, 7, sum([]byte("second"))); err == nil {
		t.Fatal("a second commit succeeded")
	}
	h, err := Verify(path)
	if err != nil || h.Size != 5 {
		t.Fatalf("the first backup: %+v %v", h, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
}

func TestVerifyRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.snap")
	write(t, path, bytes.Repeat([]byte("x"), 10000))
	good, _ := os.ReadFile(path)
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"flipped":   {append(append([]byte(nil), good[:len(good)-1]...), 'y'), "checksum mismatch"},
		"truncated": {good[:len(good)-10], "truncated"},
		"extra":     {append(append([]byte(nil), good...), 'z'), "bytes after"},
		"short":     {good[:100], "shorter than its header"},
		"not ours":  {bytes.Repeat([]byte("a"), HeaderSize+10), "not a coordd backup"},
		"newer":     {append([]byte("coordd-backup-v7\n"), good[len(magic):]...), "backup format v7 is newer than this coordd reads (v1)"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, c.b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
