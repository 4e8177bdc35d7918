package testcluster

import (
	"crypto/tls"
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Certs is a development CA in a temp dir that issues node and client
// certificates for a test cluster running mutual TLS.
type Certs struct {
	t   testing.TB
	Dir string
	CA  *devca.CA
}

// NewCerts creates a CA in a fresh temp dir.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	ca, err := devca.New("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	return &Certs{t: t, Dir: dir, CA: ca}
}

// Files issues (once) a certificate for identity and returns its files
// with the CA bundle. node issues a server (node) certificate.
func (c *Certs) Files(identity string, node bool) tlsutil.Files {
	c.t.Helper()
	f := tlsutil.Files{Cert: filepath.Join(c.Dir, identity+".pem"), Key: filepath.Join(c.Dir, identity+"-key.pem"),
		CA: filepath.Join(c.Dir, devca.CACert)}
	if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err == nil {
		return f
	}
	if _, _, err := c.CA.IssueTo(c.Dir, identity, node, nil); err != nil {
		c.t.Fatal(err)
	}
	return f
}

// Client returns a client TLS configuration presenting identity's
// certificate ("" for none: only the CA).
func (c *Certs) Client(identity string) *tls.Config {
	c.t.Helper()
	f := tlsutil.Files{CA: filepath.Join(c.Dir, devca.CACert)}
	if identity != "" {
		f = c.Files(identity, false)
	}
	cfg, err := tlsutil.ClientConfig(f)
	if err != nil {
		c.t.Fatal(err)
	}
	// These configs are for the HTTP port, which asks for a certificate
	// only optionally: a client without one sends none instead of failing
	// its handshake as a gRPC client must (see tlsutil.ErrNoClientCert).
	if identity == "" {
		cfg.GetClientCertificate = nil
	}
	return cfg
}

// Option turns on TLS for every node (its API and Raft), each with a node
// certificate whose identity is its id.
func (c *Certs) Option() Option {
	return func(id string, cfg *Config) {
		cfg.API.TLS = c.Files(id, true)
		cfg.Node.TLS = cfg.API.TLS
	}
}
