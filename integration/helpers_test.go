package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
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
	return grant(t, ctxT(t), cc, &coordv1.AcquireRequest{Name: name, Owner: owner, Ttl: pbtime.Dur(ttl.Milliseconds())}).GetLease()
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

// jsonArgs is job args of exactly n bytes that are JSON (a string of x's;
// empty for n < 2), as the queue requires of args and results.
func jsonArgs(n int) []byte {
	if n < 2 {
		return nil
	}
	return []byte(`"` + strings.Repeat("x", n-2) + `"`)
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

// textPorts returns the first of n consecutive free loopback ports, for
// the only tests whose ports are written in text: the README's commands
// (docs_test rewrites 127.0.0.1:74NN to base+NN) and
// scripts/local-cluster.sh's BASE_PORT. Every other test binds port 0 and
// reads the address it got. Ports come in disjoint blocks of
// textPortBlock, counted from a random block below the kernel's ephemeral
// range (where port 0 binds and outgoing connections never land), so two
// tests of this process never share one; a block with a port in use (by
// another process) is skipped.
func textPorts(t *testing.T, n int) int {
	t.Helper()
	if n > textPortBlock {
		t.Fatalf("textPorts(%d): at most %d", n, textPortBlock)
	}
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	blocks := int64((low - textPortFloor) / textPortBlock)
	textPortsOnce.Do(func() { textPortNext.Store(rand.Int64N(blocks)) })
	for range 100 {
		base := textPortFloor + int(textPortNext.Add(1)%blocks)*textPortBlock
		if portsFree(base, n) {
			return base
		}
	}
	t.Fatalf("no block of %d free loopback ports below %d", n, low)
	return 0
}

const (
	textPortFloor = 10000
	textPortBlock = 64
)

var (
	textPortsOnce sync.Once
	textPortNext  atomic.Int64
)

// portsFree reports whether [base, base+n) can be listened on now.
func portsFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// deadRaftAddr is a loopback address where a connection is accepted and
// closed at once: a Raft peer that never answers (for a server added to a
// configuration without a node behind it).
func deadRaftAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}
