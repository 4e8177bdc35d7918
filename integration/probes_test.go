package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testutil"
)

// probeGet answers GET path on a node's HTTP address: the status code and
// the body (0 when the node did not answer).
func probeGet(t *testing.T, nd *proccluster.Node, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + nd.HTTPAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Real processes: with 2 of 3 nodes killed the survivor stays live
// (/livez 200, so a liveness probe restarts nothing) and turns unready
// (/readyz 503, naming the leader check); once the others are back it is
// ready again. /healthz keeps its old answer (503 without a leader).
func TestProcessProbesLiveWithoutQuorum(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	pc := proccluster.Start(t, coorddBin, 3)
	pc.WaitLeader()
	for _, nd := range pc.Nodes {
		testutil.Poll(t, nd.ID+" ready", 30*time.Second, 50*time.Millisecond, func() bool {
			code, _ := probeGet(t, nd, "/readyz")
			return code == http.StatusOK
		})
		if code, body := probeGet(t, nd, "/livez?verbose"); code != http.StatusOK || !strings.Contains(body, "[+]proposer_loop ok") {
			t.Fatalf("%s /livez: %d %q", nd.ID, code, body)
		}
	}
	survivor, gone := pc.Nodes[0], pc.Nodes[1:]
	for _, nd := range gone {
		pc.Kill(nd)
	}
	testutil.Poll(t, "the survivor unready", 30*time.Second, 50*time.Millisecond, func() bool {
		code, _ := probeGet(t, survivor, "/readyz")
		return code == http.StatusServiceUnavailable
	})
	code, body := probeGet(t, survivor, "/readyz?verbose")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]leader") || !strings.HasSuffix(body, "readyz check failed\n") {
		t.Fatalf("/readyz without quorum: %d %q", code, body)
	}
	t.Logf("/readyz without quorum:\n%s", body)
	// Live all along: several looks, past an election timeout or two.
	for i := 0; i < 10; i++ {
		if code, body := probeGet(t, survivor, "/livez"); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("/livez without quorum: %d %q", code, body)
		}
		time.Sleep(200 * time.Millisecond) // a probe's period, not a wait for an event
	}
	if code, _ := probeGet(t, survivor, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz without a leader: %d, want its old 503", code)
	}
	for _, nd := range gone {
		pc.Restart(nd)
	}
	for _, nd := range pc.Nodes {
		testutil.Poll(t, nd.ID+" ready again", 60*time.Second, 50*time.Millisecond, func() bool {
			code, _ := probeGet(t, nd, "/readyz")
			return code == http.StatusOK
		})
	}
}
