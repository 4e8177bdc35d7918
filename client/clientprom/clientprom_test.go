package clientprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/periodic"
)

var (
	_ client.Metrics   = (*Metrics)(nil)
	_ periodic.Metrics = (*JobMetrics)(nil)
)

func TestCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.LeaseLost("job", "LOCAL_DEADLINE")
	m.RunSkipped("job")
	m.RunSkipped("job")
	m.FenceRejected("r", "STALE_TOKEN")
	m.RenewLatency(3 * time.Millisecond)
	want := `
# HELP coordd_client_runs_skipped_total RunExclusive calls that did not run because another owner held the lease.
# TYPE coordd_client_runs_skipped_total counter
coordd_client_runs_skipped_total{lease="job"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "coordd_client_runs_skipped_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.lost.WithLabelValues("job", "LOCAL_DEADLINE")); n != 1 {
		t.Fatal(n)
	}
	if n := testutil.ToFloat64(m.rejected.WithLabelValues("STALE_TOKEN")); n != 1 {
		t.Fatal(n)
	}
}
