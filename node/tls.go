package node

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/tlsutil"
)

// tlsStreamLayer is Raft's transport over mutual TLS: a peer must present
// a certificate signed by the peer CA, and so must we.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	peers     *tlsutil.Reloader
}

func newTLSStreamLayer(bind string, peers *tlsutil.Reloader) (*tlsStreamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return &tlsStreamLayer{
		Listener:  tls.NewListener(lis, peers.ServerConfig(true)),
		advertise: lis.Addr(),
		peers:     peers,
	}, nil
}

func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), l.peers.ClientConfig(host))
	if err != nil {
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	return conn, nil
}
