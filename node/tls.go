package server

import (
	"crypto/tls"
	"errors"
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

// loadTLS reads the node's TLS material; peer TLS falls back to TLS.
func (s *Server) loadTLS() error {
	if !s.cfg.TLS.Enabled() {
		return nil
	}
	var err error
	if s.tls, err = tlsutil.NewReloader(s.cfg.TLS); err != nil {
		return err
	}
	s.peerTLS = s.tls
	if s.cfg.PeerTLS.Enabled() {
		if s.peerTLS, err = tlsutil.NewReloader(s.cfg.PeerTLS); err != nil {
			return fmt.Errorf("peer %w", err)
		}
	}
	return nil
}

// Reload reads the TLS files and the ACL file again (coordd calls it on
// SIGHUP). What fails to load keeps its previous version; the error says
// what failed.
func (s *Server) Reload() error {
	var errs []error
	if s.tls != nil {
		errs = append(errs, s.tls.Reload())
		if s.peerTLS != s.tls {
			errs = append(errs, s.peerTLS.Reload())
		}
	}
	if s.cfg.ACLFile != "" {
		acl, err := LoadACL(s.cfg.ACLFile)
		if err != nil {
			errs = append(errs, err)
		} else {
			s.acl.Store(acl)
			s.log.Info("ACL loaded", "file", s.cfg.ACLFile, "rules", len(acl.Rules))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("reload failed; keeping the previous configuration where it failed", "err", err)
	}
	return err
}
