package api

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// In-process server streams (Watch over HTTP): the gateway's client stream
// and the service's server stream meet here. The service runs in its own
// goroutine behind the same guard as a gRPC stream (the HTTP caller's
// certificate identity); its messages cross as wire bytes (a watch message
// carries its events as pre-encoded bytes), one at a time, so a reader
// that stops reading stops the sender as a slow gRPC client would.

// inprocStreamMethod is a server-streaming method served in process.
type inprocStreamMethod struct {
	srv     any
	handler grpc.StreamHandler
}

func (c *inproc) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	m, ok := c.streams[method]
	if !ok || desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "%s is not served in process", method)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(metadata.NewIncomingContext(ctx, md), nil))
	st := &inprocStream{ctx: ctx, cancel: cancel, req: make(chan []byte, 1), out: make(chan []byte),
		ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(st.done)
		defer st.markReady()
		gctx, err := c.s.guard(ctx, httpPeer(ctx), false, method, nil)
		if err == nil {
			err = m.handler(m.srv, &inprocServerStream{st: st, ctx: gctx})
		}
		st.err = toStatus(err)
	}()
	return st, nil
}

// inprocStream is the client's side.
type inprocStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	req    chan []byte   // the one request
	out    chan []byte   // the service's messages
	ready  chan struct{} // closed at the first message or the end
	once   sync.Once
	sent   bool          // a message was sent (set before ready closes)
	done   chan struct{} // closed when the service returned, with err
	err    error
}

func (st *inprocStream) markReady() { st.once.Do(func() { close(st.ready) }) }

// Header waits for the first message or the end: a call refused before it
// sent anything (a denial, bad input) fails here, before the gateway
// writes a status, so its error is an ordinary error answer.
func (st *inprocStream) Header() (metadata.MD, error) {
	select {
	case <-st.ready:
	case <-st.ctx.Done():
		return nil, status.FromContextError(st.ctx.Err()).Err()
	}
	if !st.sent {
		<-st.done
		if st.err != nil {
			return nil, st.err
		}
	}
	return metadata.MD{}, nil
}

func (st *inprocStream) Trailer() metadata.MD { return nil }
func (st *inprocStream) CloseSend() error     { return nil }
func (st *inprocStream) Context() context.Context {
	return st.ctx
}

func (st *inprocStream) SendMsg(m any) error {
	b, err := proto.Marshal(m.(proto.Message))
	if err != nil {
		return err
	}
	select {
	case st.req <- b:
		return nil
	default:
		return status.Error(codes.Internal, "a server stream takes one request")
	}
}

func (st *inprocStream) RecvMsg(m any) error {
	select {
	case b := <-st.out:
		return proto.Unmarshal(b, m.(proto.Message))
	case <-st.done:
		if st.err != nil {
			return st.err
		}
		return io.EOF
	case <-st.ctx.Done():
		st.cancel()
		return status.FromContextError(st.ctx.Err()).Err()
	}
}

// inprocServerStream is the service's side.
type inprocServerStream struct {
	st       *inprocStream
	ctx      context.Context
	received bool
}

func (s *inprocServerStream) SetHeader(metadata.MD) error  { return nil }
func (s *inprocServerStream) SendHeader(metadata.MD) error { return nil }
func (s *inprocServerStream) SetTrailer(metadata.MD)       {}
func (s *inprocServerStream) Context() context.Context     { return s.ctx }

func (s *inprocServerStream) SendMsg(m any) error {
	b, err := proto.Marshal(m.(proto.Message))
	if err != nil {
		return err
	}
	s.st.sent = true
	s.st.markReady()
	select {
	case s.st.out <- b:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *inprocServerStream) RecvMsg(m any) error {
	if s.received {
		return io.EOF
	}
	select {
	case b := <-s.st.req:
		s.received = true
		return proto.Unmarshal(b, m.(proto.Message))
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}
