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

// Issue 32, item 3: a client certificate named after a node is refused
// (--node is the way), even once the node's files are gone; node
// certificates carry the node profile, client certificates do not.
func TestCertsIssueRefusesAClientNamedLikeANode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errOut bytes.Buffer
	if code := run([]string{"certs", "dev", "--dir", dir, "--nodes", "node1", "--clients", "admin"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	nodeOf := func(name string) string {
		t.Helper()
		r, err := tlsutil.NewReloader(tlsutil.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := r.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		return tlsutil.NodeID(leaf)
	}
	if nodeOf("node1") != "node1" || nodeOf("admin") != "" {
		t.Fatalf("profiles: node1 is node %q, admin is node %q", nodeOf("node1"), nodeOf("admin"))
	}
	for _, f := range []string{"node1.pem", "node1-key.pem"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	errOut.Reset()
	if code := run([]string{"certs", "issue", "node1", "--dir", dir}, &out, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), `"node1" is a node of this CA`) || !strings.Contains(errOut.String(), "--node") {
		t.Fatalf("client certificate named node1: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"certs", "dev", "--dir", dir, "--nodes", "node2", "--clients", "node2"}, &out, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), `"node2" is a node of this CA`) {
		t.Fatalf("certs dev with a client named like a node: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"certs", "issue", "node1", "--node", "--dir", dir}, &out, &errOut); code != exitOK || nodeOf("node1") != "node1" {
		t.Fatalf("node certificate node1: exit %d: %s", code, errOut.String())
	}
}
