package api

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/testutil"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The parts of KeepAlive, each alone, on the fake node (its lease time
// stands still: nothing here waits on a clock).

// kaServerStream is a KeepAlive stream driven by the test.
type kaServerStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   chan *coordv1.KeepAliveRequest
	out  chan *coordv1.KeepAliveResponse
	recv chan error // ends Recv
}

func newKAServerStream() *kaServerStream {
	return &kaServerStream{ctx: context.Background(), in: make(chan *coordv1.KeepAliveRequest, 8),
		out: make(chan *coordv1.KeepAliveResponse, 8), recv: make(chan error, 1)}
}

func (s *kaServerStream) Context() context.Context { return s.ctx }
func (s *kaServerStream) Send(r *coordv1.KeepAliveResponse) error {
	s.out <- r
	return nil
}

func (s *kaServerStream) Recv() (*coordv1.KeepAliveRequest, error) {
	select {
	case r := <-s.in:
		return r, nil
	case err := <-s.recv:
		return nil, err
	}
}

func TestKeepAliveStreamRefusal(t *testing.T) {
	ka := newKeepAliveStream(newTestServer(t, newFakeNode()), newKAServerStream())
	defer ka.stop()
	if r := ka.refusal(&coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 3}); r != nil {
		t.Fatalf("a valid request refused: %v", r)
	}
	for _, req := range []*coordv1.KeepAliveRequest{
		{Name: "", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 3},
		{Name: "L", Owner: "o", Generation: 0, Ttl: pbtime.Dur(5000), Seq: 3},
		{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(10), Seq: 3},
	} {
		r := ka.refusal(req)
		if r == nil || r.GetOk() || r.GetReason() != coorderr.Name(coorderr.InvalidArgument) || r.GetSeq() != 3 || r.GetMessage() == "" {
			t.Errorf("%v: %v", req, r)
		}
	}
}

// renew answers ok with the new expiry, a definitive refusal as the
// lease's answer, and anything else as an error that ends the stream.
func TestKeepAliveStreamRenew(t *testing.T) {
	n := newFakeNode()
	ka := newKeepAliveStream(newTestServer(t, n), newKAServerStream())
	defer ka.stop()
	n.apply(&fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000})
	r, err := ka.renew(&coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 1})
	if err != nil || !r.GetOk() || r.GetExpiresInMs() != 5000 || r.GetSeq() != 1 {
		t.Fatalf("renew: %v %v", r, err)
	}
	r, err = ka.renew(&coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 9, Ttl: pbtime.Dur(5000), Seq: 2})
	if err != nil || r.GetOk() || r.GetReason() == "" || r.GetSeq() != 2 {
		t.Fatalf("renew of a lost generation: %v %v", r, err)
	}
	n.setLeader(false, "n2", "127.0.0.1:2")
	if r, err := ka.renew(&coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 3}); err == nil {
		t.Fatalf("renew off the leader answered %v", r)
	}
}

// The whole stream: answers in any order for valid and invalid requests;
// the client's close ends it cleanly; stop ends the renewals in flight and
// waits for them (the stream owns them).
func TestKeepAliveStreamAnswersAndOwnsRenewals(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	n.apply(&fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000})
	st := newKAServerStream()
	ret := make(chan error, 1)
	go func() { ret <- (&coordinator{s: s}).KeepAlive(st) }()
	st.in <- &coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 1}
	st.in <- &coordv1.KeepAliveRequest{Name: "", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 2}
	got := map[uint64]bool{}
	for range 2 {
		r := testutil.Recv(t, st.out, "answer")
		got[r.GetSeq()] = r.GetOk()
	}
	if !got[1] || got[2] || len(got) != 2 {
		t.Fatalf("answers %v", got)
	}
	st.recv <- io.EOF
	if err := testutil.Recv(t, ret, "end"); err != nil {
		t.Fatalf("closed by the client: %v", err)
	}

	ka := newKeepAliveStream(s, newKAServerStream())
	entered := make(chan struct{})
	var returned atomic.Bool
	n.beforePropose = func(any) {
		close(entered)
		<-ka.ctx.Done() // a commit that does not come before the stream ends
		returned.Store(true)
	}
	ka.stream.(*kaServerStream).in <- &coordv1.KeepAliveRequest{Name: "L", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000), Seq: 1}
	go ka.receive()
	testutil.Recv(t, entered, "renewal")
	ka.stop()
	if !returned.Load() {
		t.Fatal("stop returned before the renewal in flight ended")
	}
}

// Leadership lost mid-stream ends it with Unavailable (NOT_LEADER).
func TestKeepAliveStreamEndsWithLeadership(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	st := newKAServerStream()
	ctx, cancel := context.WithCancel(context.Background())
	st.ctx = ctx
	ka := newKeepAliveStream(s, st)
	defer ka.stop()
	go ka.receive()
	ret := make(chan error, 1)
	lctx, lose := context.WithCancel(context.Background())
	go func() { ret <- ka.send(lctx) }()
	n.setLeader(false, "n2", "127.0.0.1:2")
	lose()
	err := testutil.Recv(t, ret, "end")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("end %v", err)
	}
	cancel()
	st.recv <- context.Canceled
}
