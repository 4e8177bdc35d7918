package integration

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testutil"
)

// The commands in README.md, docs/*.md and the examples' header comments,
// run as a reader would run them, so that the text cannot drift from the
// code.
//
// A shell block (a fenced block marked sh, bash, shell or console, or an
// indented block) belongs to a lane: the HTML comment right above it says
// which (<!-- doc-test: three-nodes -->), or that it is skipped and why
// (<!-- doc-test: skip REASON -->); blocks in files whose text this test
// does not own are classified by docRules. A block nobody classified fails
// the test. A lane is one bash process that runs its blocks in order (README
// first, then docs/*.md, then the examples), as one reader's terminal: each
// command line (with its \ continuations) is echoed, run, and its exit
// status checked: 0, or N when the line says "(exit N)". A line that says
// "until Ctrl-C" runs for 3 s and is interrupted. A block identical to one
// that already runs is skipped (the examples' headers repeat the README).
//
// Each lane gets its own free ports and temporary directory: 127.0.0.1:74NN
// and :8080 in the text become ports of a free range, "/tmp/" becomes the
// lane's directory, and coordd's and coordctl's defaults point at the same
// range through COORDD_GRPC_ADDR, COORDD_HTTP_ADDR, COORDD_RAFT_ADDR,
// COORDD_DATA_DIR, COORD_ENDPOINTS and BASE_PORT. Lanes that build or run Go
// code run in the repository (the quickstart's `go build -o bin/` writes
// the repository's bin/, which .gitignore ignores); the others in their
// directory, with a scripts/ link. Every process a lane starts is in its
// process group: the lane fails if one still runs after its last command
// (the text must stop what it starts), and cleanup kills the group.

// docLanes, by name: a block in a lane not listed fails the test.
var docLanes = map[string]docLane{
	// The README's first command, in the foreground: started, awaited until
	// it serves, interrupted with SIGINT as Ctrl-C would.
	"serve":           {serve: true},
	"one-node":        {},
	"three-nodes":     {},
	"scheduled-close": {},
	// Run jobs (README) and docs/jobs.md: a loopback cluster each.
	"jobs":     {},
	"jobs-doc": {},
	// The TLS cluster of the README's security section, called by
	// docs/http-api.md's curl steps, stopped as the README says.
	"tls":   {inTemp: true, teardown: "scripts/local-cluster.sh down /tmp/c3"},
	"certs": {inTemp: true},
	// The examples' headers, when they are not the README's blocks.
	"example-daily-close":     {},
	"example-scheduled-close": {},
	"example-election":        {},
	"example-queue-worker":    {},
}

type docLane struct {
	serve    bool   // run the one command in the foreground until it serves
	inTemp   bool   // run in the lane's directory instead of the repository
	teardown string // a command run after the lane, whatever happened
}

// docRules classify the blocks of files whose text this test does not
// mark: the first rule whose file matches and whose contains is in the
// block applies.
var docRules = []struct {
	file, contains string
	lane           string
	skip           string   // reason, instead of a lane
	expect         []string // output the lane must show
}{
	{file: "docs/http-api.md", contains: "/v1/fence/", lane: "tls", expect: []string{" 409", `"STALE_TOKEN"`}},
	{file: "docs/security.md", contains: "coordctl certs", lane: "certs"},
	{file: "docs/benchmarks.md", contains: "coordbench", skip: "the load generator: minutes of load on every core"},
	{file: "docs/benchmarks.md", contains: "-bench", skip: "Go micro-benchmarks: minutes of CPU"},
	{file: "examples/daily-close/main.go", lane: "example-daily-close"},
	{file: "examples/scheduled-close/main.go", lane: "example-scheduled-close"},
	{file: "examples/queue-worker/main.go", lane: "example-queue-worker"},
	{file: "examples/election/main.go", contains: "--demo", lane: "example-election"},
	{file: "examples/election/main.go", contains: "--id a", skip: "a replica runs until interrupted; the demo block runs two"},
	{file: "examples/election/main.go", contains: "elected id=", skip: "sample output"},
	{file: "examples/fenced-api/main.go", lane: "one-node", expect: []string{"Idempotent-Replayed: true", `"reason":"STALE_TOKEN"`}},
}

// docBlock is one shell block of a document.
type docBlock struct {
	file   string
	line   int // of the block's first line
	lines  []string
	marker string // the doc-test comment above it, if any
	lane   string
	skip   string
	expect []string
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

func (b docBlock) text() string { return strings.Join(b.lines, "\n") }

var (
	markerRE = regexp.MustCompile(`^<!--\s*doc-test:\s*(.*?)\s*-->\s*$`)
	fenceRE  = regexp.MustCompile("^(```+|~~~+)\\s*([^\\s`]*)")
	exitRE   = regexp.MustCompile(`\(exit (\d+)\)`)
	portRE   = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):(\d{4})\b`)
)

// markdownBlocks returns the shell blocks of a Markdown file.
func markdownBlocks(t *testing.T, root, file string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []docBlock
	marker := func(i int) string { // the doc-test comment right above line i
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) == "" {
				continue
			}
			if m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[j])); m != nil {
				return m[1]
			}
			return ""
		}
		return ""
	}
	for i := 0; i < len(lines); i++ {
		if m := fenceRE.FindStringSubmatch(lines[i]); m != nil {
			fence, lang := m[1], strings.ToLower(m[2])
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), fence) {
				j++
			}
			switch lang {
			case "", "sh", "bash", "shell", "console":
				out = append(out, docBlock{file: file, line: i + 2, lines: lines[i+1 : min(j, len(lines))], marker: marker(i)})
			}
			i = j
			continue
		}
		// An indented block starts after a blank line.
		if strings.HasPrefix(lines[i], "    ") && strings.TrimSpace(lines[i]) != "" && i > 0 && strings.TrimSpace(lines[i-1]) == "" {
			j := i
			var body []string
			for j < len(lines) && (strings.HasPrefix(lines[j], "    ") || strings.TrimSpace(lines[j]) == "") {
				body = append(body, strings.TrimPrefix(lines[j], "    "))
				j++
			}
			for len(body) > 0 && strings.TrimSpace(body[len(body)-1]) == "" {
				body = body[:len(body)-1]
			}
			out = append(out, docBlock{file: file, line: i + 1, lines: body, marker: marker(i)})
			i = j - 1
		}
	}
	return out
}

// headerBlocks returns the command blocks (tab-indented comment lines) of a
// Go file's package comment.
func headerBlocks(t *testing.T, root, file string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "package ") {
			break
		}
		if strings.HasPrefix(l, "//\t") {
			if cur == nil {
				out = append(out, docBlock{file: file, line: i + 1})
				cur = &out[len(out)-1]
			}
			cur.lines = append(cur.lines, strings.TrimPrefix(l, "//\t"))
			continue
		}
		cur = nil
	}
	return out
}

// docBlocksToRun finds and classifies every shell block.
func docBlocksToRun(t *testing.T, root string) []docBlock {
	t.Helper()
	blocks := markdownBlocks(t, root, "README.md")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	sort.Strings(docs)
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		blocks = append(blocks, markdownBlocks(t, root, rel)...)
	}
	examples, _ := filepath.Glob(filepath.Join(root, "examples", "*", "main.go"))
	sort.Strings(examples)
	for _, e := range examples {
		rel, _ := filepath.Rel(root, e)
		blocks = append(blocks, headerBlocks(t, root, rel)...)
	}
	runs := map[string]string{} // block text -> where it runs
	for i := range blocks {
		b := &blocks[i]
		switch {
		case strings.HasPrefix(b.marker, "skip"):
			b.skip = strings.TrimSpace(strings.TrimPrefix(b.marker, "skip"))
			if b.skip == "" {
				t.Errorf("%s: <!-- doc-test: skip --> needs a reason", b.where())
			}
		case b.marker != "":
			b.lane = b.marker
		default:
			for _, r := range docRules {
				if filepath.ToSlash(b.file) == r.file && strings.Contains(b.text(), r.contains) {
					b.lane, b.skip, b.expect = r.lane, r.skip, r.expect
					break
				}
			}
		}
		if b.lane == "" && b.skip == "" {
			t.Errorf("%s: a shell block no test runs: put <!-- doc-test: LANE --> (or <!-- doc-test: skip REASON -->) above it, "+
				"or classify it in docRules (integration/docs_test.go):\n%s", b.where(), b.text())
			continue
		}
		if b.lane != "" {
			if _, ok := docLanes[b.lane]; !ok {
				t.Errorf("%s: unknown doc-test lane %q", b.where(), b.lane)
			}
			if first, ok := runs[b.text()]; ok {
				b.lane, b.skip = "", "the same commands as "+first
				continue
			}
			runs[b.text()] = b.where()
		}
	}
	return blocks
}

// docEnv is one lane's substitutions and environment.
type docEnv struct {
	base int    // 127.0.0.1:7400+k becomes base+k; :8080 becomes base+50
	tmp  string // replaces "/tmp/"
}

func (e docEnv) rewrite(s string) string {
	s = portRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sub[2])
		switch {
		case p >= 7400 && p < 7450:
			return fmt.Sprintf("%s:%d", sub[1], e.base+p-7400)
		case p == 8080:
			return fmt.Sprintf("%s:%d", sub[1], e.base+50)
		}
		return m
	})
	return strings.ReplaceAll(s, "/tmp/", e.tmp+"/")
}

func (e docEnv) environ() []string {
	return append(cleanEnv(),
		"PATH="+filepath.Dir(coordctlBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"COORDD_DATA_DIR="+filepath.Join(e.tmp, "coordd-data"),
		fmt.Sprintf("COORDD_GRPC_ADDR=127.0.0.1:%d", e.base),
		fmt.Sprintf("COORDD_HTTP_ADDR=127.0.0.1:%d", e.base+1),
		fmt.Sprintf("COORDD_RAFT_ADDR=127.0.0.1:%d", e.base+2),
		fmt.Sprintf("COORD_ENDPOINTS=127.0.0.1:%d", e.base),
		fmt.Sprintf("BASE_PORT=%d", e.base+10),
		"COORDD_BIN="+coorddBin, "COORDCTL_BIN="+coordctlBin,
	)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// laneScript is the bash script of a lane's blocks: each command echoed,
// run, and its exit status checked.
func laneScript(env docEnv, blocks []docBlock) string {
	var sb strings.Builder
	for _, b := range blocks {
		fmt.Fprintf(&sb, "printf '\\n### %%s\\n' %s\n", shellQuote(b.where()))
		for i := 0; i < len(b.lines); i++ {
			start := i
			cmd := b.lines[i]
			for strings.HasSuffix(strings.TrimRight(cmd, " "), `\`) && i+1 < len(b.lines) {
				i++
				cmd += "\n" + b.lines[i]
			}
			trimmed := strings.TrimSpace(cmd)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			want := 0
			if m := exitRE.FindStringSubmatch(cmd); m != nil {
				want, _ = strconv.Atoi(m[1])
			}
			run := env.rewrite(cmd)
			if strings.Contains(cmd, "until Ctrl-C") {
				run, want = "timeout -s INT 3 "+run, 124
			}
			fmt.Fprintf(&sb, "printf '$ %%s\\n' %s\n%s\n", shellQuote(run), run)
			fmt.Fprintf(&sb, "__rc=$?; if [ \"$__rc\" != %d ]; then printf '\\nDOCTEST FAILED %s:%d: exit %%s, want %d\\n' \"$__rc\"; exit 97; fi\n",
				want, b.file, b.line+start, want)
		}
	}
	sb.WriteString("printf '\\nDOCTEST DONE\\n'\n")
	return sb.String()
}

// groupPIDs lists the live processes of a process group.
func groupPIDs(pgid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, pgrp, ...
		if len(f) < 3 || f[0] == "Z" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " ")))
	}
	return out
}

// startGroup starts cmd in a process group of its own that cleanup kills.
func startGroup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
}

// runLane runs a lane's blocks in one bash process and checks that they
// succeed and leave nothing running.
func runLane(t *testing.T, root string, lane docLane, blocks []docBlock) {
	env := docEnv{base: textPorts(t, 51), tmp: t.TempDir()}
	dir := root
	if lane.inTemp {
		dir = env.tmp
		if err := os.Symlink(filepath.Join(root, "scripts"), filepath.Join(dir, "scripts")); err != nil {
			t.Fatal(err)
		}
	}
	out := &testutil.Buffer{}
	cmd := exec.Command("bash", "-c", laneScript(env, blocks))
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env.environ(), out, out
	start := time.Now()
	startGroup(t, cmd)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the lane did not finish within 3 minutes:\n%s", out.String())
	}
	t.Logf("ran %d block(s) in %s", len(blocks), time.Since(start).Round(100*time.Millisecond))
	if lane.teardown != "" {
		td := exec.Command("bash", "-c", "printf '\\n$ %s\\n' "+shellQuote(env.rewrite(lane.teardown))+"; "+env.rewrite(lane.teardown))
		td.Dir, td.Env, td.Stdout, td.Stderr = dir, env.environ(), out, out
		if tdErr := td.Run(); tdErr != nil {
			t.Errorf("teardown %q: %v", lane.teardown, tdErr)
		}
	}
	if err != nil || !strings.Contains(out.String(), "DOCTEST DONE") {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, b := range blocks {
		for _, want := range b.expect {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: the output lacks %q", b.where(), want)
			}
		}
	}
	// What the text started, the text stopped.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := groupPIDs(cmd.Process.Pid)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("still running after the lane's last command (the text must stop what it starts):\n%s\n\n%s",
				strings.Join(left, "\n"), out.String())
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", out.String())
	}
}

// serveLane runs the README's first command (coordd in the foreground),
// waits until it serves, and interrupts it as Ctrl-C would.
func serveLane(t *testing.T, root string, blocks []docBlock) {
	if len(blocks) != 1 || len(blocks[0].lines) != 1 {
		t.Fatalf("the serve lane runs one block of one command, got %d block(s)", len(blocks))
	}
	env := docEnv{base: textPorts(t, 51), tmp: t.TempDir()}
	out := &testutil.Buffer{}
	cmd := exec.Command("bash", "-c", env.rewrite(blocks[0].lines[0]))
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = root, env.environ(), out, out
	startGroup(t, cmd)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", env.base+1)
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := hc.Get(url); err == nil {
			b := bufio.NewScanner(resp.Body)
			ok := b.Scan() && b.Text() == "ok"
			resp.Body.Close()
			if ok {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("%s: %q exited before it served: %v\n%s", blocks[0].where(), blocks[0].lines[0], err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q did not serve within 2 minutes\n%s", blocks[0].where(), blocks[0].lines[0], out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(env.tmp, "coordd-data", "LOCK")); err != nil {
		t.Errorf("no data directory where COORDD_DATA_DIR says: %v", err)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // Ctrl-C: the terminal signals the foreground group
	select {
	case <-done: // go run exits 1 when interrupted, whatever coordd did: the log says
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after Ctrl-C:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "coordd node stopped") {
		t.Errorf("no clean shutdown in the log:\n%s", out.String())
	}
}

// TestDocCommands runs every command of README.md, docs/*.md and the
// examples' headers that a test can run (lanes run in parallel, as
// subtests; -run TestDocCommands/tls runs one) and lists the others as
// skipped, with the reason.
func TestDocCommands(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"bash", "curl", "jq", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documented commands use %s: %v", tool, err)
		}
	}
	blocks := docBlocksToRun(t, root)
	if t.Failed() {
		t.FailNow()
	}
	byLane := map[string][]docBlock{}
	var names []string
	for _, b := range blocks {
		if b.skip != "" {
			t.Run("skip "+b.where(), func(t *testing.T) { t.Skip(b.skip) })
			continue
		}
		if _, ok := byLane[b.lane]; !ok {
			names = append(names, b.lane)
		}
		byLane[b.lane] = append(byLane[b.lane], b)
	}
	for _, name := range names {
		lane := docLanes[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if lane.serve {
				serveLane(t, root, byLane[name])
				return
			}
			runLane(t, root, lane, byLane[name])
		})
	}
}

// The README's two commands (run coordd; run the tests) stay the first
// things a reader sees, and the one-node quickstart follows them.
func TestReadmeQuickstartFacts(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "## ") {
			headings = append(headings, fmt.Sprintf("%d:%s", i+1, l))
		}
	}
	if len(headings) < 2 || !strings.HasSuffix(headings[0], ":## The two commands") ||
		!strings.HasSuffix(headings[1], ":## Quickstart on one node") {
		t.Errorf("the README's first sections are %q, want \"## The two commands\" then \"## Quickstart on one node\"", headings[:min(2, len(headings))])
	}
	blocks := markdownBlocks(t, root, "README.md")
	if len(blocks) < 3 {
		t.Fatalf("the README has %d shell blocks", len(blocks))
	}
	if got := blocks[0].text(); got != "go run ./cmd/coordd" || blocks[0].line > 40 {
		t.Errorf("the README's first command is %q at line %d, want \"go run ./cmd/coordd\" within its first 40 lines", got, blocks[0].line)
	}
	if got := blocks[1].text(); got != "scripts/test.sh" || blocks[1].line > 60 {
		t.Errorf("the README's second command is %q at line %d, want \"scripts/test.sh\" within its first 60 lines", got, blocks[1].line)
	}
	// The quickstart: built binaries on PATH, the default endpoint, stopped
	// by PID (never a go run PID).
	q := string(data)
	q = q[strings.Index(q, "## Quickstart on one node"):]
	q = q[:strings.Index(q[3:], "\n## ")+3]
	for _, want := range []string{"go build -o bin/ ./cmd/coordd ./cmd/coordctl", "export PATH=$PWD/bin:$PATH",
		"coordd 2>", "kill $coordd_pid", "(exit 1)", "window claim", "fence commit"} {
		if !strings.Contains(q, want) {
			t.Errorf("the quickstart lacks %q", want)
		}
	}
	for _, bad := range []string{"7410", "go run ./cmd/coordd &"} {
		if strings.Contains(q, bad) {
			t.Errorf("the quickstart mentions %q: it runs one node, on the default endpoint, from the built binary", bad)
		}
	}
}
