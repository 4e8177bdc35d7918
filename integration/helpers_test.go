package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errInfo returns the code, ErrorInfo reason and metadata of a status error.
func errInfo(err error) (codes.Code, string, map[string]string) {
	return status.Code(err), coorderr.WireReason(err), coorderr.Metadata(err)
}

func wantErr(t *testing.T, err error, code codes.Code, reason string) map[string]string {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s/%s, got success", code, reason)
	}
	c, r, meta := errInfo(err)
	if c != code || r != reason {
		t.Fatalf("want %s/%s, got %s/%s: %v", code, reason, c, r, err)
	}
	return meta
}

func acquire(t *testing.T, cc coordv1.CoordinatorClient, name, owner string, ttl time.Duration) *coordv1.Lease {
	t.Helper()
	return grant(t, ctxT(t), cc, &coordv1.AcquireRequest{Name: name, Owner: owner, TtlMs: ttl.Milliseconds()}).GetLease()
}

// grant sends req; the test fails unless it is granted.
func grant(t *testing.T, ctx context.Context, cc coordv1.CoordinatorClient, req *coordv1.AcquireRequest) *coordv1.AcquireResponse {
	t.Helper()
	resp, err := cc.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire %s: %v", req.GetName(), err)
	}
	if !resp.GetAcquired() {
		t.Fatalf("acquire %s by %s: held by %v", req.GetName(), req.GetOwner(), resp.GetLease())
	}
	return resp
}

func withMD(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// metricValue reads one sample of a node's metrics, written as in the text
// exposition format: name{label="v",...} (labels in any order).
func metricValue(t *testing.T, n *testcluster.Node, sample string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(strings.TrimSuffix(sample, "}"), "{")
	want := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = strings.Trim(v, `"`)
		}
	}
	mfs, err := n.API.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// freePortRange finds n consecutive free loopback ports (proccluster's
// picker: below the ephemeral range, never a port it handed out before in
// this process) and returns the first.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	base, err := proccluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// freeBase finds a BASE_PORT for scripts/local-cluster.sh whose three
// nodes' ports (node N: gRPC, HTTP, Raft at BASE_PORT+10*(N-1)+0, 1, 2)
// are free.
func freeBase(t *testing.T) int {
	t.Helper()
	return freePortRange(t, 23)
}

// freePortAddr is a free loopback address below the ephemeral range.
func freePortAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePortRange(t, 1))
}
