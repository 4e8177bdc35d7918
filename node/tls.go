package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/tlsutil"
)

// tlsStreamLayer is Raft's transport over mutual TLS: a peer must present
// a certificate signed by the peer CA, and so must we. A CA signs client
// certificates too, so that is not enough: the peer's certificate must be
// a node certificate (tlsutil.NodeID) of a server of the current
// configuration, checked in the handshake of every connection, both ways
// (verifyInbound, verifyOutbound). docs/security.md, "Raft peers", says
// why and what it costs. It listens and advertises as the TCP layer does
// (transport.go); a dialled peer's certificate is verified against the
// name dialled, the advertised one of the configuration.
type tlsStreamLayer struct {
	tcpStreamLayer
	peers *tlsutil.Reloader
	// servers is the latest Raft configuration (raft's atomic copy, so a
	// handshake never waits for Raft's loop); nil until Raft runs.
	servers atomic.Pointer[func() ([]raft.Server, error)]
}

func newTLSStreamLayer(bind, adv string, peers *tlsutil.Reloader) (*tlsStreamLayer, error) {
	lis, addr, err := listenRaft(bind, adv)
	if err != nil {
		return nil, err
	}
	l := &tlsStreamLayer{tcpStreamLayer: tcpStreamLayer{advertise: addr}, peers: peers}
	srv := peers.ServerConfig(true)
	perHandshake := srv.GetConfigForClient
	srv.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cfg, err := perHandshake(hello)
		if err != nil {
			return nil, err
		}
		cfg.NextProtos = nil
		cfg.VerifyConnection = l.verifyInbound
		return cfg, nil
	}
	l.Listener = tls.NewListener(lis, srv)
	return l, nil
}

// setServers gives the layer the configuration to check peers against.
func (l *tlsStreamLayer) setServers(f func() ([]raft.Server, error)) { l.servers.Store(&f) }

func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, err
	}
	cfg := l.peers.ClientConfig(host)
	cfg.VerifyConnection = func(st tls.ConnectionState) error { return l.verifyOutbound(st, address) }
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), cfg)
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	return conn, nil
}

// errNotRunning refuses peers while Raft starts: they retry.
var errNotRunning = errors.New("raft is not running yet")

// peer is the node id of a connection's verified node certificate and
// the configuration to judge it by.
func (l *tlsStreamLayer) peer(st tls.ConnectionState) (string, []raft.Server, error) {
	leaf := tlsutil.VerifiedLeaf(&st)
	if leaf == nil {
		return "", nil, errors.New("raft peer: no verified certificate")
	}
	id := tlsutil.NodeID(leaf)
	if id == "" {
		return "", nil, fmt.Errorf("raft peer %q: not a node certificate (a node certificate has the URI SAN %s<id>); client certificates may not speak Raft",
			tlsutil.Identity(leaf), tlsutil.NodeURIPrefix)
	}
	f := l.servers.Load()
	if f == nil {
		return "", nil, errNotRunning
	}
	servers, err := (*f)()
	return id, servers, err
}

// verifyInbound accepts a connection from a node of the configuration.
// A node with an empty configuration (started to join, before the leader
// replicated one to it) accepts any node certificate: the leader adds a
// joining server to its configuration first, then connects to it.
func (l *tlsStreamLayer) verifyInbound(st tls.ConnectionState) error {
	id, servers, err := l.peer(st)
	if err != nil {
		return err
	}
	if len(servers) == 0 {
		return nil
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return nil
		}
	}
	return fmt.Errorf("raft peer: node %q is not a server of the configuration", id)
}

// verifyOutbound accepts the server we dialed if its node certificate is
// that of the server the configuration has at address.
func (l *tlsStreamLayer) verifyOutbound(st tls.ConnectionState, address raft.ServerAddress) error {
	id, servers, err := l.peer(st)
	if err != nil {
		return err
	}
	for _, s := range servers {
		if s.Address == address {
			if string(s.ID) == id {
				return nil
			}
			return fmt.Errorf("raft peer %s: the configuration has server %q there, the certificate is node %q's", address, s.ID, id)
		}
	}
	return fmt.Errorf("raft peer %s (node %q): no server of the configuration has this address", address, id)
}
