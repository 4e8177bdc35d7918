package devca

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/tlsutil"
)

func TestIssueVerifies(t *testing.T) {
	dir := t.TempDir()
	ca, err := New("test")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err == nil || !strings.Contains(err.Error(), "already holds a CA") {
		t.Fatalf("overwrote a CA: %v", err)
	}
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(loaded.Cert)
	for _, tc := range []struct {
		name   string
		server bool
		hosts  []string
	}{{"node1", true, []string{"10.0.0.4", "coordd-1.internal"}}, {"billing-worker", false, nil}} {
		certPath, keyPath, err := loaded.IssueTo(dir, tc.name, tc.server, tc.hosts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tlsutil.NewReloader(tlsutil.Files{Cert: certPath, Key: keyPath, CA: dir + "/" + CACert}); err != nil {
			t.Fatal(err)
		}
		leaf := parse(t, certPath)
		if tlsutil.Identity(leaf) != tc.name {
			t.Fatalf("identity %q, want %q", tlsutil.Identity(leaf), tc.name)
		}
		// The node profile: the node URI; a client certificate has none.
		if tc.server != (tlsutil.NodeID(leaf) == tc.name) || (!tc.server && len(leaf.URIs) > 0) {
			t.Fatalf("%s: node %q, URIs %v", tc.name, tlsutil.NodeID(leaf), leaf.URIs)
		}
		if isNode, err := IsNode(dir, tc.name); err != nil || isNode != tc.server {
			t.Fatalf("%s: IsNode %v %v", tc.name, isNode, err)
		}
		usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: usage, CurrentTime: time.Now()}); err != nil {
			t.Fatalf("%s as a client: %v", tc.name, err)
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if tc.server != (err == nil) {
			t.Fatalf("%s as a server on 127.0.0.1: %v", tc.name, err)
		}
		if tc.server && (!hasIP(leaf, "10.0.0.4") || leaf.VerifyHostname("coordd-1.internal") != nil) {
			t.Fatalf("%s: extra hosts missing: %v %v", tc.name, leaf.IPAddresses, leaf.DNSNames)
		}
	}
	if _, err := loaded.Issue("bad name/with slash", false, nil); err == nil {
		t.Fatal("an identity with a slash was issued")
	}
	// A certificate of another CA does not verify against this one.
	other, _ := New("other")
	leaf, _ := other.Issue("billing-worker", false, nil)
	b, _ := pem.Decode(leaf.CertPEM)
	c, _ := x509.ParseCertificate(b.Bytes)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("another CA's certificate verified")
	}
}

func parse(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hasIP(c *x509.Certificate, ip string) bool {
	for _, a := range c.IPAddresses {
		if a.Equal(net.ParseIP(ip)) {
			return true
		}
	}
	return false
}
