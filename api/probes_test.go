package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/probe"
)

// probeNode answers fixed checks.
type probeNode struct {
	*fakeNode
	live, ready []probe.Check
}

func (p probeNode) Liveness() []probe.Check  { return p.live }
func (p probeNode) Readiness() []probe.Check { return p.ready }

// /livez and /readyz answer the node's checks; /readyz adds the API's own
// (not shutting down), so a closing node leaves its load balancer first.
func TestProbeHandlers(t *testing.T) {
	n := probeNode{fakeNode: newFakeNode(), live: []probe.Check{probe.Pass("proposer_loop")},
		ready: []probe.Check{probe.Pass("leader")}}
	s := newTestServer(t, n.fakeNode)
	s.node = n
	get := func(h http.HandlerFunc, target string) (int, string) {
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest(http.MethodGet, target, nil))
		return w.Code, w.Body.String()
	}
	if code, body := get(s.serveLivez, "/livez?verbose"); code != 200 || body != "[+]proposer_loop ok\nlivez check passed\n" {
		t.Fatalf("/livez: %d %q", code, body)
	}
	if code, body := get(s.serveReadyz, "/readyz?verbose"); code != 200 || !strings.Contains(body, "[+]api ok") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	close(s.stop) // as Close does first
	code, body := get(s.serveReadyz, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[-]api failed: the API is shutting down") {
		t.Fatalf("/readyz while closing: %d %q", code, body)
	}
	if code, _ := get(s.serveLivez, "/livez"); code != 200 {
		t.Fatalf("/livez while closing: %d", code)
	}
}
