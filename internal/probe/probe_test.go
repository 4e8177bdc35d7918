package probe

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/clock"
)

func answer(t *testing.T, target, accept string, checks []Check) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	Write(w, r, "readyz", checks)
	return w.Code, w.Body.String()
}

// The answers follow Kubernetes' /readyz: "ok", or 503 with the failed
// checks; ?verbose lists every check, ?exclude skips one, JSON on request.
func TestWrite(t *testing.T) {
	good := []Check{Pass("raft"), Pass("leader")}
	bad := []Check{Pass("raft"), Fail("leader", "no leader known")}
	for _, c := range []struct {
		target string
		checks []Check
		code   int
		body   string
	}{
		{"/readyz", good, 200, "ok\n"},
		{"/readyz?verbose", good, 200, "[+]raft ok\n[+]leader ok\nreadyz check passed\n"},
		{"/readyz", bad, 503, "[-]leader failed: no leader known\nreadyz check failed\n"},
		{"/readyz?verbose=1", bad, 503, "[+]raft ok\n[-]leader failed: no leader known\nreadyz check failed\n"},
		{"/readyz?exclude=leader", bad, 200, "ok\n"},
		{"/readyz?exclude=leader&verbose", bad, 200, "[+]raft ok\nreadyz check passed\n"},
	} {
		code, body := answer(t, c.target, "", c.checks)
		if code != c.code || body != c.body {
			t.Errorf("%s: %d %q, want %d %q", c.target, code, body, c.code, c.body)
		}
	}
	for _, accept := range []string{"application/json", ""} {
		target := "/readyz"
		if accept == "" {
			target += "?format=json"
		}
		code, body := answer(t, target, accept, bad)
		var doc Document
		if err := json.Unmarshal([]byte(body), &doc); err != nil || code != 503 || doc.Status != "failed" ||
			len(doc.Checks) != 2 || doc.Checks[1].Reason != "no leader known" || !doc.Checks[0].OK {
			t.Errorf("json (%q): %d %s %v", accept, code, body, err)
		}
	}
}

// A loop that takes pings passes; one that stops taking them passes until
// the bound has passed on the tracker's clock, then fails until it turns
// again.
func TestTrackerLoopsInVirtualTime(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := NewTracker(clk, 30*time.Second, 20*time.Millisecond)
	turning, stuck := tr.Add("turning"), tr.Add("stuck")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-turning:
			case <-stop:
				return
			}
		}
	}()
	verdict := func() (bool, bool, string) {
		cs := tr.Loops()
		if len(cs) != 2 || cs[0].Name != "turning" || cs[1].Name != "stuck" {
			t.Fatalf("checks %+v", cs)
		}
		return cs[0].OK, cs[1].OK, cs[1].Reason
	}
	if a, b, _ := verdict(); !a || !b {
		t.Fatal("a new loop is counted as having turned now")
	}
	clk.Advance(30 * time.Second)
	if a, b, _ := verdict(); !a || !b {
		t.Fatal("failed at the bound, not after it")
	}
	clk.Advance(time.Second)
	a, b, reason := verdict()
	if !a || b || !strings.Contains(reason, "31s") {
		t.Fatalf("after the bound: turning %v, stuck %v (%q)", a, b, reason)
	}
	// It turns again: it passes at once.
	took := make(chan struct{})
	go func() { <-stuck; close(took) }()
	if _, b, _ := verdict(); !b {
		t.Fatal("a loop that took a ping still fails")
	}
	<-took
}

// The apply loop fails only when it stays below its target, unmoved, past
// the bound; moving or catching up resets the stall.
func TestTrackerProgress(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := NewTracker(clk, 10*time.Second, time.Millisecond)
	look := func(at, target uint64) bool { return tr.Progress("apply", at, target).OK }
	if !look(5, 5) {
		t.Fatal("caught up")
	}
	clk.Advance(time.Hour)
	if !look(5, 5) || !look(5, 9) {
		t.Fatal("an idle, caught-up loop is not stuck; a new lag starts its stall now")
	}
	clk.Advance(10 * time.Second)
	if !look(5, 9) {
		t.Fatal("failed at the bound")
	}
	clk.Advance(time.Second)
	if c := tr.Progress("apply", 5, 12); c.OK || !strings.Contains(c.Reason, "index 5 below 12") {
		t.Fatalf("stalled: %+v", c)
	}
	if !look(6, 12) {
		t.Fatal("it moved")
	}
	clk.Advance(11 * time.Second)
	if look(6, 12) {
		t.Fatal("stalled again")
	}
	if !look(6, 6) {
		t.Fatal("caught up")
	}
}
