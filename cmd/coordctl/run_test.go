package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/client/queue"
)

// The help of the commands that run a command documents their exit codes,
// signals and environment variables, with examples (golden files: go test
// ./cmd/coordctl -update rewrites them).
func TestRunnerHelpGolden(t *testing.T) {
	noTLSEnv(t)
	for name, args := range map[string][]string{
		"help_lease_run": {"lease", "run", "--help"},
		"help_worker":    {"worker", "--help"},
		"help_elect":     {"elect", "--help"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != exitOK || errOut.Len() > 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut.String())
		}
		for _, want := range []string{"Exit status", "COORDD_FENCING_TOKEN", "SIGTERM", "Examples:"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: no %q in the help", args, want)
			}
		}
		golden(t, name, out.Bytes())
	}
}

// A command without "--", or arguments in the wrong place, is a usage error.
func TestRunnerUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lease", "run", "x"}, "error: want NAME -- CMD [ARGS...]"},
		{[]string{"lease", "run", "x", "sh"}, "error: want NAME -- CMD [ARGS...]"},
		{[]string{"lease", "run", "--"}, "error: want NAME -- CMD [ARGS...]"},
		{[]string{"lease", "run", "x", "--tz", "UTC", "--window", "2026-09-25", "--", "true"}, "error: --tz UTC: only with --window today or yesterday"},
		{[]string{"worker", "--", "true"}, `error: required flag(s) "queue" not set`},
		{[]string{"worker", "--queue", "q", "true"}, "error: want -- CMD [ARGS...]"},
		{[]string{"worker", "--queue", "q", "--concurrency", "0", "--", "true"}, "error: --concurrency 0: want 1 to 1000"},
		{[]string{"elect", "x", "--observe", "--", "true"}, "error: --observe: want NAME only, no command"},
		{[]string{"elect", "x"}, "error: want NAME -- CMD [ARGS...]"},
		{[]string{"lease", "run", "x", "--job", "j", "--", "true"}, "error: want --ttl > 0, --kill-grace ≥ 0, --job only with --window"},
	} {
		var out, errOut bytes.Buffer
		code := run(append([]string{"--endpoints", "127.0.0.1:1"}, tc.args...), &out, &errOut)
		if code != exitUsage || !strings.HasPrefix(errOut.String(), tc.want+"\n") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// A result is JSON: a command's output that is one JSON value as is, other
// text as a JSON string.
func TestResultPayload(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"  \n":                  "",
		`{"sent": true}` + "\n": `{"sent": true}`,
		"42":                    "42",
		"closed 2026-09-25\n":   `"closed 2026-09-25"`,
		"a\"b\n":                `"a\"b"`,
		"\xff ok":               "\"\uFFFD ok\"",
	} {
		if got := string(resultPayload([]byte(in))); got != want {
			t.Errorf("resultPayload(%q) = %q, want %q", in, got, want)
		}
	}
}

// lastLine passes everything on and keeps the last non-empty line, cut to
// its last max bytes on a rune boundary.
func TestLastLine(t *testing.T) {
	var out bytes.Buffer
	l := newLastLine(&out, 8)
	for _, w := range []string{"first\nsec", "ond line\n", "\n  \n"} {
		if _, err := l.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(l.Bytes()); got != "ond line" || out.String() != "first\nsecond line\n\n  \n" {
		t.Fatalf("last line %q, passed on %q", got, out.String())
	}
	_, _ = l.Write([]byte("unterminated é€"))
	if got := string(l.Bytes()); got != "ed é€" { // 8 bytes
		t.Fatalf("unterminated last line %q", got)
	}
}

// today and yesterday are dates in the zone, at the given instant.
func TestWindowDate(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 29, 22, 30, 0, 0, time.UTC) // 00:30 on the 30th in Berlin (CEST, after the DST change)
	for _, tc := range []struct {
		key  string
		loc  *time.Location
		want string
	}{
		{"today", time.UTC, "2026-03-29"},
		{"yesterday", time.UTC, "2026-03-28"},
		{"today", berlin, "2026-03-30"},
		{"yesterday", berlin, "2026-03-29"},
	} {
		if got := windowDate(tc.key, now, tc.loc); got != tc.want {
			t.Errorf("%s in %s: %s, want %s", tc.key, tc.loc, got, tc.want)
		}
	}
}

// A worker's command's exit status is the attempt's outcome: 0 completes
// with stdout, 75 and a signal fail retryably, any other status for good;
// a result over 64 KiB fails for good.
func TestJobOutcome(t *testing.T) {
	result := func(s string) *capped {
		c := &capped{max: maxJobResult + 1}
		_, _ = c.Write([]byte(s))
		return c
	}
	j := &queue.Job{ID: 1}
	if err := jobOutcome(j, 0, result("ok\n"), ""); err != nil {
		t.Fatalf("exit 0: %v", err)
	}
	for _, tc := range []struct {
		code      int
		out       *capped
		permanent bool
		want      string
	}{
		{75, result(""), false, "exit 75 (EX_TEMPFAIL, retryable): try later"},
		{137, result(""), false, "killed by signal 9 (killed), retryable: try later"},
		{1, result(""), true, "exit 1: try later"},
		{0, result(strings.Repeat("x", maxJobResult+1)), true, "the result (stdout) is 65537 bytes; the limit is 65536"},
		{0, result(strings.Repeat("\"", maxJobResult/2+1)), true, "the result (stdout as a JSON string) is 65540 bytes; the limit is 65536"},
	} {
		err := jobOutcome(j, tc.code, tc.out, "try later")
		if err == nil || err.Error() != tc.want || queue.IsPermanent(err) != tc.permanent {
			t.Errorf("exit %d: %v (permanent %v), want %q (permanent %v)", tc.code, err, queue.IsPermanent(err), tc.want, tc.permanent)
		}
	}
	if errors.Is(jobOutcome(j, 0, result("x"), ""), queue.ErrClaimLost) {
		t.Fatal("unreachable")
	}
}
