package integration

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/internal/pbtime"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// enumStyle is an enum's constant name (COMMAND_TYPE_ACQUIRE, LEASE_LOST):
// what no label value may look like.
var enumStyle = regexp.MustCompile(`^[A-Z_]+$`)

// nameLabels are the labels whose values are coordd's own names (not
// data such as queues, node ids, targets or ACL rule names): they must
// be lower_snake_case.
var nameLabels = map[string]bool{"reason": true, "type": true, "state": true, "outcome": true, "kind": true,
	"limit": true, "op": true, "family": true, "grpc_type": true, "method": true}

var lowerSnake = regexp.MustCompile(`^[a-z0-9_]+$`)

// One node's /metrics after a few calls over gRPC and HTTP: every call's
// method has per-RPC series (started, handled by code, latency), every
// HTTP route its own by pattern, coordd_build_info is 1, and no label
// value anywhere is an enum constant's name (grpc_code keeps gRPC's own
// names, "OK" among them, as every gRPC dashboard expects).
func TestMetricsPerCallAndLabelStyle(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	n := c.WaitLeader()
	ctx := ctxT(t)
	cc := c.Coord(n)
	l := acquire(t, cc, "m", "o", 2*time.Second)
	_, err := cc.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "r", LeaseName: "m", Generation: 9})
	wantErr(t, err, codes.FailedPrecondition, "STALE_TOKEN")
	_, err = cc.Renew(ctx, &coordv1.RenewRequest{Name: "m", Owner: "other", Generation: l.GetGeneration(), Ttl: pbtime.Dur(2000)})
	if err == nil {
		t.Fatal("a renew by another owner was accepted")
	}
	_, err = cc.Acquire(ctx, &coordv1.AcquireRequest{Name: "", Owner: "o", Ttl: pbtime.Dur(2000)})
	wantErr(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	base := "http://" + n.API.HTTPAddr()
	for _, path := range []string{"/v1/leases/a/b/c", "/v1/leases/m"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Post(base+"/v1/leases/http-lease/acquire", "application/json", strings.NewReader(`{"owner":"h","ttl":"5s"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP acquire: %d", resp.StatusCode)
	}

	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		fam := fams[name]
		if fam == nil {
			return 0, false
		}
	next:
		for _, m := range fam.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
		return 0, false
	}
	acq := map[string]string{"grpc_service": "coord.v1.Coordinator", "grpc_method": "Acquire"}
	for _, want := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"grpc_server_started_total", acq, 2},
		{"grpc_server_handled_total", with(acq, "grpc_code", "OK"), 1},
		{"grpc_server_handled_total", with(acq, "grpc_code", "InvalidArgument"), 1},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "FencedCommit", "grpc_code": "FailedPrecondition"}, 1},
		{"grpc_server_handling_seconds", acq, 2},
		{"coordd_http_requests_total", map[string]string{"route": "/v1/leases/{name}", "method": "get", "code": "200"}, 1},
		{"coordd_http_requests_total", map[string]string{"route": "/v1/leases/{name}", "method": "get", "code": "404"}, 1},
		{"coordd_http_requests_total", map[string]string{"route": "/v1/leases/{name}/acquire", "method": "post", "code": "200"}, 1},
		{"coordd_http_request_duration_seconds", map[string]string{"route": "/v1/leases/{name}/acquire", "method": "post"}, 1},
		{"coordd_build_info", nil, 1},
		{"coordd_fence_rejections_total", map[string]string{"reason": "stale_token"}, 1},
		{"coordd_proposals_total", map[string]string{"type": "acquire", "outcome": "ok"}, 1},
		{"coordd_raft_state", map[string]string{"state": "leader"}, 1},
	} {
		if v, ok := value(want.name, want.labels); !ok || v < want.min {
			t.Errorf("%s%v = %v (found %v), want >= %v", want.name, want.labels, v, ok, want.min)
		}
	}
	bi := fams["coordd_build_info"].GetMetric()[0]
	labels := map[string]bool{}
	for _, lp := range bi.GetLabel() {
		labels[lp.GetName()] = lp.GetValue() != ""
	}
	if !labels["version"] || !labels["go_version"] || len(labels) != 3 {
		t.Errorf("coordd_build_info labels %v, want version, revision, go_version", bi.GetLabel())
	}
	total, grpcSeries := 0, 0
	for name, fam := range fams {
		total += len(fam.GetMetric())
		if strings.HasPrefix(name, "grpc_server_") {
			grpcSeries += len(fam.GetMetric())
		}
	}
	grpcBytes := 0
	for _, line := range strings.SplitAfter(string(body), "\n") {
		if strings.HasPrefix(line, "grpc_server_") || strings.HasPrefix(line, "# HELP grpc_server_") || strings.HasPrefix(line, "# TYPE grpc_server_") {
			grpcBytes += len(line)
		}
	}
	t.Logf("%d metrics in the scrape (%d bytes), %d of them grpc_server_* (%d bytes)", total, len(body), grpcSeries, grpcBytes)
	// The lint: over every series of the scrape.
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				k, v := lp.GetName(), lp.GetValue()
				if k == "grpc_code" {
					if _, ok := codeNames[v]; !ok {
						t.Errorf("%s{%s=%q}: not a gRPC code name", name, k, v)
					}
					continue
				}
				if enumStyle.MatchString(v) {
					t.Errorf("%s{%s=%q}: an enum constant's name as a label value", name, k, v)
				}
				if nameLabels[k] && strings.HasPrefix(name, "coordd_") && !lowerSnake.MatchString(v) {
					t.Errorf("%s{%s=%q}: not lower_snake_case", name, k, v)
				}
				if !model.LabelValue(v).IsValid() {
					t.Errorf("%s{%s=%q}: not UTF-8", name, k, v)
				}
			}
		}
	}
}

// codeNames are gRPC's code names as the provider writes them.
var codeNames = func() map[string]bool {
	m := map[string]bool{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = true
	}
	return m
}()

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}
