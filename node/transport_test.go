package node

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/devca"
	"github.com/coordd/coordd/internal/tlsutil"
)

// echo serves l: every connection gets its bytes back.
func echo(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			if tc, ok := conn.(*tls.Conn); ok && tc.Handshake() != nil {
				return
			}
			_, _ = io.Copy(conn, conn)
		}()
	}
}

// roundTrip dials address through dial and echoes a byte.
func roundTrip(dial func(raft.ServerAddress, time.Duration) (net.Conn, error), address string) error {
	conn, err := dial(raft.ServerAddress(address), 2*time.Second)
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

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// The plain TCP layer advertises the name it was given, as given (the
// transport's LocalAddr, the node's entry in the configuration), and
// dials peers by name; without an advertise address it advertises the
// bound one, which must be dialable.
func TestTCPStreamLayerAdvertisesName(t *testing.T) {
	bound, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, bound.BoundAddr())
	bound.Close()

	l, err := newTCPStreamLayer("127.0.0.1:"+port, "localhost:"+port)
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(l, 1, time.Second, io.Discard)
	defer trans.Close()
	if got := string(trans.LocalAddr()); got != "localhost:"+port {
		t.Fatalf("LocalAddr %q, want the advertised name localhost:%s", got, port)
	}
	if l.BoundAddr() != "127.0.0.1:"+port {
		t.Fatalf("bound %q", l.BoundAddr())
	}

	other, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.Addr().String() != other.BoundAddr() {
		t.Fatalf("no advertise address: advertised %s, bound %s", other.Addr(), other.BoundAddr())
	}
	go echo(other)
	if err := roundTrip(l.Dial, "localhost:"+portOf(t, other.BoundAddr())); err != nil {
		t.Fatalf("dial by name: %v", err)
	}

	if _, err := newTCPStreamLayer("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "--raft-advertise-addr") {
		t.Fatalf("bound to 0.0.0.0 without an advertise address: want an error naming --raft-advertise-addr, got %v", err)
	}
	wild, err := newTCPStreamLayer("0.0.0.0:0", "coordd-0.coordd-peer:7402")
	if err != nil {
		t.Fatal(err)
	}
	wild.Close()
	if wild.Addr().String() != "coordd-0.coordd-peer:7402" {
		t.Fatalf("advertised %s", wild.Addr())
	}
}

// dnsOnlyFiles writes node id's certificate whose only SAN (beside the
// node URI) is the DNS name localhost: it does not cover 127.0.0.1.
func dnsOnlyFiles(t *testing.T, p *peerCA, id string) tlsutil.Files {
	t.Helper()
	leaf, err := p.ca.IssueNodeOnly(id, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	f := tlsutil.Files{Cert: filepath.Join(p.dir, id+"-dns.pem"), Key: filepath.Join(p.dir, id+"-dns-key.pem"),
		CA: filepath.Join(p.dir, devca.CACert)}
	if err := os.WriteFile(f.Cert, leaf.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The TLS layer advertises the name too and verifies the peer it dials
// against that name: with certificates for the DNS name localhost only,
// peers that dial localhost:port complete their handshakes (and still
// check the node id the configuration has there), and a dial of the IP
// fails on the certificate's names.
func TestTLSStreamLayerDialsByName(t *testing.T) {
	p := newPeerCA(t)
	layer := func(id string) *tlsStreamLayer {
		r, err := tlsutil.NewReloader(dnsOnlyFiles(t, p, id))
		if err != nil {
			t.Fatal(err)
		}
		probe, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := portOf(t, probe.Addr().String())
		probe.Close()
		l, err := newTLSStreamLayer("127.0.0.1:"+port, "localhost:"+port, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	l1, l2 := layer("node1"), layer("node2")
	if !strings.HasPrefix(l1.Addr().String(), "localhost:") {
		t.Fatalf("advertised %s, want localhost:port", l1.Addr())
	}
	byName := configOf(raft.Server{ID: "node1", Address: raft.ServerAddress(l1.Addr().String())},
		raft.Server{ID: "node2", Address: raft.ServerAddress(l2.Addr().String())})
	l1.setServers(byName)
	l2.setServers(byName)
	go echo(l1)
	if err := roundTrip(l2.Dial, l1.Addr().String()); err != nil {
		t.Fatalf("node2 to node1 by name: %v", err)
	}
	// The configuration still decides who answers there.
	l2.setServers(configOf(raft.Server{ID: "node3", Address: raft.ServerAddress(l1.Addr().String())}))
	wantRefusal(t, "outbound to the wrong node by name", roundTrip(l2.Dial, l1.Addr().String()), `the configuration has server "node3" there`)
	// By IP the certificate does not match (the configuration has node1
	// there, so only the name check can refuse it).
	ip := l1.BoundAddr()
	l2.setServers(configOf(raft.Server{ID: "node1", Address: raft.ServerAddress(ip)}, raft.Server{ID: "node2", Address: raft.ServerAddress(l2.Addr().String())}))
	wantRefusal(t, "dial by IP with a DNS-only certificate", roundTrip(l2.Dial, ip), "doesn't contain any IP SANs")
}
