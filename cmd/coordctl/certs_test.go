package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/tlsutil"
)

func TestCertsDevWritesLoadableFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errOut bytes.Buffer
	if code := run([]string{"certs", "dev", "--dir", dir, "--nodes", "n1,n2", "--clients", "admin"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, name := range []string{"n1", "n2", "admin"} {
		if !strings.Contains(out.String(), filepath.Join(dir, name+".pem")) {
			t.Fatalf("output does not name %s: %s", name, out.String())
		}
		f := tlsutil.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}
		if _, err := tlsutil.NewReloader(f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Running it again adds what is missing and refuses to overwrite.
	out.Reset()
	errOut.Reset()
	if code := run([]string{"certs", "issue", "ops", "--dir", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("issue: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"certs", "issue", "ops", "--dir", dir}, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "already exists") {
		t.Fatalf("second issue: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"certs", "issue", "x", "--dir", t.TempDir()}, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "no CA") {
		t.Fatalf("issue without a CA: exit %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
}
