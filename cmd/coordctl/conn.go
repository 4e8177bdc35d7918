package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// coordctl is built on the SDK, as etcdctl is on clientv3: every command
// goes through one client.Client, so routing to the leader, redirects and
// retries follow the SDK's one policy. What the CLI adds is a watcher on
// the SDK's attempts, to tell the user what the retries wait for.

// tlsRequired is what a plaintext coordctl says to a cluster running TLS.
const tlsRequired = "the server requires TLS: pass --tls-ca/--tls-cert/--tls-key or COORD_TLS_*"

// newClient creates the SDK client of a command. Connections are lazy:
// this fails only on bad arguments (an unreadable TLS file).
func newClient(endpoints []string, files tlsutil.Files, w *watcher) (*client.Client, error) {
	opts := []client.Option{client.WithDialOptions(
		grpc.WithChainUnaryInterceptor(w.unary), grpc.WithChainStreamInterceptor(w.stream))}
	if files.Enabled() {
		cfg, err := tlsutil.ClientConfig(files)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	w.plaintext = !files.Enabled()
	return client.New(context.Background(), endpoints, opts...)
}

func (a *app) coord() coordv1.CoordinatorClient { return coordv1.NewCoordinatorClient(a.client.Raw()) }
func (a *app) cluster() coordv1.ClusterClient   { return coordv1.NewClusterClient(a.client.Raw()) }

// watcher sees every attempt the SDK makes (as a gRPC interceptor). It
// says once that an election is in progress, remembers the last "no
// leader" answer (so that a timeout is reported as what it was, not as an
// unreachable cluster) and recognizes a plaintext client talking to a TLS
// cluster (and turns that into a final error, which the SDK does not
// retry).
type watcher struct {
	errOut    io.Writer
	plaintext bool
	speaksTLS func(addr string) bool
	endpoints int           // how many endpoints the SDK rotates through
	timeout   time.Duration // --timeout, for the messages

	mu       sync.Mutex
	noLeader string // the last answer of a node that had no leader, rendered
	needTLS  bool
	refused  int  // attempts in a row that could not connect
	down     bool // every endpoint refused in a row (said once)
}

func newWatcher(errOut io.Writer) *watcher { return &watcher{errOut: errOut, speaksTLS: speaksTLS} }

func (w *watcher) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if client.IsLeaderLookup(ctx) {
		// The SDK looking for the leader, not an attempt of the command.
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var p peer.Peer // set when the call reached a node
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	return w.observe(cc.Target(), p.Addr != nil, ctx.Value(perNode{}) == nil, err)
}

// perNode marks the context of a command that asks nodes one by one
// (status, snapshot) instead of through the SDK's retries.
type perNode struct{}

func perNodeContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, perNode{}, true)
}

func (w *watcher) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, w.observe(cc.Target(), false, true, err)
	}
	return &watchedStream{ClientStream: s, w: w, target: cc.Target()}, nil
}

type watchedStream struct {
	grpc.ClientStream
	w      *watcher
	target string
}

func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return s.w.observe(s.target, false, true, err)
}

// observe looks at one attempt's outcome; reached says the call got to the
// node at target (its own connection was made), retried that the SDK
// retries the call (it is not a per-node question such as status).
func (w *watcher) observe(target string, reached, retried bool, err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return err
	}
	if retried {
		w.countRefused(target, reached, st)
	}
	switch {
	case coorderr.ReasonOf(err) == coorderr.NoLeader:
		w.sawNoLeader(describe(err))
	case reached && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "Error while dialing"):
		// The node answered, but could not forward the call to the leader
		// it knows: that leader is down, an election is coming.
		w.sawNoLeader(fmt.Sprintf("%s could not forward to the leader it knows: %s", target, st.Message()))
	}
	if w.plaintext && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "error reading server preface") &&
		w.speaksTLS(target) {
		w.mu.Lock()
		w.needTLS = true
		w.mu.Unlock()
		return status.Error(codes.FailedPrecondition, tlsRequired)
	}
	return err
}

// countRefused tells the user, once, that no endpoint accepts connections
// (nothing runs there?) while the SDK keeps trying for up to --timeout.
func (w *watcher) countRefused(target string, reached bool, st *status.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if reached || st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "Error while dialing") {
		w.refused = 0
		return
	}
	if w.refused++; w.refused >= w.endpoints && !w.down {
		w.down = true
		fmt.Fprintf(w.errOut, "cannot connect to any endpoint yet (%s: %s), retrying for up to --timeout %s\n",
			target, dialProblem(st.Message()), w.timeout)
	}
}

// dialProblem is the end of a dial error: "connection refused".
func dialProblem(msg string) string {
	msg = strings.TrimSuffix(msg, `"`)
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// sawNoLeader records that a node answered without a leader; the first
// time, it tells the user.
func (w *watcher) sawNoLeader(answer string) {
	w.mu.Lock()
	first := w.noLeader == ""
	w.noLeader = answer
	w.mu.Unlock()
	if first {
		fmt.Fprintln(w.errOut, "no leader yet (election in progress), retrying")
	}
}

// explain renders a command's final error: what the watcher learned
// first (TLS needed, no leader elected in time), else describe.
func (w *watcher) explain(err error, timeout time.Duration) string {
	w.mu.Lock()
	needTLS, noLeader := w.needTLS, w.noLeader
	w.mu.Unlock()
	switch {
	case needTLS:
		return tlsRequired
	case noLeader != "" && (unreachable(err) || reasonOfErr(err) == coorderr.NoLeader):
		return fmt.Sprintf("no leader elected within --timeout %s: %s", timeout, noLeader)
	}
	return describe(err)
}

// unreachable reports whether err says only that no node answered in time.
func unreachable(err error) bool {
	var e *client.Error
	if !errors.As(err, &e) {
		return errors.Is(err, context.DeadlineExceeded)
	}
	return e.Reason == "" && (e.Code == codes.Unavailable || e.Code == codes.DeadlineExceeded)
}

// speaksTLS reports whether the server at addr answers a TLS handshake (a
// plaintext client then reads "error reading server preface: EOF"). It
// only looks at the handshake: the certificate is not verified, nothing is
// sent after it.
func speaksTLS(addr string) bool {
	d := &net.Dialer{Timeout: time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe, not a connection
	if err != nil {
		var alert tls.AlertError
		return errors.As(err, &alert) // it answered in TLS, with a refusal
	}
	conn.Close()
	return true
}

// reasonOfErr is the reason of an SDK error (Unspecified if none).
func reasonOfErr(err error) coorderr.Reason {
	var e *client.Error
	if !errors.As(err, &e) {
		return coorderr.Unspecified
	}
	r, _ := coorderr.ParseReason(e.Reason)
	return r
}

// describe renders an error as one line: what failed, the reason code and
// the facts that matter (holder, generation, leader).
func describe(err error) string {
	var e *client.Error
	if !errors.As(err, &e) {
		st, info := coorderr.Info(err)
		if st == nil {
			return err.Error()
		}
		e = &client.Error{Code: st.Code(), Message: st.Message(), Reason: info.GetReason(), Metadata: info.GetMetadata()}
	}
	msg := e.Message
	if e.Reason == "" {
		if e.Code == codes.Unavailable {
			if strings.Contains(msg, "first record does not look like a TLS handshake") {
				return "the server does not use TLS: drop --tls-ca/--tls-cert/--tls-key and COORD_TLS_*"
			}
			msg = "cannot reach coordd: " + msg
		}
		return fmt.Sprintf("%s (%s)", msg, e.Code)
	}
	return e.Reason + ": " + msg + facts(e.Metadata)
}

// facts renders metadata as " (k=v, k=v)" sorted by key, or "".
func facts(meta map[string]string) string {
	if len(meta) == 0 {
		return ""
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + meta[k]
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
