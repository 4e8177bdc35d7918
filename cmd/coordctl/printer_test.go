package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/coordctl -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestLeaseTable(t *testing.T) {
	var buf bytes.Buffer
	leaseTable(&buf, []*coordv1.Lease{
		{Name: "daily-close", Owner: "billing-7f9c:4121:ab12", Generation: 42, Held: pbtime.Dur(90_000), RenewedAgo: pbtime.Dur(1_200), ExpiresIn: pbtime.Dur(28_800)},
		{Name: "payments/reconcile/a-very-long-lease-name-that-stays-readable", Owner: "worker-1", Generation: 3,
			Held: pbtime.Dur(9 * 24 * 3600_000), RenewedAgo: pbtime.Dur(9*24*3600_000 - 5000), Expired: true},
		{Name: "nightly", Owner: "ops", Generation: 1, Held: pbtime.Dur(2*3600_000 + 5*60_000), RenewedAgo: pbtime.Dur(12_000), Released: true},
	})
	golden(t, "lease_table", buf.Bytes())

	// With identities (TLS): an IDENTITY column after the owner.
	buf.Reset()
	leaseTable(&buf, []*coordv1.Lease{
		{Name: "daily-close", Owner: "billing-7f9c:4121:ab12", Identity: "billing-worker", Generation: 42, Held: pbtime.Dur(90_000),
			RenewedAgo: pbtime.Dur(1_200), ExpiresIn: pbtime.Dur(28_800)},
		{Name: "legacy", Owner: "ops", Generation: 1, Held: pbtime.Dur(60_000), RenewedAgo: pbtime.Dur(60_000), Released: true},
	})
	golden(t, "lease_table_identity", buf.Bytes())
}

func TestWindowTable(t *testing.T) {
	var buf bytes.Buffer
	now := int64(1_800_000_000_000)
	windowTable(&buf, []*coordv1.Window{
		{Job: "daily-close", Window: "2026-09-24", State: coordv1.WindowState_WINDOW_STATE_COMPLETED, Attempts: 2, Owner: "b",
			Generation: 8, StartedAt: pbtime.At(now - 86_400_000), CompletedAt: pbtime.At(now - 86_000_000), Result: []byte("closed 42 stores")},
		{Job: "daily-close", Window: "2026-09-25", State: coordv1.WindowState_WINDOW_STATE_INCOMPLETE, Attempts: 1, Owner: "a",
			Generation: 9, StartedAt: pbtime.At(now - 65_000)},
	}, now)
	golden(t, "window_table", buf.Bytes())
}

func TestStatusAndMembersTables(t *testing.T) {
	var buf bytes.Buffer
	statusTable(&buf, []nodeStatus{
		{endpoint: "127.0.0.1:7410", status: &coordv1.StatusResponse{Id: "node1", State: "Leader", LeaderId: "node1", Term: 4,
			CommitIndex: 1200, AppliedIndex: 1200, FsmDigest: "f16b98c21dfcf085b2ffe899bbab9d61b15a3db1a304acc6611588129782676d",
			CalendarTime: pbtime.At(1_790_000_046_000), LeaseClockLag: pbtime.Dur(46_000),
			ClockOffset: &coordv1.ClockOffset{Id: "node1", MeasuredAt: pbtime.At(1_790_000_046_000)},
			ClockOffsets: []*coordv1.ClockOffset{{Id: "node1", MeasuredAt: pbtime.At(1_790_000_046_000)},
				{Id: "node2", Offset: pbtime.DurUs(2_987_000), OffsetError: pbtime.DurUs(180), MeasuredAt: pbtime.At(1_790_000_045_900)}}}},
		{endpoint: "127.0.0.1:7420", status: &coordv1.StatusResponse{Id: "node2", State: "Follower", LeaderId: "node1", Term: 4,
			CommitIndex: 1200, AppliedIndex: 1199, LastContact: pbtime.Dur(41), FsmDigest: "f16b98c21dfcf085b2ffe899bbab9d61b15a3db1a304acc6611588129782676d",
			CalendarTime: pbtime.At(1_790_000_045_800), LeaseClockLag: pbtime.Dur(45_900),
			ClockOffset: &coordv1.ClockOffset{Id: "node2", Offset: pbtime.DurUs(2_990_000), OffsetError: pbtime.DurUs(200), MeasuredAt: pbtime.At(1_790_000_044_900)}}},
		{endpoint: "127.0.0.1:7430", err: errors.New("connection refused")},
	})
	membersTable(&buf, []*coordv1.Member{
		{Id: "node1", RaftAddress: "127.0.0.1:7412", GrpcAddress: "127.0.0.1:7410", Suffrage: "Voter", Leader: true},
		{Id: "node2", RaftAddress: "127.0.0.1:7422", GrpcAddress: "127.0.0.1:7420", Suffrage: "Voter"},
	})
	resourceTable(&buf, &coordv1.Resource{Resource: "payments/store-42", LeaseName: "daily-close", MaxGeneration: 8, Commits: 3,
		LastCommitAt: pbtime.At(1_000), LastIdempotencyKey: "close-2026-09-25-store-42"}, 13_500)
	golden(t, "status_members_resource", buf.Bytes())
}

func TestHuman(t *testing.T) {
	for ms, want := range map[int64]string{0: "0ms", 850: "850ms", 4200: "4.2s", 12_000: "12s", 90_000: "1m30s",
		7_500_000: "2h05m", 9*86_400_000 + 4*3_600_000: "9d4h", -1500: "0ms"} {
		if got := human(ms); got != want {
			t.Errorf("human(%d) = %q, want %q", ms, got, want)
		}
	}
}

// Usage errors exit 2 without contacting any node.
func TestUsageExitCodes(t *testing.T) {
	for _, args := range [][]string{
		{"lease", "get"},
		{"lease", "renew", "x", "--owner", "o"},
		{"nope"},
		{"-o", "yaml", "status"},
		{"lease", "acquire", "x", "--bogus"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"--endpoints", "127.0.0.1:1"}, args...), &out, &errOut); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errOut.String())
		}
	}
}

// Every command's --help shows an example.
func TestEveryCommandHasAnExample(t *testing.T) {
	a := &app{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			t.Errorf("%q has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(a.rootCmd())
}

// A leader whose last probes of the other members failed is shown as
// without a majority, with why and what it means; so is one that is the
// only endpoint of three to answer when there are no probes to go by.
func TestStatusLeaderWithoutMajority(t *testing.T) {
	var buf bytes.Buffer
	refused := `rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7420: connect: connection refused"`
	statusTable(&buf, []nodeStatus{
		{endpoint: "127.0.0.1:7410", status: &coordv1.StatusResponse{Id: "node1", State: "Leader", LeaderId: "node1", Term: 5,
			CommitIndex: 1300, AppliedIndex: 1300, CalendarTime: pbtime.At(1_790_000_046_000), LeaseClockLag: pbtime.Dur(46_000),
			ClockOffsets: []*coordv1.ClockOffset{{Id: "node1", MeasuredAt: pbtime.At(1_790_000_046_000)},
				{Id: "node2", Offset: pbtime.DurUs(2_987_000), OffsetError: pbtime.DurUs(180), MeasuredAt: pbtime.At(1_790_000_040_000), Error: refused},
				{Id: "node3", Error: "context deadline exceeded"}}}},
		{endpoint: "127.0.0.1:7420", err: errors.New("connection refused")},
		{endpoint: "127.0.0.1:7430", err: errors.New("connection refused")},
	})
	alone := []nodeStatus{
		{endpoint: "127.0.0.1:7410", status: &coordv1.StatusResponse{Id: "node1", State: "Leader", LeaderId: "node1", Term: 5}},
		{endpoint: "127.0.0.1:7420", err: errors.New("connection refused")},
		{endpoint: "127.0.0.1:7430", err: errors.New("connection refused")},
	}
	statusTable(&buf, alone)
	statusTable(&buf, []nodeStatus{ // it stepped down: no leader anywhere
		{endpoint: "127.0.0.1:7410", status: &coordv1.StatusResponse{Id: "node1", State: "Candidate", Term: 6, LastContact: pbtime.Dur(1200)}},
		{endpoint: "127.0.0.1:7420", err: errors.New("connection refused")},
		{endpoint: "127.0.0.1:7430", err: errors.New("connection refused")},
	})
	golden(t, "status_no_majority", buf.Bytes())
	if strings.Count(buf.String(), "Leader (no majority)") != 2 {
		t.Fatalf("state not marked:\n%s", buf.String())
	}
	var doc bytes.Buffer
	if err := writeStatusJSON(&doc, alone); err != nil || !strings.Contains(doc.String(), `"warnings": [`) {
		t.Fatalf("json %v:\n%s", err, doc.String())
	}
}
