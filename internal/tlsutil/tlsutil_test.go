package tlsutil_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Reload swaps the certificate new handshakes see; a broken file keeps the
// previous one.
func TestReloaderReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := devca.New("ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	issue := func(name string) {
		t.Helper()
		leaf, err := ca.Issue(name, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "node.pem"), leaf.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "node-key.pem"), leaf.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	served := func(r *tlsutil.Reloader) string {
		t.Helper()
		cfg, err := r.ServerConfig(true).GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return tlsutil.Identity(leaf)
	}
	issue("old-name")
	files := tlsutil.Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem"), CA: filepath.Join(dir, devca.CACert)}
	r, err := tlsutil.NewReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(r); got != "old-name" {
		t.Fatalf("served %q", got)
	}
	issue("new-name")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(r); got != "new-name" {
		t.Fatalf("after reload served %q", got)
	}
	if err := os.WriteFile(files.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("a broken key reloaded")
	}
	if got := served(r); got != "new-name" {
		t.Fatalf("after a failed reload served %q", got)
	}
	if err := (tlsutil.Files{Cert: "x"}).Validate(); err == nil {
		t.Fatal("a certificate without key and CA validated")
	}
}

func TestCheckPlaintext(t *testing.T) {
	if err := tlsutil.CheckPlaintext(false, tlsutil.Listener{"gRPC", "127.0.0.1:0"}, tlsutil.Listener{"HTTP", ""}, tlsutil.Listener{"Raft", "[::1]:7"}, tlsutil.Listener{"x", "localhost:1"}); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	err := tlsutil.CheckPlaintext(false, tlsutil.Listener{"gRPC", "0.0.0.0:7400"}, tlsutil.Listener{"Raft", "127.0.0.1:7402"})
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:7400 (gRPC)") || strings.Contains(err.Error(), "Raft") ||
		!strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("want a refusal naming the gRPC listener and --insecure, got %v", err)
	}
	if err := tlsutil.CheckPlaintext(true, tlsutil.Listener{"gRPC", "0.0.0.0:7400"}); err != nil {
		t.Fatalf("insecure: %v", err)
	}
}
