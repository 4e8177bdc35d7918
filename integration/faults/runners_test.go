//go:build faults

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// coordctlCmd is a coordctl process on the cluster (its output in out);
// $COORDCTL in the commands it runs is coordctl too.
func (r *run) coordctlCmd(name string, out *bytes.Buffer, args ...string) *exec.Cmd {
	r.t.Helper()
	cmd := exec.Command(coordctlBin, append([]string{"--endpoints", strings.Join(r.c.Endpoints(), ",")}, args...)...)
	cmd.Env = append(os.Environ(), "COORDCTL="+coordctlBin)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.clients[name] = cmd
	return cmd
}

// exitOf waits for a coordctl process and returns its exit status.
func (r *run) exitOf(name string, cmd *exec.Cmd, out *bytes.Buffer) int {
	r.t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("%s still runs after 30 s:\n%s", name, out.String())
	}
	delete(r.clients, name)
	return cmd.ProcessState.ExitCode()
}

// nanos reads the unix-ns stamps of the lines "<word> <ns>" a command wrote.
func nanos(path, word string) []int64 {
	b, _ := os.ReadFile(path)
	var out []int64
	for _, f := range strings.Split(string(b), "\n") {
		var w string
		var ns int64
		if n, _ := fmt.Sscan(f, &w, &ns); n == 2 && w == word {
			out = append(out, ns)
		}
	}
	return out
}

// TestLeaseRunThroughFailoverAndFreeze (19, issue 27): coordctl lease run
// with real coordd and coordctl processes. (a) Two hosts run the same
// window at once while the leader is killed with kill -9 (and restarted):
// the holder's lease survives the failover (the keepalive follows the new
// leader), its command runs once to its end and completes the window; the
// other host waits and exits 0, "already completed", without running it.
// (b) A holder's coordctl frozen with SIGSTOP past its TTL: its guard kills
// the command before the server grants the lease to a waiting second
// holder (the commands' stamps do not overlap); a write with the frozen
// holder's token is then refused (STALE_TOKEN); thawed, it exits 5.
func TestLeaseRunThroughFailoverAndFreeze(t *testing.T) {
	r := newRun(t)
	ctx := context.Background()
	sdk := r.sdk(ctx, "checker")

	// (a) One run of the window across a leader kill.
	long := `echo start $(date +%s%N) >> "$1"
"$COORDCTL" fence commit ledger/close --token "$COORDD_FENCING_TOKEN" --key "$COORDD_WINDOW" >/dev/null || exit 9
end=$(( $(date +%s) + 4 )); while [ $(date +%s) -lt $end ]; do echo alive $(date +%s%N) >> "$1"; sleep 0.02; done
echo "closed by $COORDD_OWNER"`
	runs := filepath.Join(r.dir, "close.log")
	var outA, outB bytes.Buffer
	args := []string{"lease", "run", "close", "--ttl", "3s", "--window", "2026-09-25", "--", "sh", "-c", long, "sh", runs}
	a := r.coordctlCmd("host-a", &outA, args...)
	b := r.coordctlCmd("host-b", &outB, args...)
	r.await("a host runs the close", 20*time.Second, func() bool { return len(nanos(runs, "alive")) > 0 })
	old, took := r.failover("probe")
	t.Logf("killed leader %s while the close ran; served again after %s", old.ID, took)
	codeA, codeB := r.exitOf("host-a", a, &outA), r.exitOf("host-b", b, &outB)
	both := outA.String() + outB.String()
	if codeA != 0 || codeB != 0 || strings.Count(both, "completed window close/2026-09-25 (attempt 1)") != 1 ||
		strings.Count(both, "window close/2026-09-25 already completed by ") != 1 || len(nanos(runs, "start")) != 1 {
		t.Fatalf("hosts exited %d and %d, %d runs:\n--- a\n%s--- b\n%s", codeA, codeB, len(nanos(runs, "start")), outA.String(), outB.String())
	}
	w, err := sdk.GetWindow(ctx, "close", "2026-09-25")
	if err != nil || w.GetState() != coordv1.WindowState_WINDOW_STATE_COMPLETED || !strings.HasPrefix(string(w.GetResult()), `"closed by `) {
		t.Fatalf("window: %v %v", w, err)
	}

	// (b) A frozen holder is stopped before the next one starts.
	holder := `echo "$COORDD_FENCING_TOKEN" > "$1.token"
while :; do echo alive $(date +%s%N) >> "$1"; sleep 0.01; done`
	second := `echo start $(date +%s%N) >> "$1"
"$COORDCTL" fence commit ledger/frozen --token "$COORDD_FENCING_TOKEN" --key second >/dev/null || exit 9`
	fa, fb := filepath.Join(r.dir, "frozen-a.log"), filepath.Join(r.dir, "frozen-b.log")
	var outF, outS bytes.Buffer
	frozen := r.coordctlCmd("frozen", &outF, "lease", "run", "frozen", "--ttl", "2s", "--kill-grace", "300ms", "--", "sh", "-c", holder, "sh", fa)
	r.await("the first holder's command runs", 20*time.Second, func() bool { return len(nanos(fa, "alive")) > 0 })
	if err := frozen.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	s := r.coordctlCmd("second", &outS, "lease", "run", "frozen", "--ttl", "2s", "--wait", "--", "sh", "-c", second, "sh", fb)
	if code := r.exitOf("second", s, &outS); code != 0 {
		t.Fatalf("second holder: exit %d\n%s", code, outS.String())
	}
	alive, started := nanos(fa, "alive"), nanos(fb, "start")
	if len(alive) == 0 || len(started) != 1 || alive[len(alive)-1] >= started[0] {
		t.Fatalf("the frozen holder's command ran until %v, the second started at %v", alive[len(alive)-1:], started)
	}
	t.Logf("frozen; its command's last stamp %s after, the second holder's command started %s after",
		time.Duration(alive[len(alive)-1]-stoppedAt.UnixNano()), time.Duration(started[0]-stoppedAt.UnixNano()))
	tok, _ := os.ReadFile(fa + ".token")
	if _, err := sdk.FencedCommit(ctx, "ledger/frozen", strings.TrimSpace(string(tok)), "late", nil); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("a write with the frozen holder's token %q: %v", tok, err)
	}
	if err := frozen.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := r.exitOf("frozen", frozen, &outF); code != 5 || !strings.Contains(outF.String(), "lost while sh ran; it was stopped") {
		t.Fatalf("thawed holder: exit %d\n%s", code, outF.String())
	}
	r.c.WaitConverged()
}
