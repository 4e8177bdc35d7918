package node

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/advertise"
)

// Raft's stream layers (this file: plain TCP; tls.go: mutual TLS). Both
// listen on the bound address (Config.RaftAddr) and advertise
// Config.RaftAdvertise as given, a name that is never resolved here: it is
// what the node puts in the Raft configuration, and peers resolve it each
// time they dial. hashicorp's TCP transport takes only a resolved
// *net.TCPAddr, which is why coordd has its own layer. A Kubernetes pod
// advertises its stable DNS name and stays reachable when it comes back on
// a new IP; with TLS the name dialled is the name verified.

// hostPort is an advertised address as given (host:port, the host a name
// or an IP): the net.Addr of a stream layer, whose String is what
// NetworkTransport.LocalAddr returns.
type hostPort string

func (a hostPort) Network() string { return "tcp" }
func (a hostPort) String() string  { return string(a) }

// tcpStreamLayer is Raft's transport over plain TCP: Accept from the
// listener, Dial by name.
type tcpStreamLayer struct {
	net.Listener
	advertise net.Addr
}

// listenRaft listens on bind and returns the listener with the address to
// advertise: adv when set, else the bound one, which must then be one
// peers can dial (not 0.0.0.0).
func listenRaft(bind, adv string) (net.Listener, net.Addr, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, nil, err
	}
	if adv != "" {
		return lis, hostPort(adv), nil
	}
	if advertise.Unspecified(lis.Addr().String()) {
		lis.Close()
		return nil, nil, fmt.Errorf("bound to %s, which peers cannot dial: set the address they can (--raft-advertise-addr)", lis.Addr())
	}
	return lis, lis.Addr(), nil
}

func newTCPStreamLayer(bind, adv string) (*tcpStreamLayer, error) {
	lis, addr, err := listenRaft(bind, adv)
	if err != nil {
		return nil, err
	}
	return &tcpStreamLayer{Listener: lis, advertise: addr}, nil
}

// Addr is the advertised address (not the listener's).
func (l *tcpStreamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to a server's address, resolving a name now: a peer that
// came back elsewhere under the same name is found there.
func (l *tcpStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return d.Dial("tcp", string(address))
}

// BoundAddr is the address the listener got (port 0 resolved).
func (l *tcpStreamLayer) BoundAddr() string { return l.Listener.Addr().String() }
