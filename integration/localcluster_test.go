package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testutil"
)

// localCluster runs scripts/local-cluster.sh on one directory and remembers
// every PID it saw, so that cleanup stops them all by PID whatever the
// script did.
type localCluster struct {
	t    *testing.T
	dir  string
	base int // BASE_PORT
	env  []string
	seen map[int]bool
}

func newLocalCluster(t *testing.T, env ...string) *localCluster {
	lc := &localCluster{t: t, dir: t.TempDir(), base: textPorts(t, 23), seen: map[int]bool{}}
	lc.env = append(cleanEnv(), fmt.Sprintf("BASE_PORT=%d", lc.base))
	lc.env = append(lc.env, env...)
	t.Cleanup(func() {
		lc.pids() // the last PID files
		for pid := range lc.seen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return lc
}

// cleanEnv is this process's environment without coordd's and coordctl's
// variables (a developer's COORD_ENDPOINTS must not leak into a test).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COORD_") || strings.HasPrefix(kv, "COORDD_") || strings.HasPrefix(kv, "BASE_PORT=") ||
			strings.HasPrefix(kv, "TLS=") || strings.HasPrefix(kv, "ACL_FILE=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// run runs the script and returns its stdout, stderr and exit status.
func (lc *localCluster) run(args ...string) (string, string, int) {
	lc.t.Helper()
	cmd := exec.Command("bash", append([]string{"../scripts/local-cluster.sh"}, args...)...)
	cmd.Env = lc.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	lc.t.Logf("local-cluster.sh %v: %s", args, time.Since(start).Round(time.Millisecond))
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		lc.t.Fatal(err)
	}
	lc.pids()
	return out.String(), errOut.String(), code
}

func (lc *localCluster) ok(args ...string) string {
	lc.t.Helper()
	out, errOut, code := lc.run(args...)
	if code != 0 {
		lc.t.Fatalf("local-cluster.sh %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

// pids reads DIR/nodeN.pid (0: no file).
func (lc *localCluster) pids() [4]int {
	var p [4]int
	for n := 1; n <= 3; n++ {
		b, err := os.ReadFile(filepath.Join(lc.dir, fmt.Sprintf("node%d.pid", n)))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			p[n] = pid
			lc.seen[pid] = true
		}
	}
	return p
}

func (lc *localCluster) log(n int) string {
	b, _ := os.ReadFile(filepath.Join(lc.dir, fmt.Sprintf("node%d.log", n)))
	return string(b)
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func awaitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scripts/local-cluster.sh on a half-running cluster: after kill -9 of one
// node, up starts only that node (appending to its log) and leaves the live
// ones, their PID files and their logs alone; status tells which nodes run;
// stop and restart act on one node by PID; a node that exits during start
// fails up with its name and its log; a coordd the script did not start on
// a node's data directory fails up and down; down stops every node.
func TestLocalClusterScript(t *testing.T) {
	t.Parallel()             // its own cluster, mostly waiting (see TestMain)
	lc := newLocalCluster(t) // no COORDD_BIN: up builds coordd from the tree, as for a user
	out := lc.ok("up", lc.dir)
	if !strings.Contains(out, "COORD_ENDPOINTS=127.0.0.1:") {
		t.Fatalf("up printed no endpoints:\n%s", out)
	}
	first := lc.pids()
	for n := 1; n <= 3; n++ {
		if !alive(first[n]) {
			t.Fatalf("node%d (pid %d) is not running after up:\n%s", n, first[n], out)
		}
	}

	// kill -9 node2, then up again.
	if err := syscall.Kill(first[2], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, first[2])
	log1, log2, log3 := lc.log(1), lc.log(2), lc.log(3)
	out, errOut, code := lc.run("status", lc.dir)
	if code != 3 || !regexp.MustCompile(`node2\s+stopped`).MatchString(out) ||
		!regexp.MustCompile(fmt.Sprintf(`node1\s+running\s+pid %d\b`, first[1])).MatchString(out) {
		t.Fatalf("status with node2 killed: exit %d, want 3 and node2 stopped\n%s%s", code, out, errOut)
	}
	out = lc.ok("up", lc.dir)
	for _, want := range []string{
		fmt.Sprintf("node1: running (pid %d), left alone", first[1]),
		fmt.Sprintf("node3: running (pid %d), left alone", first[3]),
		"node2: started (pid ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("up on a half-running cluster: output lacks %q:\n%s", want, out)
		}
	}
	second := lc.pids()
	if second[1] != first[1] || second[3] != first[3] || second[2] == first[2] || !alive(second[2]) {
		t.Fatalf("PIDs before %v, after up %v: live nodes' PIDs must stay, node2 must run again", first, second)
	}
	for n, before := range map[int]string{1: log1, 2: log2, 3: log3} {
		if now := lc.log(n); !strings.HasPrefix(now, before) {
			t.Errorf("node%d's log was rewritten by up (it must only grow)", n)
		}
	}
	if got := strings.Count(lc.log(2), "local-cluster.sh: starting node2"); got != 2 {
		t.Errorf("node2's log has %d start markers, want 2 (appended)", got)
	}
	if strings.Count(lc.log(1), "local-cluster.sh: starting node1") != 1 {
		t.Errorf("node1 was started again")
	}

	out = lc.ok("status", lc.dir)
	if n := len(regexp.MustCompile(`(?m)^node\d\s+running\s+pid \d+\s+grpc 127\.0\.0\.1:\d+\s+health: ok$`).FindAllString(out, -1)); n != 3 {
		t.Fatalf("status: %d healthy nodes, want 3:\n%s", n, out)
	}

	// stop and restart one node.
	out = lc.ok("stop", lc.dir, "2")
	if !strings.Contains(out, fmt.Sprintf("node2: stopped (pid %d)", second[2])) {
		t.Errorf("stop 2: %s", out)
	}
	awaitGone(t, second[2])
	if _, err := os.Stat(filepath.Join(lc.dir, "node2.pid")); !os.IsNotExist(err) {
		t.Errorf("node2.pid remains after stop: %v", err)
	}
	lc.ok("restart", lc.dir, "2")
	lc.ok("restart", lc.dir, "3")
	third := lc.pids()
	if third[1] != first[1] || third[2] == second[2] || third[3] == first[3] || !alive(third[2]) || !alive(third[3]) {
		t.Fatalf("PIDs %v after restart 2 and 3 (before %v)", third, second)
	}
	awaitGone(t, first[3])

	// A node that exits during start: its Raft port is taken.
	lc.ok("stop", lc.dir, "3")
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lc.base+22))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code = lc.run("up", lc.dir)
	l.Close()
	if code == 0 || !strings.Contains(errOut, "node3 exited during start") || !strings.Contains(errOut, "address already in use") {
		t.Fatalf("up with node3's port taken: exit %d, want a failure naming node3 and its log's error\n%s%s", code, out, errOut)
	}
	if p := lc.pids(); p[1] != first[1] || p[2] != third[2] || !alive(p[1]) || !alive(p[2]) || p[3] != 0 {
		t.Fatalf("PIDs %v after the failed up: node1 and node2 must run on, node3 have no PID file", p)
	}

	// A coordd the script did not start holds node3's data directory.
	stray := exec.Command(coorddBin, "--id", "node3", "--data-dir", filepath.Join(lc.dir, "node3"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0")
	stray.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	strayLog := &testutil.Buffer{}
	stray.Stderr = strayLog
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	lc.seen[stray.Process.Pid] = true
	defer func() { _ = stray.Process.Kill(); _ = stray.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(strayLog.String(), "coordd node started") {
		if time.Now().After(deadline) {
			t.Fatalf("the stray coordd did not start:\n%s", strayLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := fmt.Sprintf("node3: pid %d holds %s", stray.Process.Pid, filepath.Join(lc.dir, "node3"))
	if out, errOut, code := lc.run("up", lc.dir); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("up with a stray coordd on node3's directory: exit %d, want a failure with %q\n%s%s", code, want, out, errOut)
	}
	if out, errOut, code := lc.run("down", lc.dir); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("down with a stray coordd on node3's directory: exit %d, want a failure with %q\n%s%s", code, want, out, errOut)
	}
	_ = stray.Process.Kill()
	_ = stray.Wait()
	for _, pid := range []int{first[1], third[2]} {
		awaitGone(t, pid) // down stopped the others before it failed
	}

	// down on a stopped cluster succeeds; a started one stops by PID.
	lc.ok("down", lc.dir)
	lc.ok("up", lc.dir)
	last := lc.pids()
	out = lc.ok("down", lc.dir)
	for n := 1; n <= 3; n++ {
		if !strings.Contains(out, fmt.Sprintf("node%d: stopped (pid %d)", n, last[n])) {
			t.Errorf("down: output lacks node%d's stop:\n%s", n, out)
		}
		awaitGone(t, last[n])
	}
	if p := lc.pids(); p != [4]int{} {
		t.Errorf("PID files remain after down: %v", p)
	}
}
