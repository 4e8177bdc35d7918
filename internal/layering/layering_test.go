package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/coordd/coordd/"

// deps lists what the packages matching pattern import, directly or not
// (tests excluded: a test may build a whole cluster).
func deps(t *testing.T, pattern string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", mod+pattern).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pattern, err)
	}
	set := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		set[p] = true
	}
	return set
}

func TestLayers(t *testing.T) {
	for _, rule := range []struct {
		pattern string
		why     string
		never   []string
	}{
		{"fsm", "the state machine is deterministic and knows neither Raft nor the API",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "api"}},
		{"api", "the API reaches the node only through its own Node interface",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "internal/logstore"}},
		{"client/...", "the SDK imports no server package",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "api", mod + "fsm", mod + "internal/auth"}},
		{"cmd/coordctl", "the CLI is built on the SDK",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "api", mod + "fsm"}},
		{"node/leader", "the leader services' contract is shared by the node and the API, and knows neither",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "api"}},
		{"node/internal/watchhub", "the watch hub knows the FSM's events and the clock, not Raft, the node that feeds it or the API",
			[]string{"github.com/hashicorp/raft", mod + "node", mod + "node/leader", mod + "api", mod + "internal/logstore", mod + "client"}},
		{"internal/backoff", "backoff is a leaf the SDK and the node share",
			[]string{mod + "node", mod + "api", mod + "fsm", mod + "client"}},
		{"api/console", "the console is served by the API through its Backend and imports none of the API's internals",
			[]string{mod + "api", mod + "node", mod + "fsm", mod + "internal/auth", "github.com/hashicorp/raft"}},
		{"internal/auth", "auth is a leaf",
			[]string{mod + "node", mod + "api", mod + "fsm", mod + "client"}},
	} {
		got := deps(t, rule.pattern)
		for _, p := range rule.never {
			if got[p] {
				t.Errorf("%s imports %s: %s", rule.pattern, p, rule.why)
			}
		}
	}
}
