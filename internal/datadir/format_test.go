package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFormatMarker(t *testing.T) {
	dir := t.TempDir()
	// No marker (a new dir, or one from before markers): this build's.
	if err := CheckFormat(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FormatFile))
	if err != nil || string(b) != "coordd-data-format 1\n" {
		t.Fatalf("marker %q %v", b, err)
	}
	if err := CheckFormat(dir); err != nil {
		t.Fatalf("second check: %v", err)
	}
	var fe *FormatError
	if err := os.WriteFile(filepath.Join(dir, FormatFile), []byte("coordd-data-format 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFormat(dir); !errors.As(err, &fe) || fe.Newer != 2 ||
		!strings.Contains(err.Error(), "has format 2, newer than this coordd knows (1)") {
		t.Fatalf("newer format: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FormatFile), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckFormat(dir); !errors.As(err, &fe) || fe.Newer != 0 || !strings.Contains(err.Error(), `holds "hello"`) {
		t.Fatalf("garbage marker: %v", err)
	}
}
