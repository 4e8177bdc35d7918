package api

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeStream is a server stream that receives n messages, then io.EOF, and
// fails its sends after ok of them.
type fakeStream struct {
	grpc.ServerStream
	n, ok int
}

func (s *fakeStream) Context() context.Context { return context.Background() }

func (s *fakeStream) RecvMsg(any) error {
	if s.n == 0 {
		return io.EOF
	}
	s.n--
	return nil
}

func (s *fakeStream) SendMsg(any) error {
	if s.ok == 0 {
		return status.Error(codes.Unavailable, "gone")
	}
	s.ok--
	return nil
}

// series flattens a registry: name{labels} → type, help and value (a
// counter's value; a histogram's sample count and bucket bounds, as the
// durations differ).
func series(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			var v string
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_HISTOGRAM:
				var bounds []float64
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				v = fmt.Sprint(m.GetHistogram().GetSampleCount(), bounds)
			default:
				v = "unexpected type"
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = mf.GetType().String() + " " + mf.GetHelp() + " = " + v
		}
	}
	return out
}

// The server's per-call series are those of grpc-ecosystem's provider,
// configured as coordd configured it: the same calls give the same names,
// labels, help, types, counts and buckets.
func TestGRPCMetricsAsTheProvider(t *testing.T) {
	ours := prometheus.NewRegistry()
	m := newGRPCMetrics(ours)
	theirs := prometheus.NewRegistry()
	p := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets)))
	theirs.MustRegister(p)
	unaries := []grpc.UnaryServerInterceptor{m.unary, p.UnaryServerInterceptor()}
	streams := []grpc.StreamServerInterceptor{m.stream, p.StreamServerInterceptor()}

	ctx := context.Background()
	calls := []struct {
		method string
		err    error
	}{
		{"/coord.v1.Coordinator/Acquire", nil},
		{"/coord.v1.Coordinator/Acquire", nil},
		{"/coord.v1.Coordinator/Acquire", status.Error(codes.FailedPrecondition, "held")},
		{"/coord.v1.Queue/Submit", status.Error(codes.InvalidArgument, "bad")},
		{"/coord.v1.Queue/Submit", context.DeadlineExceeded}, // a context error counts as its code
		{"/coord.v1.Queue/Submit", context.Canceled},
		{"/coord.v1.Queue/Submit", io.ErrUnexpectedEOF},                 // any other error: Unknown
		{"/coord.v1.Queue/Submit", status.Error(codes.Code(99), "odd")}, // not one of gRPC's codes
		{"no-slash", nil}, // unknown/unknown
	}
	for _, c := range calls {
		for _, u := range unaries {
			resp, err := u(ctx, "req", &grpc.UnaryServerInfo{FullMethod: c.method}, func(context.Context, any) (any, error) {
				if c.err != nil {
					return nil, c.err
				}
				return "resp", nil
			})
			if err != c.err || (err == nil && resp != "resp") {
				t.Fatalf("%s: %v %v", c.method, resp, err)
			}
		}
	}
	kinds := []*grpc.StreamServerInfo{
		{FullMethod: "/coord.v1.Coordinator/KeepAlive", IsClientStream: true, IsServerStream: true},
		{FullMethod: "/coord.v1.Watch/Watch", IsServerStream: true},
		{FullMethod: "/coord.v1.X/Upload", IsClientStream: true},
	}
	for _, info := range kinds {
		for _, s := range streams {
			for _, fail := range []bool{false, true} {
				err := s(nil, &fakeStream{n: 3, ok: 2}, info, func(_ any, ss grpc.ServerStream) error {
					for ss.RecvMsg(nil) == nil {
					}
					for ss.SendMsg(nil) == nil {
					}
					if fail {
						return status.Error(codes.Unavailable, "gone")
					}
					return nil
				})
				if (err != nil) != fail {
					t.Fatalf("%s: %v", info.FullMethod, err)
				}
			}
		}
	}

	got, want := series(t, ours), series(t, theirs)
	if len(want) == 0 {
		t.Fatal("the provider recorded nothing")
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s:\n ours   %q\n theirs %q", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: only ours", k)
		}
	}
}

// BenchmarkUnaryMetrics: what counting one unary call costs, here and in
// the provider (sub-benchmarks).
func BenchmarkUnaryMetrics(b *testing.B) {
	m := newGRPCMetrics(prometheus.NewRegistry())
	p := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets)))
	prometheus.NewRegistry().MustRegister(p)
	info := &grpc.UnaryServerInfo{FullMethod: "/coord.v1.Queue/Submit"}
	handler := func(context.Context, any) (any, error) { return "resp", nil }
	for name, u := range map[string]grpc.UnaryServerInterceptor{"coordd": m.unary, "provider": p.UnaryServerInterceptor()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := u(context.Background(), "req", info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
