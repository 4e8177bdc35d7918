package queue

import (
	"os/exec"
	"strings"
	"testing"
)

// The SDK pulls in no server, FSM or Raft: a service that embeds it gets
// the API and the client only.
func TestNoServerDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/coordd/coordd/server", "github.com/coordd/coordd/node", "github.com/coordd/coordd/api",
			"github.com/coordd/coordd/fsm", "github.com/hashicorp/raft"} {
			if pkg == bad || strings.HasPrefix(pkg, bad+"/") {
				t.Errorf("client/queue depends on %s", pkg)
			}
		}
	}
}
