package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// conn holds one connection per endpoint. Unary calls go to the first
// endpoint that answers (any node forwards to the leader).
type conn struct {
	endpoints []string
	conns     map[string]*grpc.ClientConn
	creds     credentials.TransportCredentials
}

func dial(endpoints []string, files tlsutil.Files) (*conn, error) {
	creds, err := tlsutil.Credentials(files)
	if err != nil {
		return nil, err
	}
	c := &conn{endpoints: endpoints, conns: map[string]*grpc.ClientConn{}, creds: creds}
	for _, ep := range endpoints {
		cc, err := grpc.NewClient(ep, grpc.WithTransportCredentials(c.creds))
		if err != nil {
			c.close()
			return nil, fmt.Errorf("endpoint %q: %w", ep, err)
		}
		c.conns[ep] = cc
	}
	return c, nil
}

func (c *conn) close() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

// call runs f against each endpoint in turn until one answers with
// something other than a transport failure or "no leader".
func call[T any](ctx context.Context, c *conn, f func(*grpc.ClientConn) (T, error)) (T, error) {
	var (
		resp T
		err  error
	)
	for _, ep := range c.endpoints {
		resp, err = f(c.conns[ep])
		if err == nil || !retryElsewhere(err) || ctx.Err() != nil {
			return resp, err
		}
	}
	return resp, err
}

func retryElsewhere(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable
}

func coord(cc *grpc.ClientConn) coordv1.CoordinatorClient { return coordv1.NewCoordinatorClient(cc) }
func clus(cc *grpc.ClientConn) coordv1.ClusterClient      { return coordv1.NewClusterClient(cc) }

// leaderConn finds the leader's connection (for the KeepAlive stream).
func (c *conn) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	st, err := call(ctx, c, func(cc *grpc.ClientConn) (*coordv1.StatusResponse, error) {
		return clus(cc).Status(ctx, &coordv1.StatusRequest{})
	})
	if err != nil {
		return nil, err
	}
	addr := st.GetLeaderAddress()
	if addr == "" {
		return nil, fmt.Errorf("no leader is known to %s", st.GetId())
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.creds))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// describe renders an error as one line: what failed, the reason code and
// the facts that matter (holder, generation, leader).
func describe(err error) string {
	st, info := coorderr.Info(err)
	if st == nil {
		return err.Error()
	}
	msg := st.Message()
	if st.Code() == codes.Unavailable && info == nil {
		msg = "cannot reach coordd: " + msg
	}
	if info == nil {
		return fmt.Sprintf("%s (%s)", msg, st.Code())
	}
	var facts []string
	keys := make([]string, 0, len(info.GetMetadata()))
	for k := range info.GetMetadata() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		facts = append(facts, k+"="+info.GetMetadata()[k])
	}
	line := fmt.Sprintf("%s: %s", info.GetReason(), msg)
	if len(facts) > 0 {
		line += " (" + strings.Join(facts, ", ") + ")"
	}
	return line
}
