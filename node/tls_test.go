package node

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/tlsutil"
)

// peerCA is a dev CA in a temp dir issuing node and client certificates.
type peerCA struct {
	t   *testing.T
	dir string
	ca  *devca.CA
}

func newPeerCA(t *testing.T) *peerCA {
	ca, err := devca.New("test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	return &peerCA{t: t, dir: dir, ca: ca}
}

func (p *peerCA) files(name string, node bool) tlsutil.Files {
	cert, key, err := p.ca.IssueTo(p.dir, name, node, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return tlsutil.Files{Cert: cert, Key: key, CA: filepath.Join(p.dir, devca.CACert)}
}

// state is a connection state whose verified peer is f's certificate.
func (p *peerCA) state(f tlsutil.Files) tls.ConnectionState {
	r, err := tlsutil.NewReloader(f)
	if err != nil {
		p.t.Fatal(err)
	}
	leaf, err := r.Leaf()
	if err != nil {
		p.t.Fatal(err)
	}
	return tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
}

func (p *peerCA) layer(f tlsutil.Files) *tlsStreamLayer {
	r, err := tlsutil.NewReloader(f)
	if err != nil {
		p.t.Fatal(err)
	}
	l, err := newTLSStreamLayer("127.0.0.1:0", "", r)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { l.Close() })
	return l
}

func configOf(servers ...raft.Server) func() ([]raft.Server, error) {
	return func() ([]raft.Server, error) { return servers, nil }
}

func wantRefusal(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: want an error with %q, got %v", what, want, err)
	}
}

// Who may speak Raft to whom: only node certificates of servers of the
// configuration, the dialed one at its address; a node without a
// configuration yet (joining) accepts any node certificate.
func TestRaftPeerVerification(t *testing.T) {
	p := newPeerCA(t)
	l := p.layer(p.files("node1", true))
	node2, node9, client := p.state(p.files("node2", true)), p.state(p.files("node9", true)), p.state(p.files("node2-client", false))
	wantRefusal(t, "before Raft runs", l.verifyInbound(node2), "not running")

	l.setServers(configOf())
	if err := l.verifyInbound(node2); err != nil {
		t.Fatalf("empty configuration (joining): %v", err)
	}
	wantRefusal(t, "client certificate, empty configuration", l.verifyInbound(client), "not a node certificate")

	l.setServers(configOf(raft.Server{ID: "node1", Address: "127.0.0.1:1"}, raft.Server{ID: "node2", Address: "127.0.0.1:2"}))
	if err := l.verifyInbound(node2); err != nil {
		t.Fatalf("member: %v", err)
	}
	wantRefusal(t, "client certificate", l.verifyInbound(client), "client certificates may not speak Raft")
	wantRefusal(t, "non-member's node certificate", l.verifyInbound(node9), `node "node9" is not a server of the configuration`)
	if err := l.verifyOutbound(node2, "127.0.0.1:2"); err != nil {
		t.Fatalf("outbound to node2: %v", err)
	}
	wantRefusal(t, "node2 answering at node1's address", l.verifyOutbound(node2, "127.0.0.1:1"), `the configuration has server "node1" there`)
	wantRefusal(t, "an address outside the configuration", l.verifyOutbound(node2, "127.0.0.1:3"), "no server of the configuration")
	wantRefusal(t, "client certificate answering", l.verifyOutbound(client, "127.0.0.1:2"), "not a node certificate")

	// A certificate with the node URI but only client usage is no node's.
	leaf, err := p.ca.Issue("node2", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(leaf.CertPEM)
	c, _ := x509.ParseCertificate(b.Bytes)
	c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	wantRefusal(t, "node URI without serverAuth", l.verifyInbound(tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}), "not a node certificate")
}

// The checks run in real handshakes, both ways.
func TestRaftPeerHandshakes(t *testing.T) {
	p := newPeerCA(t)
	l1, l2 := p.layer(p.files("node1", true)), p.layer(p.files("node2", true))
	both := configOf(raft.Server{ID: "node1", Address: raft.ServerAddress(l1.Addr().String())},
		raft.Server{ID: "node2", Address: raft.ServerAddress(l2.Addr().String())})
	l1.setServers(both)
	l2.setServers(both)
	go func() {
		for {
			conn, err := l1.Accept()
			if err != nil {
				return
			}
			go func() { // echo
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	roundTrip := func(l *tlsStreamLayer) error {
		conn, err := l.Dial(raft.ServerAddress(l1.Addr().String()), 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte("x")); err != nil {
			return err
		}
		_, err = io.ReadFull(conn, make([]byte, 1))
		return err
	}
	if err := roundTrip(l2); err != nil {
		t.Fatalf("member to member: %v", err)
	}
	// node1 no longer has node2: node2's connection is refused by node1.
	l1.setServers(configOf(raft.Server{ID: "node1", Address: raft.ServerAddress(l1.Addr().String())}))
	wantRefusal(t, "inbound from a removed server", roundTrip(l2), "bad certificate")
	// node2 expects node3 at node1's address: it refuses node1.
	l1.setServers(both)
	l2.setServers(configOf(raft.Server{ID: "node3", Address: raft.ServerAddress(l1.Addr().String())}))
	wantRefusal(t, "outbound to the wrong node", roundTrip(l2), `the configuration has server "node3" there`)
	// A client certificate of the same CA is refused.
	client := p.layer(p.files("billing", false))
	client.setServers(configOf(raft.Server{ID: "node1", Address: raft.ServerAddress(l1.Addr().String())}))
	wantRefusal(t, "client certificate", roundTrip(client), "bad certificate")
}
