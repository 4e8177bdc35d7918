//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/testutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// These tests run lease run, elect and worker against an in-process cluster
// with real processes for what they run: each command under its guard (this
// test binary, as coordctl is: TestMain), and, where coordctl itself must be
// frozen, coordctl as a process of its own.

// testMainEnv makes this test binary coordctl (TestMain).
const testMainEnv = "COORDCTL_TEST_MAIN"

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(guardEnv) != "":
		os.Exit(guardMain(os.Args[1:], os.Stderr))
	case os.Getenv(testMainEnv) == "1":
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// processEnv makes this binary usable as coordctl by the commands the tests
// run ("$COORDCTL" fence commit …) and by ctlProcess.
func processEnv(t *testing.T) string {
	t.Helper()
	noTLSEnv(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(testMainEnv, "1")
	t.Setenv("COORDCTL", self)
	return self
}

// ctlProcess starts coordctl as a process of its own.
func ctlProcess(t *testing.T, endpoints []string, args ...string) (*exec.Cmd, *syncBuf, *syncBuf) {
	t.Helper()
	self := processEnv(t)
	cmd := exec.Command(self, append([]string{"--endpoints", strings.Join(endpoints, ",")}, args...)...)
	out, errOut := newSyncBuf(), newSyncBuf()
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out, errOut
}

// stamps reads the "<word> <unix ns>" lines of a command's log.
func stamps(t *testing.T, path, word string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []int64
	for _, line := range strings.Split(string(b), "\n") {
		w, ns, ok := strings.Cut(line, " ")
		if n, err := strconv.ParseInt(ns, 10, 64); ok && w == word && err == nil {
			out = append(out, n)
		}
	}
	return out
}

// A lease run whose coordctl is frozen (SIGSTOP) past the TTL: its guard
// kills the command before the server grants the lease to a second holder
// (the timestamps the two commands write do not overlap), and a write with
// the frozen holder's token is refused once the second has written.
func TestLeaseRunFrozenHolderStoppedBeforeRegrant(t *testing.T) {
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	// The holder's command: its token, a fenced write, then "alive" every 10 ms.
	holder := `echo "$COORDD_FENCING_TOKEN" > "$1.token"
"$COORDCTL" fence commit ledger/frozen --token "$COORDD_FENCING_TOKEN" --key "$1" >/dev/null || exit 9
while :; do echo alive $(date +%s%N) >> "$1.log"; sleep 0.01; done`
	ctlA, _, errA := ctlProcess(t, eps, "lease", "run", "frozen", "--ttl", "2s", "--kill-grace", "300ms", "--", "sh", "-c", holder, "sh", a)
	testutil.Poll(t, "the first holder's command runs", 20*time.Second, 10*time.Millisecond, func() bool {
		return len(stamps(t, a+".log", "alive")) > 0
	})
	if err := ctlA.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()

	// The second holder waits for the lease: the server grants it when the
	// first one's TTL has run out.
	second := `echo start $(date +%s%N) >> "$1.log"
"$COORDCTL" fence commit ledger/frozen --token "$COORDD_FENCING_TOKEN" --key "$1" >/dev/null || exit 9`
	r := ctl(t, eps, "lease", "run", "frozen", "--ttl", "2s", "--wait", "--", "sh", "-c", second, "sh", b)
	if r.code != 0 {
		t.Fatalf("second holder: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	started := stamps(t, b+".log", "start")
	alive := stamps(t, a+".log", "alive")
	if len(started) != 1 || len(alive) == 0 {
		t.Fatalf("second holder's starts %v, first holder's alive stamps %d", started, len(alive))
	}
	last := alive[len(alive)-1]
	t.Logf("frozen at %s; first command's last stamp %s after, second command started %s after",
		frozen.Format(time.StampMilli), time.Duration(last-frozen.UnixNano()), time.Duration(started[0]-frozen.UnixNano()))
	if last >= started[0] {
		t.Fatalf("the frozen holder's command ran until %d, after the second holder's started at %d", last, started[0])
	}
	// The first command is gone: no stamp since.
	if n := len(stamps(t, a+".log", "alive")); n != len(alive) {
		t.Fatalf("the frozen holder's command still runs (%d stamps, then %d)", len(alive), n)
	}

	tok, err := os.ReadFile(a + ".token")
	if err != nil || strings.TrimSpace(string(tok)) != "frozen:1" {
		t.Fatalf("first holder's token %q (%v)", tok, err)
	}
	r = ctl(t, eps, "fence", "commit", "ledger/frozen", "--token", "frozen:1", "--key", "late")
	if r.code != exitError || !strings.Contains(r.errOut, "STALE_TOKEN") {
		t.Fatalf("a write with the frozen holder's token: exit %d\n%s%s", r.code, r.out, r.errOut)
	}

	// Thawed, the first coordctl finds its lease lost: exit 5.
	if err := ctlA.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err = ctlA.Wait()
	if code := ctlA.ProcessState.ExitCode(); code != exitLost ||
		!strings.Contains(errA.String(), "lease frozen generation 1 lost while sh ran; it was stopped") ||
		!strings.Contains(errA.String(), "coordctl: the local deadline of lease frozen generation 1 is 300ms away") {
		t.Fatalf("thawed holder: exit %d (%v)\n%s", code, err, errA.String())
	}
}

// Two hosts run the same window at once: one runs the command and
// completes the window with its last line; the other waits, finds it
// completed and exits 0 without running. A failed run leaves the window
// open: the next one runs.
func TestLeaseRunWindowOnceOnTwoHosts(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	runs := filepath.Join(t.TempDir(), "runs")
	script := `echo "run $COORDD_WINDOW $COORDD_WINDOW_ATTEMPT" >> "$1"; sleep 0.3; echo working; echo "closed $COORDD_WINDOW"`
	ctx := context.Background()
	args := []string{"lease", "run", "daily-close", "--ttl", "3s", "--window", "2026-09-25", "--", "sh", "-c", script, "sh", runs}
	_, err1, done1 := ctlAsync(ctx, eps, args...)
	_, err2, done2 := ctlAsync(ctx, eps, args...)
	code1, code2 := waitExit(t, done1, 20*time.Second), waitExit(t, done2, 20*time.Second)
	stderr := err1.String() + err2.String()
	if code1 != 0 || code2 != 0 || strings.Count(stderr, "completed window daily-close/2026-09-25 (attempt 1)") != 1 ||
		strings.Count(stderr, "window daily-close/2026-09-25 already completed by ") != 1 ||
		!strings.Contains(stderr, "not running sh") {
		t.Fatalf("exits %d and %d\n%s", code1, code2, stderr)
	}
	b, _ := os.ReadFile(runs)
	if string(b) != "run 2026-09-25 1\n" {
		t.Fatalf("runs: %q", b)
	}
	w, err := c.Coord(c.WaitLeader()).GetWindow(ctx, &coordv1.GetWindowRequest{Job: "daily-close", Window: "2026-09-25"})
	if err != nil || w.GetWindow().GetState() != coordv1.WindowState_WINDOW_STATE_COMPLETED ||
		string(w.GetWindow().GetResult()) != `"closed 2026-09-25"` {
		t.Fatalf("window after the run: %v %v", w, err)
	}

	// A failure leaves the window open (exit status passed on); the next
	// run is attempt 2.
	fail := ctl(t, eps, "lease", "run", "daily-close", "--window", "2026-09-26", "--", "sh", "-c", "exit 3")
	if fail.code != 3 || !strings.Contains(fail.errOut, "sh exited 3: window daily-close/2026-09-26 left open for the next holder") {
		t.Fatalf("failed run: exit %d\n%s", fail.code, fail.errOut)
	}
	again := ctl(t, eps, "lease", "run", "daily-close", "--window", "2026-09-26", "--", "sh", "-c", script, "sh", runs)
	if again.code != 0 || !strings.Contains(again.errOut, "completed window daily-close/2026-09-26 (attempt 2)") {
		t.Fatalf("second run: exit %d\n%s", again.code, again.errOut)
	}

	// --window yesterday --tz: the date in that zone at the cluster's calendar time.
	before := time.Now().In(time.UTC).AddDate(0, 0, -1).Format(time.DateOnly)
	y := ctl(t, eps, "lease", "run", "daily-close", "--window", "yesterday", "--tz", "UTC", "--", "sh", "-c", `echo "$COORDD_WINDOW"`)
	after := time.Now().In(time.UTC).AddDate(0, 0, -1).Format(time.DateOnly)
	if got := strings.TrimSpace(y.out); y.code != 0 || (got != before && got != after) {
		t.Fatalf("--window yesterday --tz UTC: exit %d, window %q, want %s\n%s", y.code, got, before, y.errOut)
	}
}

// Without --wait a held lease exits 3 at once, printing nothing; the
// command's environment names the lease and its token; the command's exit
// status is passed on and the lease released.
func TestLeaseRunHeldAndEnvironment(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	ctlOK(t, eps, "lease", "acquire", "busy", "--owner", "other", "--ttl", "30s")
	r := ctl(t, eps, "lease", "run", "busy", "--", "sh", "-c", "echo ran")
	if r.code != exitHeld || r.out != "" || r.errOut != "" {
		t.Fatalf("held: exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
	r = ctl(t, eps, "lease", "run", "env", "--owner", "me", "--", "sh", "-c",
		`echo "$COORDD_LEASE $COORDD_GENERATION $COORDD_FENCING_TOKEN $COORDD_OWNER"; [ -n "$COORD_ENDPOINTS" ] && exit 7`)
	if r.code != 7 || r.out != "env 1 env:1 me\n" {
		t.Fatalf("environment: exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
	out := ctlOK(t, eps, "-o", "json", "lease", "get", "env")
	if !strings.Contains(out, `"released": true`) {
		t.Fatalf("the lease after the run:\n%s", out)
	}
	// What the command left running in its group is killed when it exits.
	pidFile := filepath.Join(t.TempDir(), "pid")
	r = ctl(t, eps, "lease", "run", "env", "--", "sh", "-c", `sleep 60 & echo $! > "$1"`, "sh", pidFile)
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if r.code != 0 || err != nil {
		t.Fatalf("background: exit %d, pid %q\n%s", r.code, b, r.errOut)
	}
	testutil.Poll(t, "the background process gone", 5*time.Second, 10*time.Millisecond, func() bool {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return len(st) == 0 || strings.Contains(string(st), ") Z ") // gone, or a zombie of a reaper
	})

	// Interrupted while waiting: exit 1, nothing run, nothing left held.
	ctx, cancel := context.WithCancel(context.Background())
	_, errOut, done := ctlAsync(ctx, eps, "lease", "run", "busy", "--wait", "--", "sh", "-c", "echo ran")
	cancel()
	if code := waitExit(t, done, 10*time.Second); code != exitError ||
		!strings.Contains(errOut.String(), "error: lease run busy: interrupted before the lease was granted") {
		t.Fatalf("interrupted wait: exit %d\n%s", code, errOut.String())
	}

	r = ctl(t, eps, "lease", "run", "env", "--", "/nonexistent/command")
	if r.code != exitCannotRun || !strings.Contains(r.errOut, "cannot run /nonexistent/command") {
		t.Fatalf("a command that cannot start: exit %d\n%s", r.code, r.errOut)
	}
}

// waitJob waits until job id is in state and returns it.
func waitJob(t *testing.T, c *testcluster.Cluster, id uint64, state coordv1.JobState) *coordv1.QueueJob {
	t.Helper()
	var j *coordv1.QueueJob
	testutil.Poll(t, fmt.Sprintf("job %d %s", id, state), 20*time.Second, 10*time.Millisecond, func() bool {
		r, err := coordv1.NewQueueClient(c.Conn(c.WaitLeader())).Get(context.Background(), &coordv1.QueueGetRequest{Id: id})
		j = r.GetJob()
		return err == nil && j.GetState() == state
	})
	return j
}

// A worker's command killed with kill -9 fails its attempt retryably; the
// second attempt runs and completes the job; the effect, a FencedCommit
// keyed per job with COORDD_FENCING_TOKEN, is counted once.
func TestWorkerRetriesKilledCommandEffectOnce(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	dir := t.TempDir()
	ctlOK(t, eps, "job", "submit", "charge", "--queue", "billing", "--args", `{"amount":12}`, "--visibility-timeout", "3s")
	// The effect first, then the rest of the work; attempt 1 hangs there
	// until it is killed.
	script := `args=$(cat)
echo $$ > "$1/pid.$COORDD_ATTEMPT"
"$COORDCTL" -o json fence commit "charges/$COORDD_JOB_ID" --token "$COORDD_FENCING_TOKEN" --key charge --payload "$args" > "$1/commit.$COORDD_ATTEMPT" || exit 9
[ "$COORDD_ATTEMPT" = 1 ] && sleep 60
echo "{\"charged\": $COORDD_ATTEMPT}"`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errOut, done := ctlAsync(ctx, eps, "worker", "--queue", "billing", "--", "sh", "-c", script, "sh", dir)
	var pid int
	testutil.Poll(t, "attempt 1's effect", 20*time.Second, 10*time.Millisecond, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "commit.1"))
		p, _ := os.ReadFile(filepath.Join(dir, "pid.1"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(p)))
		return len(b) > 0 && pid > 0
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, c, 1, coordv1.JobState_JOB_STATE_SUCCEEDED)
	log := j.GetAttemptLog()
	if len(log) != 2 || log[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED ||
		!strings.HasPrefix(log[0].GetError(), "killed by signal 9 (killed), retryable") || string(log[1].GetResult()) != `{"charged": 2}` {
		t.Fatalf("job after the kill: %v\n%s", j, errOut.String())
	}
	commit2, _ := os.ReadFile(filepath.Join(dir, "commit.2"))
	if !strings.Contains(string(commit2), `"duplicate": true`) {
		t.Fatalf("attempt 2's commit is not attempt 1's duplicate:\n%s", commit2)
	}
	cancel()
	if code := waitExit(t, done, 20*time.Second); code != 0 {
		t.Fatalf("worker: exit %d\n%s", code, errOut.String())
	}
}

// longJob starts a cluster with a job of kind long in queue q (visibility
// timeout vt) and returns the script of a command that writes a "start"
// stamp, and a "term" one when it gets SIGTERM, to $1/log.$<by>, runs
// extra, then runs until it is stopped.
func longJob(t *testing.T, vt, by, extra string) (c *testcluster.Cluster, dir, script string) {
	c = testcluster.New(t, 1)
	ctlOK(t, c.Endpoints(), "job", "submit", "long", "--queue", "q", "--visibility-timeout", vt)
	log := `"$1/log.$` + by + `"`
	script = "trap 'echo term $(date +%s%N) >> " + log + "; exit 143' TERM\necho start $(date +%s%N) >> " + log + "\n" +
		extra + "\nwhile :; do sleep 0.01; done"
	return c, t.TempDir(), script
}

// Cancelling a running job stops its command within a second or two; a
// SIGTERM (here: the context) stops the worker, which waits for a running
// command and hands it back after --shutdown-grace.
func TestWorkerCancelStopsCommand(t *testing.T) {
	processEnv(t)
	c, dir, script := longJob(t, "30s", "COORDD_JOB_ID", "")
	eps := c.Endpoints()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errOut, done := ctlAsync(ctx, eps, "worker", "--queue", "q", "--shutdown-grace", "500ms", "--", "sh", "-c", script, "sh", dir)
	testutil.Poll(t, "job 1 runs", 20*time.Second, 10*time.Millisecond, func() bool {
		return len(stamps(t, filepath.Join(dir, "log.1"), "start")) == 1
	})
	cancelled := time.Now()
	ctlOK(t, eps, "job", "cancel", "1")
	errOut.waitFor(t, "the command stopped", 5*time.Second, func(s string) bool { return strings.Contains(s, "job 1 attempt 1 stopped after") })
	term := stamps(t, filepath.Join(dir, "log.1"), "term")
	if len(term) != 1 {
		t.Fatalf("no SIGTERM reached the command:\n%s", errOut.String())
	}
	took := time.Duration(term[0] - cancelled.UnixNano())
	t.Logf("cancel to SIGTERM in the command: %s", took)
	if took > 2*time.Second {
		t.Fatalf("the cancelled job's command ran on for %s", took)
	}

	// Shutdown: a second job runs; the worker waits for it (and says so),
	// then hands it back.
	ctlOK(t, eps, "job", "submit", "long", "--queue", "q", "--visibility-timeout", "30s", "--max-attempts", "1")
	testutil.Poll(t, "job 2 runs", 20*time.Second, 10*time.Millisecond, func() bool {
		return len(stamps(t, filepath.Join(dir, "log.2"), "start")) == 1
	})
	cancel()
	if code := waitExit(t, done, 20*time.Second); code != 0 ||
		!strings.Contains(errOut.String(), "waiting up to 500ms for 1 running command(s), then handing their jobs back") ||
		!strings.Contains(errOut.String(), "1 running attempts handed back") {
		t.Fatalf("worker stop: exit %d\n%s", code, errOut.String())
	}
	if len(stamps(t, filepath.Join(dir, "log.2"), "term")) != 1 {
		t.Fatalf("the handed-back command got no SIGTERM")
	}
	j := waitJob(t, c, 2, coordv1.JobState_JOB_STATE_DEAD)
	if log := j.GetAttemptLog(); len(log) != 1 || log[0].GetError() != "worker shutdown" {
		t.Fatalf("job 2 after the stop: %v", j)
	}
	if j := waitJob(t, c, 1, coordv1.JobState_JOB_STATE_CANCELLED); len(j.GetAttemptLog()) != 1 {
		t.Fatalf("job 1 after the cancel: %v", j)
	}
}

// An attempt's max_run stops its command (SIGTERM) before start +
// max_run (its local deadline, less --kill-grace) though the worker
// heartbeats; the command's exit is the attempt's outcome (failed,
// before run_until), so the job with one attempt is dead.
func TestWorkerMaxRunStopsCommand(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	dir := t.TempDir()
	ctlOK(t, eps, "job", "submit", "long", "--queue", "q", "--visibility-timeout", "30s", "--max-run", "1500ms", "--max-attempts", "1")
	log := `"$1/log.$COORDD_JOB_ID"`
	script := "trap 'echo term $(date +%s%N) >> " + log + "; exit 143' TERM\necho start $(date +%s%N) >> " + log + "\nwhile :; do sleep 0.01; done"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errOut, done := ctlAsync(ctx, eps, "worker", "--queue", "q", "--shutdown-grace", "500ms", "--kill-grace", "300ms", "--", "sh", "-c", script, "sh", dir)
	errOut.waitFor(t, "the command stopped", 20*time.Second, func(s string) bool { return strings.Contains(s, "job 1 attempt 1: exit 143") })
	start, term := stamps(t, filepath.Join(dir, "log.1"), "start"), stamps(t, filepath.Join(dir, "log.1"), "term")
	if len(start) != 1 || len(term) != 1 {
		t.Fatalf("no SIGTERM reached the command:\n%s", errOut.String())
	}
	took := time.Duration(term[0] - start[0])
	t.Logf("command start to SIGTERM: %s (max_run 1.5s, kill grace 300ms)", took)
	if took > 1500*time.Millisecond || took < 500*time.Millisecond {
		t.Fatalf("SIGTERM %s after the command's start; want before max_run (1.5s), not at once", took)
	}
	j := waitJob(t, c, 1, coordv1.JobState_JOB_STATE_DEAD)
	if log := j.GetAttemptLog(); len(log) != 1 || log[0].GetRunUntilMs() == 0 || log[0].GetFinishedAtMs() > log[0].GetRunUntilMs() ||
		!strings.Contains(log[0].GetError(), "signal 15") {
		t.Fatalf("job 1 after max_run: %v", j)
	}
	cancel()
	waitExit(t, done, 20*time.Second)
}

// Two candidates: the first elected runs its command and resigns when it
// exits (the second is elected as it resigns); --observe prints each
// change; the candidates' commands never overlap.
func TestElectRunsCommandsInTurn(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	log := filepath.Join(t.TempDir(), "log")
	octx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	observed, _, observing := ctlAsync(octx, eps, "elect", "sched", "--observe")
	observed.waitFor(t, "the initial state", 10*time.Second, func(s string) bool { return strings.Contains(s, "sched: no leader") })
	script := `echo start $(date +%s%N) >> "$1"; echo "$COORDD_LEADER_VALUE $COORDD_GENERATION" >> "$1"; sleep 0.3; echo end $(date +%s%N) >> "$1"`
	ctx := context.Background()
	_, err1, done1 := ctlAsync(ctx, eps, "elect", "sched", "--ttl", "3s", "--value", "one", "--", "sh", "-c", script, "sh", log)
	observed.waitFor(t, "the first leader", 10*time.Second, func(s string) bool { return strings.Contains(s, `value "one"`) })
	_, err2, done2 := ctlAsync(ctx, eps, "elect", "sched", "--ttl", "3s", "--value", "two", "--", "sh", "-c", script, "sh", log)
	if c1, c2 := waitExit(t, done1, 20*time.Second), waitExit(t, done2, 20*time.Second); c1 != 0 || c2 != 0 {
		t.Fatalf("exits %d %d\n%s%s", c1, c2, err1.String(), err2.String())
	}
	observed.waitFor(t, "the second leader and its resignation", 10*time.Second, func(s string) bool {
		return strings.Contains(s, `generation 2 value "two"`) && strings.Count(s, "sched: no leader") == 3
	})
	b, _ := os.ReadFile(log)
	starts, ends := stamps(t, log, "start"), stamps(t, log, "end")
	if !strings.Contains(string(b), "one 1\n") || !strings.Contains(string(b), "two 2\n") || len(starts) != 2 || len(ends) != 2 ||
		ends[0] > starts[1] {
		t.Fatalf("log:\n%s", b)
	}
	stopObserving()
	if code := waitExit(t, observing, 10*time.Second); code != 0 {
		t.Fatalf("observe: exit %d", code)
	}
	// -o json: one object per line, the state now.
	jctx, stopJSON := context.WithCancel(context.Background())
	defer stopJSON()
	js, _, jdone := ctlAsync(jctx, eps, "-o", "json", "elect", "sched", "--observe")
	js.waitFor(t, "the state as JSON", 10*time.Second, func(s string) bool { return strings.HasSuffix(s, "}\n") })
	stopJSON()
	waitExit(t, jdone, 10*time.Second)
	if want := `"name":"sched","held":false,"owner":"`; !strings.HasPrefix(js.String(), "{"+want) ||
		!strings.Contains(js.String(), `"generation":"2","value":"two","index":"`) {
		t.Fatalf("observe -o json:\n%s", js.String())
	}
}

// A worker killed with kill -9: its guard reads EOF and stops the command
// at once; the attempt lapses after its visibility timeout and another
// worker runs the job.
func TestWorkerKilledStopsItsCommand(t *testing.T) {
	c, dir, script := longJob(t, "2s", "COORDD_ATTEMPT", `[ "$COORDD_ATTEMPT" = 2 ] && exit 0`)
	eps := c.Endpoints()
	first, _, _ := ctlProcess(t, eps, "worker", "--queue", "q", "--", "sh", "-c", script, "sh", dir)
	testutil.Poll(t, "attempt 1 runs", 20*time.Second, 10*time.Millisecond, func() bool {
		return len(stamps(t, filepath.Join(dir, "log.1"), "start")) == 1
	})
	killed := time.Now()
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	testutil.Poll(t, "attempt 1's command stopped", 5*time.Second, 10*time.Millisecond, func() bool {
		return len(stamps(t, filepath.Join(dir, "log.1"), "term")) == 1
	})
	t.Logf("kill -9 of the worker to SIGTERM in its command: %s", time.Duration(stamps(t, filepath.Join(dir, "log.1"), "term")[0]-killed.UnixNano()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errOut, done := ctlAsync(ctx, eps, "worker", "--queue", "q", "--", "sh", "-c", script, "sh", dir)
	j := waitJob(t, c, 1, coordv1.JobState_JOB_STATE_SUCCEEDED)
	if log := j.GetAttemptLog(); len(log) != 2 || log[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED {
		t.Fatalf("job after the worker's kill: %v\n%s", j, errOut.String())
	}
	cancel()
	waitExit(t, done, 20*time.Second)
}

// A job a schedule made tells its command the schedule, the window and the
// occurrence; args come on stdin, the kind and queue in the environment.
func TestWorkerScheduledJobEnvironment(t *testing.T) {
	processEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	ctlOK(t, eps, "schedule", "create", "nightly", "--schedule", "0 3 * * *", "--kind", "report", "--queue", "reports",
		"--args", `{"to":"ops"}`)
	ctlOK(t, eps, "schedule", "trigger", "nightly")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, errOut, done := ctlAsync(ctx, eps, "worker", "--queue", "reports", "--kind", "report", "--", "sh", "-c",
		`echo "$(cat) $COORDD_KIND $COORDD_QUEUE $COORDD_ATTEMPT $COORDD_SCHEDULE $COORDD_WINDOW $COORDD_OCCURRENCE"`)
	j := waitJob(t, c, 1, coordv1.JobState_JOB_STATE_SUCCEEDED)
	res := strings.Fields(strings.Trim(string(j.GetAttemptLog()[0].GetResult()), `"`))
	occ, err := time.Parse(time.RFC3339Nano, res[len(res)-1])
	if len(res) != 7 || res[0] != `{\"to\":\"ops\"}` || strings.Join(res[1:5], " ") != "report reports 1 nightly" ||
		!strings.Contains(res[5], "/manual-") || err != nil || time.Since(occ) > time.Minute || j.GetLabels()["coordd.window"] != res[5] {
		t.Fatalf("the command saw %q (%v); job labels %v\n%s", res, err, j.GetLabels(), errOut.String())
	}
	cancel()
	waitExit(t, done, 20*time.Second)
}
