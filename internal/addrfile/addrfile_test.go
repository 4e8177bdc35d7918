package addrfile

import (
	"errors"
	"os"
	"testing"
)

// Write replaces the file whole and leaves no temporary file; Read returns
// what was written; Remove makes Read report os.ErrNotExist.
func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a dir without the file: %v", err)
	}
	for _, a := range []Addresses{
		{ID: "node1", GRPC: "127.0.0.1:40001", HTTP: "127.0.0.1:40002", Raft: "127.0.0.1:40003"},
		{ID: "node1", GRPC: "127.0.0.1:40004", Raft: "127.0.0.1:40005"},
	} {
		if err := Write(dir, a); err != nil {
			t.Fatal(err)
		}
		got, err := Read(dir)
		if err != nil || got != a {
			t.Fatalf("Read = %+v, %v; want %+v", got, err, a)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != Name {
		t.Fatalf("dir holds %v (%v), want only %s", entries, err, Name)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("Remove of a missing file: %v", err)
	}
	if _, err := Read(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read after Remove: %v", err)
	}
}
