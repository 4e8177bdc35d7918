package tlsutil_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/tlsutil"
)

// newTestCA is a new dev CA saved in a temporary directory, and the files
// a node would use there (the CA's certificate, node.pem, node-key.pem).
func newTestCA(t *testing.T) (*devca.CA, tlsutil.Files) {
	t.Helper()
	dir := t.TempDir()
	ca, err := devca.New("ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	return ca, tlsutil.Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem"), CA: filepath.Join(dir, devca.CACert)}
}

// writeLeaf issues a certificate for name (see devca.CA.Issue) and writes
// it and its key to files.
func writeLeaf(t *testing.T, ca *devca.CA, files tlsutil.Files, name string, server bool, hosts []string) {
	t.Helper()
	leaf, err := ca.Issue(name, server, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Cert, leaf.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Key, leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Reload swaps the certificate new handshakes see; a broken file keeps the
// previous one.
func TestReloaderReload(t *testing.T) {
	ca, files := newTestCA(t)
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
	writeLeaf(t, ca, files, "old-name", true, nil)
	r, err := tlsutil.NewReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(r); got != "old-name" {
		t.Fatalf("served %q", got)
	}
	writeLeaf(t, ca, files, "new-name", true, nil)
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

// A client configured without a certificate fails its own handshake with
// ErrNoClientCert when the server requires one — every time, also under
// TLS 1.3, where the server's refusal would otherwise arrive after the
// client's handshake had finished and surface as a broken pipe.
func TestClientWithoutCertificateFailsItsHandshake(t *testing.T) {
	ca, files := newTestCA(t)
	writeLeaf(t, ca, files, "node1", true, []string{"127.0.0.1"})
	r, err := tlsutil.NewReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	anon, err := tlsutil.ClientConfig(tlsutil.Files{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	anon.ServerName = "127.0.0.1"
	for i := 0; i < 20; i++ {
		c, err := tls.Dial("tcp", lis.Addr().String(), anon)
		if err == nil {
			c.Close()
			t.Fatalf("attempt %d: handshake without a client certificate succeeded", i)
		}
		if !errors.Is(err, tlsutil.ErrNoClientCert) {
			t.Fatalf("attempt %d: %v, want ErrNoClientCert", i, err)
		}
	}
	// With a certificate the same server accepts the client.
	dir := filepath.Dir(files.CA)
	cf := tlsutil.Files{Cert: filepath.Join(dir, "c.pem"), Key: filepath.Join(dir, "c-key.pem"), CA: files.CA}
	writeLeaf(t, ca, cf, "billing", false, nil)
	withCert, err := tlsutil.ClientConfig(cf)
	if err != nil {
		t.Fatal(err)
	}
	withCert.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", lis.Addr().String(), withCert)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Membership is the node profile's (URI SAN coordd://node/<id>, serverAuth
// and clientAuth), never a name: a client certificate named node1, one
// with only a DNS SAN node3, and one with the node URI but client usage
// only are not node certificates.
func TestNodeID(t *testing.T) {
	ca, files := newTestCA(t)
	writeLeaf(t, ca, files, "node1", true, nil)
	r, err := tlsutil.NewReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := r.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	if tlsutil.NodeID(leaf) != "node1" || tlsutil.Identity(leaf) != "node1" {
		t.Fatalf("node certificate: node %q, identity %q (URIs %v)", tlsutil.NodeID(leaf), tlsutil.Identity(leaf), leaf.URIs)
	}
	if err := r.CheckNode("node1", "cert"); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckNode("node2", "cert"); err == nil || !strings.Contains(err.Error(), "certs issue node2 --node") {
		t.Fatalf("node1's certificate as node2's: %v", err)
	}
	st := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	if p := tlsutil.PeerOf(st); p != (tlsutil.Peer{Identity: "node1", Node: true}) {
		t.Fatalf("peer %+v", p)
	}
	client, err := ca.Issue("node1", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := parsePEM(t, client.CertPEM)
	if tlsutil.NodeID(c) != "" || tlsutil.Identity(c) != "node1" {
		t.Fatalf("client certificate named node1: node %q, identity %q", tlsutil.NodeID(c), tlsutil.Identity(c))
	}
	if p := tlsutil.PeerOf(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}); p != (tlsutil.Peer{Identity: "node1"}) {
		t.Fatalf("client peer %+v", p)
	}
	dnsOnly := *c
	dnsOnly.Subject.CommonName, dnsOnly.DNSNames = "", []string{"node3"}
	if tlsutil.NodeID(&dnsOnly) != "" || tlsutil.Identity(&dnsOnly) != "node3" {
		t.Fatalf("DNS SAN node3: node %q, identity %q", tlsutil.NodeID(&dnsOnly), tlsutil.Identity(&dnsOnly))
	}
	clientUsage := *leaf
	clientUsage.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if tlsutil.NodeID(&clientUsage) != "" {
		t.Fatal("a certificate with the node URI and client usage only is a node certificate")
	}
	twoNodes := *leaf
	twoNodes.URIs = append(twoNodes.URIs, tlsutil.NodeURI("node2"))
	if tlsutil.NodeID(&twoNodes) != "" {
		t.Fatal("a certificate naming two nodes is a node certificate")
	}
	if tlsutil.PeerOf(nil) != (tlsutil.Peer{}) || tlsutil.PeerOf(&tls.ConnectionState{}) != (tlsutil.Peer{}) {
		t.Fatal("a connection without a verified certificate has a peer")
	}
}

func parsePEM(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
