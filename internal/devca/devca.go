// Package devca creates a development certificate authority and the node
// and client certificates a coordd cluster uses for mutual TLS, with Go's
// crypto libraries only (no openssl). It is for development and tests;
// production clusters use their own PKI.
package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/coordd/coordd/internal/tlsutil"
)

// Files in a CA directory.
const (
	CACert = "ca.pem"
	CAKey  = "ca-key.pem"
	// NodeList records the ids IssueTo issued node certificates to, one a
	// line (IsNode reads it).
	NodeList = "nodes.txt"
)

// CA is a loaded or new certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// Validity of what this package issues.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// New creates a CA named name.
func New(name string) (*CA, error) {
	key, tmpl, err := keyAndTemplate(pkix.Name{CommonName: name, Organization: []string{"coordd development CA"}}, caValidity,
		x509.KeyUsageCertSign|x509.KeyUsageCRLSign|x509.KeyUsageDigitalSignature)
	if err != nil {
		return nil, err
	}
	tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}, nil
}

// Load reads a CA from dir (ca.pem and ca-key.pem).
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("no CA in %s (create one first): %w", dir, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("CA files in %s are not PEM", dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// Save writes the CA into dir; it refuses to overwrite an existing one.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, CACert)); err == nil {
		return fmt.Errorf("%s already holds a CA; remove it or use another directory", dir)
	}
	keyDER, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, CACert), ca.PEM, 0o644),
		os.WriteFile(filepath.Join(dir, CAKey), pemBlock("EC PRIVATE KEY", keyDER), 0o600))
}

// Leaf is an issued certificate and its key, PEM encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate whose identity (subject CN) is name, in one of
// the two profiles of docs/security.md ("Certificate profiles"). A node
// certificate (server) is node name's: the URI SAN coordd://node/<name>
// (tlsutil.NodeURI) marks it, and it is valid for serving and for
// connecting to peers (serverAuth and clientAuth), with hosts (IP addresses
// or DNS names) as SANs; loopback is always included. A client certificate
// is valid for client authentication only and carries no SAN.
func (ca *CA) Issue(name string, server bool, hosts []string) (*Leaf, error) {
	return ca.issue(name, server, hosts, true)
}

// IssueNodeOnly issues node name's certificate with exactly hosts as its
// SANs, no loopback added: tests of peers that dial and verify by name
// (a certificate for the DNS name localhost alone does not cover
// 127.0.0.1).
func (ca *CA) IssueNodeOnly(name string, hosts []string) (*Leaf, error) {
	return ca.issue(name, true, hosts, false)
}

func (ca *CA) issue(name string, server bool, hosts []string, loopback bool) (*Leaf, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("name %q: use letters, digits and . _ : @ - (at most 128)", name)
	}
	key, tmpl, err := keyAndTemplate(pkix.Name{CommonName: name}, leafValidity, x509.KeyUsageDigitalSignature)
	if err != nil {
		return nil, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		if loopback {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		tmpl.URIs = []*url.URL{tlsutil.NodeURI(name)}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("EC PRIVATE KEY", keyDER)}, nil
}

// IssueTo issues and writes <name>.pem and <name>-key.pem into dir.
func (ca *CA) IssueTo(dir, name string, server bool, hosts []string) (certPath, keyPath string, err error) {
	leaf, err := ca.Issue(name, server, hosts)
	if err != nil {
		return "", "", err
	}
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	err = errors.Join(os.WriteFile(certPath, leaf.CertPEM, 0o644), os.WriteFile(keyPath, leaf.KeyPEM, 0o600))
	if err == nil && server {
		err = recordNode(dir, name)
	}
	return certPath, keyPath, err
}

func recordNode(dir, name string) error {
	if ok, err := IsNode(dir, name); ok || err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, NodeList), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, name)
	return errors.Join(err, f.Close())
}

// IsNode reports whether a node certificate was issued to name in dir
// (NodeList), so that no client certificate gets a node's name.
func IsNode(dir, name string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, NodeList))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(strings.Split(string(data), "\n"), name), nil
}

// keyAndTemplate makes a P-256 key and the template of a certificate for
// subject with usage, valid from an hour ago (clock skew) for validity.
func keyAndTemplate(subject pkix.Name, validity time.Duration, usage x509.KeyUsage) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	return key, &x509.Certificate{SerialNumber: serial(), Subject: subject, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(validity), KeyUsage: usage}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
