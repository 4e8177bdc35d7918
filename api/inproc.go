package api

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// inproc is a grpc.ClientConnInterface that calls this node's own unary
// services in process, for the HTTP gateway and the console: each call
// enters through the method's generated handler, as a gRPC call does, with
// the guard the gRPC interceptor applies (authentication as the HTTP
// caller's certificate identity, rate limit, access table, ACL). Requests
// and answers are copied, so neither side can change the other's message.
type inproc struct {
	s       *Server
	methods map[string]inprocMethod // by full method name
	streams map[string]inprocStreamMethod
}

type inprocMethod struct {
	srv     any
	handler grpc.MethodHandler
}

// newInproc serves the unary methods of the services given with their
// implementations.
func newInproc(s *Server, services map[*grpc.ServiceDesc]any) *inproc {
	c := &inproc{s: s, methods: map[string]inprocMethod{}, streams: map[string]inprocStreamMethod{}}
	for desc, srv := range services {
		for _, m := range desc.Methods {
			c.methods["/"+desc.ServiceName+"/"+m.MethodName] = inprocMethod{srv: srv, handler: m.Handler}
		}
		for _, m := range desc.Streams {
			if !m.ClientStreams { // server streams (Watch); KeepAlive stays gRPC
				c.streams["/"+desc.ServiceName+"/"+m.StreamName] = inprocStreamMethod{srv: srv, handler: m.Handler}
			}
		}
	}
	return c
}

// inprocConn is this server's in-process connection to its Coordinator,
// Cluster, Queue, Schedules and Watch services.
func (s *Server) inprocConn() *inproc {
	return newInproc(s, map[*grpc.ServiceDesc]any{
		&coordv1.Coordinator_ServiceDesc: &coordinator{s: s},
		&coordv1.Cluster_ServiceDesc:     &cluster{s: s},
		&coordv1.Queue_ServiceDesc:       &queue{s: s},
		&coordv1.Schedules_ServiceDesc:   &schedules{s: s},
		&coordv1.Watch_ServiceDesc:       s.watch,
	})
}

func (c *inproc) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "%s is not served in process", method)
	}
	// What the caller sends as metadata the service receives, as incoming
	// metadata only (as a gRPC server's handler sees it: nothing outgoing,
	// so a call the service forwards carries only the keys it adds), and
	// what the service sets as headers (the leader's address) the caller
	// gets back.
	md, _ := metadata.FromOutgoingContext(ctx)
	ctx = metadata.NewOutgoingContext(metadata.NewIncomingContext(ctx, md), nil)
	var stream runtime.ServerTransportStream
	ctx = grpc.NewContextWithServerTransportStream(ctx, &stream)
	dec := func(in any) error {
		proto.Merge(in.(proto.Message), args.(proto.Message))
		return nil
	}
	resp, err := m.handler(m.srv, ctx, dec, c.guard)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = stream.Header()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = stream.Trailer()
		}
	}
	if err != nil {
		return err
	}
	proto.Merge(reply.(proto.Message), resp.(proto.Message))
	return nil
}

// guard is the unary interceptor of in-process calls: the caller is the
// HTTP request's certificate identity (httpIdentityKey), never a forwarded
// one.
func (c *inproc) guard(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	// The call's span first, as in the gRPC interceptor chain, so that a
	// refusal is traced too (nothing when this server does not trace).
	if c.s.tracer != nil {
		return c.s.traceUnary(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return c.guarded(ctx, req, info, handler)
		})
	}
	return c.guarded(ctx, req, info, handler)
}

func (c *inproc) guarded(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := c.s.guard(ctx, httpPeer(ctx), false, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}
