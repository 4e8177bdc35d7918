package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/spf13/cobra"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A usage error points to the help of the command that was given, not to
// coordctl's.
func TestUsageErrorsNameTheSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		help string
	}{
		{[]string{"lease", "acquire", "x", "--bogus"}, "coordctl lease acquire --help"},
		{[]string{"lease", "acquire", "x"}, "coordctl lease acquire --help"}, // --owner missing
		{[]string{"lease", "get"}, "coordctl lease get --help"},
		{[]string{"window", "claim", "j", "w", "--lease", "l"}, "coordctl window claim --help"},
		{[]string{"lease", "nope"}, "coordctl lease --help"},
		{[]string{"-o", "yaml", "status"}, "coordctl status --help"},
		{[]string{"nope"}, "coordctl --help"},
	} {
		var out, errOut bytes.Buffer
		code := run(append([]string{"--endpoints", "127.0.0.1:1"}, tc.args...), &out, &errOut)
		want := "Run '" + tc.help + "' for usage.\n"
		if code != exitUsage || !strings.HasSuffix(errOut.String(), want) || strings.Count(errOut.String(), "\n") != 2 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d ending %q", tc.args, code, errOut.String(), exitUsage, want)
		}
	}
}

// Ages never come out negative: a time after now (clock skew between the
// node that stamped it and the one that answers) reads "in …".
func TestAgesNeverNegative(t *testing.T) {
	for _, tc := range []struct {
		now, at int64
		want    string
	}{
		{10_000, 8_800, "1.2s ago"},
		{10_000, 10_000, "0ms ago"},
		{10_000, 10_152, "in 152ms"},
		{10_000, 0, "-"},
		{0, 10_000, "-"},
	} {
		if got := ago(tc.now, tc.at); got != tc.want {
			t.Errorf("ago(%d, %d) = %q, want %q", tc.now, tc.at, got, tc.want)
		}
	}
	if got := agoMs(-90_000); got != "in 1m30s" {
		t.Errorf("agoMs(-90000) = %q", got)
	}
	// Every table with skewed input: no "-<digit>" anywhere.
	var buf bytes.Buffer
	leaseTable(&buf, []*coordv1.Lease{{Name: "l", Owner: "o", Generation: 1, Held: pbtime.Dur(-20), RenewedAgo: pbtime.Dur(-152), ExpiresIn: pbtime.Dur(-5)}})
	windowTable(&buf, []*coordv1.Window{{Job: "j", Window: "w", StartedAt: pbtime.At(2_000), CompletedAt: pbtime.At(3_000)}}, 1_000)
	resourceTable(&buf, &coordv1.Resource{Resource: "r", LastCommitAt: pbtime.At(5_000)}, 1_000)
	statusTable(&buf, []nodeStatus{{endpoint: "e", status: &coordv1.StatusResponse{State: "Follower", LastContact: pbtime.Dur(0)}}})
	overdueText(&buf, &coordv1.ListOverdueResponse{StuckLeases: []*coordv1.StuckLease{{Reason: "SILENT",
		Lease: &coordv1.Lease{Name: "l", Held: pbtime.Dur(-1), RenewedAgo: pbtime.Dur(-2)}}}}, true)
	if m := regexp.MustCompile(`-\d`).FindString(buf.String()); m != "" {
		t.Fatalf("negative duration %q in:\n%s", m, buf.String())
	}
	for _, want := range []string{"in 152ms", "in 1.0s", "in 4.0s", "in 2ms"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, buf.String())
		}
	}
}

// status -o json is one document: {"nodes": [...]} with one object per
// endpoint, the answering and the failing ones indented alike, 64-bit
// integers as strings (protojson).
func TestStatusJSON(t *testing.T) {
	var buf bytes.Buffer
	err := writeStatusJSON(&buf, []nodeStatus{
		{endpoint: "127.0.0.1:7410", status: &coordv1.StatusResponse{Id: "node1", State: "Leader", Term: 4, CommitIndex: 1200}},
		{endpoint: "127.0.0.1:7430", err: errors.New("connection refused")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.Nodes) != 2 {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if st := doc.Nodes[0]["status"].(map[string]any); st["term"] != "4" || st["commit_index"] != "1200" || st["leader_id"] != "" {
		t.Fatalf("status %v", st)
	}
	if doc.Nodes[1]["error"] != "connection refused" {
		t.Fatalf("error node %v", doc.Nodes[1])
	}
	// Every line of the document is indented by a multiple of two spaces
	// and no object sits on one line with another's fields.
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if indent%2 != 0 || strings.Count(line, `":`) > 1 {
			t.Fatalf("line %q of:\n%s", line, buf.String())
		}
	}
}

// With no node accepting connections, coordctl says so at once, keeps
// trying for --timeout, then reports it; status asks each node once and
// says nothing about retrying.
func TestNoNodeUp(t *testing.T) {
	eps := []string{freeAddr(t), freeAddr(t)}
	r := ctl(t, eps, "--timeout", "300ms", "lease", "get", "x")
	lines := strings.Split(strings.TrimSuffix(r.errOut, "\n"), "\n")
	if r.code != exitError || len(lines) != 2 ||
		!regexp.MustCompile(`^cannot connect to any endpoint yet \(127\.0\.0\.1:\d+: connection refused\), retrying for up to --timeout 300ms$`).MatchString(lines[0]) ||
		!strings.HasPrefix(lines[1], "error: lease get x: cannot reach coordd: ") {
		t.Fatalf("exit %d\n%s", r.code, r.errOut)
	}
	r = ctl(t, eps, "--timeout", "300ms", "status")
	if r.code != exitError || r.errOut != "error: 2 of 2 endpoints did not answer\n" || strings.Count(r.out, "unreachable") != 2 {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
}

// freeAddr is a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// No --help example ends in a line continuation with nothing after it
// (a group's example is the first line of each subcommand's): each one can
// be pasted into a shell as it is.
func TestExamplesHaveNoDanglingContinuation(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		lines := strings.Split(strings.TrimRight(c.Example, "\n "), "\n")
		for i, l := range lines {
			if strings.HasSuffix(strings.TrimSpace(l), `\`) &&
				(i+1 == len(lines) || strings.HasPrefix(strings.TrimSpace(lines[i+1]), "coordctl ")) {
				t.Errorf("%s: example line %d ends in a dangling \\:\n%s", c.CommandPath(), i+1, c.Example)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{}).rootCmd())
}
