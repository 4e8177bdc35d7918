package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent fails while a generated file differs from
// what enumgen writes now (a value added to a .proto enum and not
// regenerated): run `go run ./internal/enumgen` from the repository root.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for _, f := range files {
		want, err := render(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", "..", f.path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run `go run ./internal/enumgen` from the repository root", f.path)
		}
	}
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{"LEASE_LOST": "LeaseLost", "TOO_EARLY": "TooEarly", "PUT": "Put", "UNSPECIFIED": "Unspecified"} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}
