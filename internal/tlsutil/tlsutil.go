// Package tlsutil loads coordd's TLS material (PEM files), builds the
// mutual-TLS configurations of servers and clients, reloads certificates
// without a restart, and names the identity a certificate carries.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Files names the PEM files of one TLS setup: this side's certificate and
// key, and the CA bundle that signs the other side's certificates.
type Files struct {
	Cert string
	Key  string
	CA   string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate checks that the three files are set together.
func (f Files) Validate() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	for _, x := range []struct{ name, v string }{{"cert", f.Cert}, {"key", f.Key}, {"ca", f.CA}} {
		if x.v == "" {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS needs a certificate, its key and a CA bundle; missing %v", missing)
	}
	return nil
}

// NodeURIPrefix starts the URI SAN that marks a node certificate:
// coordd://node/<id>, id being the node's Raft server id.
const NodeURIPrefix = "coordd://node/"

// NodeURI is the URI SAN of the node certificate of node id.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: "coordd", Host: "node", Path: "/" + id}
}

// NodeID is the Raft server id a node certificate is issued to, or ""
// when c is not a node certificate. A node certificate (docs/security.md,
// "Certificate profiles") has exactly one URI SAN coordd://node/<id> and
// the extended key usages serverAuth and clientAuth: it serves and it
// connects to peers. Any other certificate, whatever names it carries, is
// a client's.
func NodeID(c *x509.Certificate) string {
	if c == nil || !hasUsage(c, x509.ExtKeyUsageServerAuth) || !hasUsage(c, x509.ExtKeyUsageClientAuth) {
		return ""
	}
	id := ""
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, NodeURIPrefix) {
			if id != "" {
				return "" // two node ids: none
			}
			id = strings.TrimPrefix(s, NodeURIPrefix)
		}
	}
	if strings.ContainsAny(id, "/?#") {
		return ""
	}
	return id
}

func hasUsage(c *x509.Certificate, want x509.ExtKeyUsage) bool {
	for _, u := range c.ExtKeyUsage {
		if u == want {
			return true
		}
	}
	return false
}

// Identity is the identity a certificate carries: a node certificate's
// node id (NodeID); else the subject's common name, else the first URI
// SAN, else the first DNS SAN.
func Identity(c *x509.Certificate) string {
	if id := NodeID(c); id != "" {
		return id
	}
	switch {
	case c == nil:
		return ""
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return ""
}

// Peer is who the verified certificate of a connection names.
type Peer struct {
	// Identity is the certificate's (Identity); "" without a verified
	// certificate.
	Identity string
	// Node: it is a node certificate (NodeID), issued to the node
	// Identity.
	Node bool
}

// PeerOf is the verified peer of a connection state (the zero Peer when
// the peer presented no verified certificate).
func PeerOf(st *tls.ConnectionState) Peer {
	c := VerifiedLeaf(st)
	if c == nil {
		return Peer{}
	}
	return Peer{Identity: Identity(c), Node: NodeID(c) != ""}
}

// VerifiedLeaf is the verified certificate of a connection's peer, or nil.
func VerifiedLeaf(st *tls.ConnectionState) *x509.Certificate {
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return st.VerifiedChains[0][0]
}

// Reloader holds a certificate, its key and a CA pool read from Files, and
// reads them again on Reload. Configs built from it pick up the new
// material for new connections.
type Reloader struct {
	files Files
	mu    sync.RWMutex
	cert  *tls.Certificate
	pool  *x509.CertPool
}

// NewReloader reads the files once; an error names the file at fault.
func NewReloader(f Files) (*Reloader, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	r := &Reloader{files: f}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again; on error the previous material stays.
func (r *Reloader) Reload() error {
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("TLS certificate %s / key %s: %w", r.files.Cert, r.files.Key, err)
	}
	pool, err := LoadPool(r.files.CA)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cert, r.pool = &cert, pool
	r.mu.Unlock()
	return nil
}

// LoadPool reads a PEM CA bundle.
func LoadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("TLS CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA bundle %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Leaf is the certificate this side presents.
func (r *Reloader) Leaf() (*x509.Certificate, error) {
	cert, _ := r.current()
	if cert.Leaf != nil {
		return cert.Leaf, nil
	}
	return x509.ParseCertificate(cert.Certificate[0])
}

// CheckNode refuses a certificate (what names it, for the error) that
// is not node id's node certificate (NodeID).
func (r *Reloader) CheckNode(id, what string) error {
	leaf, err := r.Leaf()
	if err != nil {
		return err
	}
	if got := NodeID(leaf); got != id {
		return fmt.Errorf("%s is not node %q's node certificate (its identity is %q; a node certificate has the URI SAN %s%s "+
			"and the usages serverAuth and clientAuth, docs/security.md): issue one with `coordctl certs issue %s --node`",
			what, id, Identity(leaf), NodeURIPrefix, id, id)
	}
	return nil
}

func (r *Reloader) current() (*tls.Certificate, *x509.CertPool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cert, r.pool
}

// ServerConfig is a server configuration. With requireClientCert, a
// client must present a certificate signed by the CA; otherwise one is
// verified when given (the HTTP port serves /healthz to anyone and the
// API, /metrics and pprof only to verified clients).
func (r *Reloader) ServerConfig(requireClientCert bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: auth}
	// GetConfigForClient picks up a reloaded certificate and CA per
	// handshake.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := r.current()
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			ClientAuth:   auth,
			Certificates: []tls.Certificate{*cert},
			ClientCAs:    pool,
			NextProtos:   []string{"h2", "http/1.1"},
		}, nil
	}
	return base
}

// ClientConfig is a client configuration presenting this certificate and
// verifying the server against the CA. serverName may be empty: the host
// of the dialed address is used.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	cert, pool := r.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		RootCAs:    pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, _ := r.current()
			return c, nil
		},
		Certificates: []tls.Certificate{*cert},
	}
}

// ErrNoClientCert is the handshake error of a client configured without a
// certificate when the server requires one.
var ErrNoClientCert = errors.New("tls: the server requires a client certificate and none is configured (--tls-cert/--tls-key, COORD_TLS_CERT/COORD_TLS_KEY)")

// ClientConfig reads Files for a gRPC client in one call (SDK and
// coordctl). A client without a certificate (only CA) is allowed; when a
// server asks for one, its handshake fails with ErrNoClientCert (coordd's
// gRPC port always requires one). An HTTP client of a port that asks only
// optionally (coordd's HTTP port) clears GetClientCertificate.
func ClientConfig(f Files) (*tls.Config, error) {
	if f.CA == "" {
		return nil, errors.New("TLS needs a CA bundle to verify the server (--tls-ca)")
	}
	pool, err := LoadPool(f.CA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool,
		// Without a certificate, fail our own handshake when the server
		// asks for one. Under TLS 1.3 the server checks the client's
		// certificate only after the client has finished its handshake, so
		// its refusal would otherwise surface as whatever the next write
		// meets (a "broken pipe", a reset): a transport error that looks
		// retryable. Failing here makes it one clear TLS error every time.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, ErrNoClientCert
		},
	}
	if f.Cert != "" || f.Key != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate %s / key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		cfg.GetClientCertificate = nil
	}
	return cfg, nil
}

// Credentials are gRPC client transport credentials from Files: plaintext
// when no file is set, TLS (with the certificate as identity) otherwise.
func Credentials(f Files) (credentials.TransportCredentials, error) {
	if !f.Enabled() {
		return insecure.NewCredentials(), nil
	}
	cfg, err := ClientConfig(f)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// Listener names a listen address for CheckPlaintext.
type Listener struct{ Name, Addr string }

// CheckPlaintext refuses plaintext listeners that bind beyond loopback,
// unless insecure: a cluster on the network needs TLS or an explicit
// --insecure. Empty addresses are skipped.
func CheckPlaintext(insecure bool, listeners ...Listener) error {
	if insecure {
		return nil
	}
	var open []string
	for _, l := range listeners {
		if l.Addr != "" && !IsLoopback(l.Addr) {
			open = append(open, l.Addr+" ("+l.Name+")")
		}
	}
	if len(open) == 0 {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without TLS: give --tls-cert, --tls-key and --tls-ca, or --insecure to accept plaintext on the network",
		strings.Join(open, ", "))
}

// IsLoopback reports whether a listen address binds loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
