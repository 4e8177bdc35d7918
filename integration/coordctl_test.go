package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testutil"
)

type ctl struct {
	t         *testing.T
	endpoints string
	extra     []string // global flags put before args (TLS)
}

// run executes coordctl and returns stdout, stderr and the exit status.
func (c ctl) run(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(coordctlBin, append(append([]string(nil), c.extra...), args...)...)
	cmd.Env = append(os.Environ(), "COORD_ENDPOINTS="+c.endpoints)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func (c ctl) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("coordctl %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

func (c ctl) json(args ...string) map[string]any {
	c.t.Helper()
	out := c.ok(append([]string{"-o", "json"}, args...)...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		c.t.Fatalf("coordctl %v: not one JSON document: %v\n%s", args, err, out)
	}
	return m
}

// field reads a nested field of a JSON document.
var field = testutil.Field

// Every coordctl command against a three-node cluster started with
// scripts/local-cluster.sh, through the binaries: output, JSON shapes and
// exit codes.
func TestCoordctlEndToEnd(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	dir := t.TempDir()
	base := textPorts(t, 23) // BASE_PORT: node N on +10(N-1)+0, 1, 2
	up := exec.Command("bash", "../scripts/local-cluster.sh", "up", dir)
	up.Env = append(os.Environ(), "COORDD_BIN="+coorddBin, fmt.Sprintf("BASE_PORT=%d", base))
	t.Cleanup(func() {
		down := exec.Command("bash", "../scripts/local-cluster.sh", "down", dir)
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("local-cluster down: %v\n%s", err, out)
		}
	})
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("local-cluster up: %v\n%s", err, out)
	}
	eps, err := os.ReadFile(filepath.Join(dir, "endpoints"))
	if err != nil || !strings.Contains(string(out), "COORD_ENDPOINTS="+strings.TrimSpace(string(eps))) {
		t.Fatalf("endpoints file %q, output %q", eps, out)
	}
	c := ctl{t: t, endpoints: strings.TrimSpace(string(eps))}

	// Cluster: status of every endpoint, members with gRPC addresses.
	var st map[string]any
	deadline := time.Now().Add(15 * time.Second)
	for {
		st = c.json("status")
		nodes, _ := st["nodes"].([]any)
		registered := c.json("members")
		ms, _ := registered["members"].([]any)
		all := len(nodes) == 3 && len(ms) == 3
		for _, m := range ms {
			if field(m.(map[string]any), "grpc_address") == "" {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", st)
		}
		time.Sleep(50 * time.Millisecond) // the members register asynchronously
	}
	for _, n := range st["nodes"].([]any) {
		s := field(n.(map[string]any), "status").(map[string]any)
		for _, k := range []string{"id", "state", "leader_id", "leader_address", "term", "commit_index", "applied_index", "last_contact", "fsm_digest"} {
			if _, ok := s[k]; !ok {
				t.Fatalf("status lacks %s: %v", k, s)
			}
		}
	}
	if out := c.ok("status"); !strings.Contains(out, "Leader") || strings.Count(out, "\n") != 4 {
		t.Fatalf("status table:\n%s", out)
	}

	// Leases.
	acq := c.json("lease", "acquire", "daily-close", "--owner", "alice", "--ttl", "30s")
	if field(acq, "acquired") != true || field(acq, "lease", "generation") != "1" || field(acq, "lease", "owner") != "alice" {
		t.Fatalf("acquire: %v", acq)
	}
	held, _, code := c.run("lease", "acquire", "daily-close", "--owner", "bob")
	if code != 3 || !strings.Contains(held, "held by alice") {
		t.Fatalf("contended acquire: exit %d\n%s", code, held)
	}
	if got := c.json("lease", "get", "daily-close"); field(got, "lease", "name") != "daily-close" || field(got, "lease", "expires_in") == "0s" {
		t.Fatalf("lease get: %v", got)
	}
	c.ok("lease", "acquire", "other", "--owner", "carol")
	list := c.json("lease", "list", "--prefix", "daily-")
	if ls := list["leases"].([]any); len(ls) != 1 {
		t.Fatalf("lease list --prefix: %v", list)
	}
	if out := c.ok("lease", "list"); !strings.Contains(out, "daily-close") || !strings.Contains(out, "other") ||
		strings.Index(out, "daily-close") > strings.Index(out, "other") {
		t.Fatalf("lease list:\n%s", out)
	}
	if r := c.json("lease", "renew", "daily-close", "--owner", "alice", "--generation", "1", "--ttl", "20s"); field(r, "lease", "ttl") != "20s" {
		t.Fatalf("renew: %v", r)
	}
	_, errOut, code := c.run("lease", "renew", "daily-close", "--owner", "bob", "--generation", "1")
	if code != 1 || !strings.Contains(errOut, "LEASE_LOST") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "current_owner=alice") {
		t.Fatalf("foreign renew: exit %d %q", code, errOut)
	}

	// keepalive holds the lease until interrupted.
	ka := exec.Command(coordctlBin, "lease", "keepalive", "daily-close", "--owner", "alice", "--generation", "1", "--ttl", "30s")
	ka.Env = append(os.Environ(), "COORD_ENDPOINTS="+c.endpoints)
	kaOut, err := ka.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(kaOut).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "renewed daily-close generation 1") {
		t.Fatalf("keepalive: %q %v", line, err)
	}
	_ = ka.Process.Signal(syscall.SIGINT)
	if err := ka.Wait(); err != nil {
		t.Fatalf("keepalive after SIGINT: %v", err)
	}

	// Windows.
	claim := c.json("window", "claim", "daily-close", "2026-09-25", "--lease", "daily-close", "--owner", "alice", "--generation", "1")
	if field(claim, "claimed") != true || field(claim, "attempts") != "1" {
		t.Fatalf("claim: %v", claim)
	}
	done := c.json("window", "complete", "daily-close", "2026-09-25", "--lease", "daily-close", "--owner", "alice", "--generation", "1", "--result", "closed")
	if field(done, "window", "state") != "COMPLETED" {
		t.Fatalf("complete: %v", done)
	}
	if w := c.json("window", "get", "daily-close", "2026-09-25"); field(w, "window", "attempts") != "1" || field(w, "window", "owner") != "alice" {
		t.Fatalf("window get: %v", w)
	}
	if out := c.ok("window", "list", "--job", "daily-close"); !strings.Contains(out, "completed") || !strings.Contains(out, "closed") {
		t.Fatalf("window list:\n%s", out)
	}

	// Fences.
	fc := c.json("fence", "commit", "payments/store-42", "--lease", "daily-close", "--generation", "1", "--key", "k1", "--payload", "42.00")
	if field(fc, "accepted") != true || field(fc, "duplicate") != false {
		t.Fatalf("commit: %v", fc)
	}
	if dup := c.json("fence", "commit", "payments/store-42", "--lease", "daily-close", "--generation", "1", "--key", "k1"); field(dup, "duplicate") != true {
		t.Fatalf("repeat: %v", dup)
	}
	if d := c.json("fence", "commit", "payments/store-42", "--token", "daily-close:1", "--key", "k2", "--dry-run"); field(d, "accepted") != true || field(d, "dry_run") != true {
		t.Fatalf("dry run: %v", d)
	}
	if r := c.json("fence", "get", "payments/store-42"); field(r, "resource", "max_generation") != "1" {
		t.Fatalf("fence get: %v", r)
	}
	c.ok("lease", "release", "daily-close", "--owner", "alice", "--generation", "1")
	if out := c.ok("lease", "release", "daily-close", "--owner", "alice", "--generation", "1"); !strings.Contains(out, "already released") {
		t.Fatalf("second release:\n%s", out)
	}
	c.ok("lease", "acquire", "daily-close", "--owner", "bob")
	_, errOut, code = c.run("fence", "commit", "payments/store-42", "--lease", "daily-close", "--generation", "1")
	if code != 1 || !strings.Contains(errOut, "STALE_TOKEN") || !strings.Contains(errOut, "current_generation=2") {
		t.Fatalf("stale commit: exit %d %q", code, errOut)
	}

	// --wait queues behind the holder and gets the lease at its release.
	c.ok("lease", "acquire", "maint", "--owner", "erin", "--ttl", "30s")
	waitCmd := exec.Command(coordctlBin, "-o", "json", "lease", "acquire", "maint", "--owner", "dave", "--wait", "--timeout", "20s")
	waitCmd.Env = append(os.Environ(), "COORD_ENDPOINTS="+c.endpoints)
	var waitOut bytes.Buffer
	waitCmd.Stdout = &waitOut
	if err := waitCmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitDone := make(chan error, 1)
	go func() { waitDone <- waitCmd.Wait() }()
	select {
	case err := <-waitDone:
		t.Fatalf("--wait returned while the lease was held: %v %s", err, waitOut.String())
	case <-time.After(300 * time.Millisecond): // still waiting, as it should
	}
	c.ok("lease", "release", "maint", "--owner", "erin", "--generation", "1")
	var waited map[string]any
	if err := <-waitDone; err != nil || json.Unmarshal(waitOut.Bytes(), &waited) != nil ||
		field(waited, "lease", "owner") != "dave" || field(waited, "lease", "generation") != "2" {
		t.Fatalf("--wait: %v %s", err, waitOut.String())
	}

	// Operations: snapshot, leader transfer, members add/remove.
	if s := c.json("snapshot"); field(s, "index") == "0" {
		t.Fatalf("snapshot: %v", s)
	}
	tr := c.json("leader", "transfer")
	if field(tr, "leader_id") == "" {
		t.Fatalf("transfer: %v", tr)
	}
	c.ok("members", "add", "node9", "127.0.0.1:1", "127.0.0.1:2")
	if m := c.json("members"); len(m["members"].([]any)) != 4 {
		t.Fatalf("after add: %v", m)
	}
	c.ok("members", "remove", "node9")
	if m := c.json("members"); len(m["members"].([]any)) != 3 {
		t.Fatalf("after remove: %v", m)
	}

	// Schedules: create (an upsert), get, list, trigger, pause, resume,
	// overdue (nobody runs its jobs), delete.
	sc := c.json("schedule", "create", "every-second", "--schedule", "@every 1s", "--kind", "tick", "--queue", "ctl",
		"--complete-within", "1s", "--overlap", "allow")
	if field(sc, "created") != true || field(sc, "schedule", "spec", "schedule") != "@every 1s" || field(sc, "schedule", "interval") != "1s" {
		t.Fatalf("schedule create: %v", sc)
	}
	if again := c.json("schedule", "create", "every-second", "--schedule", "@every 1s", "--kind", "tick", "--queue", "ctl",
		"--complete-within", "1s", "--overlap", "allow"); field(again, "changed") != false {
		t.Fatalf("create again: %v", again)
	}
	if _, errOut, code := c.run("schedule", "create", "bad", "--schedule", "whenever", "--kind", "k"); code != 1 || !strings.Contains(errOut, "field=schedule") {
		t.Fatalf("bad schedule: exit %d %q", code, errOut)
	}
	if sl := c.json("schedule", "list"); len(sl["schedules"].([]any)) != 1 {
		t.Fatalf("schedule list: %v", sl)
	}
	if tr := c.json("schedule", "trigger", "every-second"); !strings.Contains(fmt.Sprint(field(tr, "occurrence", "window")), "/manual-") {
		t.Fatalf("schedule trigger: %v", tr)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		out, errOut, code := c.run("-o", "json", "job", "overdue") // exit 4 once something is overdue
		var od map[string]any
		if err := json.Unmarshal([]byte(out), &od); err != nil || (code != 0 && code != 4) {
			t.Fatalf("job overdue: exit %d %v\n%s%s", code, err, out, errOut)
		}
		if os, _ := od["occurrences"].([]any); len(os) > 0 {
			if code != 4 {
				t.Fatalf("job overdue listed %d occurrences with exit %d, want 4", len(os), code)
			}
			if field(os[0].(map[string]any), "schedule") != "every-second" {
				t.Fatalf("overdue: %v", od)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overdue occurrence: %v", od)
		}
		time.Sleep(100 * time.Millisecond) // occurrences come due in real time
	}
	if g := c.json("schedule", "get", "every-second", "--next", "5"); len(g["next"].([]any)) != 5 || len(g["recent"].([]any)) == 0 {
		t.Fatalf("schedule get: %v", g)
	}
	if out := c.ok("schedule", "get", "every-second"); !strings.Contains(out, "OVERDUE") || !strings.Contains(out, "triggered") {
		t.Fatalf("schedule get table:\n%s", out)
	}
	if out, _, code := c.run("job", "overdue"); code != 4 || !strings.Contains(out, "every-second") || !strings.Contains(out, "TOP SCHEDULE") {
		t.Fatalf("job overdue table (exit %d):\n%s", code, out)
	}
	if p := c.json("schedule", "pause", "every-second"); field(p, "schedule", "paused") != true {
		t.Fatalf("pause: %v", p)
	}
	if r := c.json("schedule", "resume", "every-second"); field(r, "changed") != true {
		t.Fatalf("resume: %v", r)
	}
	if d := c.json("schedule", "delete", "every-second"); field(d, "schedule", "deleted") != true {
		t.Fatalf("delete: %v", d)
	}

	// Bad usage and help.
	if _, _, code := c.run("lease", "get"); code != 2 {
		t.Fatalf("usage: exit %d", code)
	}
	if out := c.ok("lease", "acquire", "--help"); !strings.Contains(out, "Examples:") {
		t.Fatalf("help:\n%s", out)
	}
}
