package deploy

// Tests of the packaging: the systemd unit (systemd-analyze verify and its
// offline security score), the container recipe (its structure, and its
// build command run here: the binaries must be static) and
// scripts/release.sh (run in a fresh clone for the host's architecture:
// the binaries print the version and commit they were built from). The
// Kubernetes manifests have their own module: deploy/kubernetes.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	unitFile       = "systemd/coordd.service"
	dockerfile     = "container/Dockerfile"
	dockerignore   = "container/Dockerfile.dockerignore"
	releaseScript  = "../scripts/release.sh"
	repositoryRoot = ".."
)

// instruction is one Dockerfile instruction: its keyword (upper case) and
// its arguments, continuation lines joined.
type instruction struct {
	line    int
	keyword string
	args    string
}

// parseDockerfile splits a Dockerfile into instructions: comment lines and
// blank lines dropped, lines ending in a backslash joined to the next (the
// grammar of the Dockerfile reference, without heredocs, which this file
// does not use). A parser directive (# syntax=) is a comment here.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		keyword, args, _ := strings.Cut(cur.String(), " ")
		if strings.Contains(args, "<<") {
			t.Fatalf("%s:%d: a heredoc, which this parser does not read", path, start)
		}
		out = append(out, instruction{start, strings.ToUpper(keyword), strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: ends in a continuation line", path)
	}
	return out
}

// stage is one FROM … and the instructions up to the next FROM.
type stage struct {
	base, name string
	body       []instruction
}

func stages(t *testing.T, ins []instruction) []stage {
	t.Helper()
	var out []stage
	for _, in := range ins {
		if in.keyword == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			s := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("line %d: FROM %s", in.line, in.args)
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			if in.keyword != "ARG" {
				t.Fatalf("line %d: %s before the first FROM", in.line, in.keyword)
			}
			continue
		}
		out[len(out)-1].body = append(out[len(out)-1].body, in)
	}
	return out
}

func find(st stage, keyword string) []instruction {
	var out []instruction
	for _, in := range st.body {
		if in.keyword == keyword {
			out = append(out, in)
		}
	}
	return out
}

// The recipe: a Go builder stage, then a distroless (or scratch) stage
// with the binaries copied from it, a non-root user, the data dir as a
// volume, the three ports, an exec-form entrypoint and no HEALTHCHECK; the
// build command is static (CGO_ENABLED=0) and reproducible (-trimpath).
// The command itself is run by TestContainerBuildCommandIsStatic.
func TestContainerRecipe(t *testing.T) {
	ins := parseDockerfile(t, dockerfile)
	for _, in := range ins {
		if !slices.Contains([]string{"FROM", "ARG", "WORKDIR", "COPY", "RUN", "USER", "ENV", "VOLUME", "EXPOSE", "ENTRYPOINT", "CMD", "LABEL"}, in.keyword) {
			t.Errorf("line %d: instruction %s (HEALTHCHECK and ADD are not wanted; others are not checked here)", in.line, in.keyword)
		}
	}
	ss := stages(t, ins)
	if len(ss) != 2 {
		t.Fatalf("%d stages, want 2 (builder, runtime)", len(ss))
	}
	build, run := ss[0], ss[1]
	if !strings.HasPrefix(build.base, "golang:") || build.name == "" {
		t.Errorf("builder stage FROM %s AS %q: want golang:… AS name", build.base, build.name)
	}
	if !strings.HasPrefix(run.base, "gcr.io/distroless/static") && run.base != "scratch" {
		t.Errorf("runtime stage FROM %s: want distroless/static or scratch", run.base)
	}
	// The build: one RUN with go build, static, trimmed.
	cmd := buildCommand(t, build)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/coordd", "./cmd/coordctl", "-o /out/"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("build command %q: no %s", cmd, want)
		}
	}
	// The runtime stage.
	copies := find(run, "COPY")
	fromBuild := 0
	for _, c := range copies {
		if strings.Contains(c.args, "--from="+build.name) {
			fromBuild++
		}
	}
	if fromBuild == 0 || fromBuild != len(copies) {
		t.Errorf("runtime stage: %d COPY, %d from the builder; want every one from it", len(copies), fromBuild)
	}
	users := find(run, "USER")
	if len(users) != 1 {
		t.Fatalf("runtime stage: %d USER, want 1", len(users))
	}
	if u, _, _ := strings.Cut(users[0].args, ":"); u == "0" || u == "root" || u == "" {
		t.Errorf("USER %s: want a non-root user", users[0].args)
	}
	volumes := find(run, "VOLUME")
	var vol []string
	if len(volumes) != 1 || json.Unmarshal([]byte(volumes[0].args), &vol) != nil || len(vol) != 1 {
		t.Fatalf("runtime stage: want one VOLUME [\"dir\"], have %v", volumes)
	}
	env := find(run, "ENV")
	if len(env) != 1 || env[0].args != "COORDD_DATA_DIR="+vol[0] {
		t.Errorf("ENV %v: want COORDD_DATA_DIR=%s (the volume)", env, vol[0])
	}
	// The mount point is copied in owned by the user, or a new volume is
	// root's and coordd cannot write to it.
	owned := false
	for _, c := range copies {
		if strings.Contains(c.args, "--chown="+users[0].args) && strings.HasSuffix(c.args, " "+vol[0]) {
			owned = true
		}
	}
	if !owned {
		t.Errorf("no COPY --chown=%s … %s: the volume's mount point would be root's", users[0].args, vol[0])
	}
	var ports []string
	for _, e := range find(run, "EXPOSE") {
		ports = append(ports, strings.Fields(e.args)...)
	}
	if want := []string{"7400", "7401", "7402"}; !slices.Equal(ports, want) {
		t.Errorf("EXPOSE %v, want %v (gRPC, HTTP, Raft: cmd/coordd's default ports)", ports, want)
	}
	eps := find(run, "ENTRYPOINT")
	var ep []string
	if len(eps) != 1 || json.Unmarshal([]byte(eps[0].args), &ep) != nil || len(ep) == 0 || !strings.HasSuffix(ep[0], "/coordd") {
		t.Errorf("ENTRYPOINT %v: want the exec form [\"…/coordd\"]", eps)
	}
	// The build context keeps what the build needs.
	ignored, err := os.ReadFile(dockerignore)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(ignored), "\n") {
		l = strings.TrimSpace(l)
		if slices.Contains([]string{".git", "/.git", "go.mod", "go.sum", "cmd", "/cmd", "*", "**"}, l) {
			t.Errorf("%s excludes %s, which the build needs", dockerignore, l)
		}
	}
}

// buildCommand is the builder stage's RUN … go build … command.
func buildCommand(t *testing.T, build stage) string {
	t.Helper()
	var cmds []string
	for _, r := range find(build, "RUN") {
		if strings.Contains(r.args, "go build") {
			cmds = append(cmds, r.args)
		}
	}
	if len(cmds) != 1 {
		t.Fatalf("builder stage: %d RUN with go build, want 1", len(cmds))
	}
	return cmds[0]
}

var (
	staticOnce sync.Once
	staticDir  string
	staticErr  error
)

// staticBinaries runs the Dockerfile's build command here, from the
// repository root (the build context) with the host's architecture, /out/
// replaced by a temporary directory; once per test binary.
func staticBinaries(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		cmd := buildCommand(t, stages(t, parseDockerfile(t, dockerfile))[0])
		staticDir, staticErr = os.MkdirTemp("", "coordd-static-")
		if staticErr != nil {
			return
		}
		c := exec.Command("sh", "-c", strings.ReplaceAll(cmd, "/out/", staticDir+"/"))
		c.Dir = repositoryRoot
		c.Env = append(os.Environ(), "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH)
		if out, err := c.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("%s: %v\n%s", cmd, err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if staticDir != "" {
		_ = os.RemoveAll(staticDir)
	}
	os.Exit(code)
}

// checkStatic fails unless path is an ELF executable for arch with no
// interpreter and no shared libraries: it runs on distroless/static.
func checkStatic(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an ELF interpreter: dynamically linked", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s: shared libraries %v (%v)", path, libs, err)
	}
}

// The Dockerfile's own build command, run here, makes static binaries that
// start. (Without a Docker daemon or registry access on this machine the
// image itself is not built: docs/operations.md, "Container".)
func TestContainerBuildCommandIsStatic(t *testing.T) {
	dir := staticBinaries(t)
	for _, bin := range []string{"coordd", "coordctl"} {
		checkStatic(t, filepath.Join(dir, bin), runtime.GOARCH)
	}
	out, err := exec.Command(filepath.Join(dir, "coordd"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "coordd ") {
		t.Fatalf("coordd --version: %v: %s", err, out)
	}
}

// unitKeys reads a unit file: section → key → values (a key may repeat).
func unitKeys(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: line %q", path, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// unitCopy writes the unit into a temporary directory with ExecStart's
// binary replaced by bin (systemd-analyze verify wants it to exist), and
// extra lines added to [Service].
func unitCopy(t *testing.T, bin string, extra ...string) string {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	exec := regexp.MustCompile(`(?m)^ExecStart=(\S+)`)
	m := exec.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no ExecStart", unitFile)
	}
	s := strings.Replace(string(b), "ExecStart="+string(m[1]), "ExecStart="+bin, 1)
	s = strings.Replace(s, "[Service]\n", "[Service]\n"+strings.Join(append(extra, ""), "\n"), 1)
	path := filepath.Join(t.TempDir(), filepath.Base(unitFile))
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// analyze runs systemd-analyze; it returns its output and whether it
// exited 0.
func analyze(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	out, err := exec.Command("systemd-analyze", args...).CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), err == nil
}

// The unit passes systemd-analyze verify without a word about it (a copy
// whose ExecStart is a coordd built here), its offline security exposure
// stays at 2.0 or below ("OK"), and it has the hardening and restart
// settings docs/operations.md promises. A misspelt key in a copy is
// reported: the check can fail.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd; scripts/test.sh installs it)")
	}
	bin := filepath.Join(staticBinaries(t), "coordd")
	unit := unitCopy(t, bin)
	out, ok := analyze(t, "verify", unit)
	if !ok || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify %s: exit ok %v, output:\n%s", unitFile, ok, out)
	}
	if out, ok := analyze(t, "verify", unitCopy(t, bin, "ProtectSystm=strict")); !strings.Contains(out, "ProtectSystm") {
		t.Errorf("verify of a unit with a misspelt key: ok %v, output %q: the check cannot fail", ok, out)
	}
	out, ok = analyze(t, "security", "--offline=true", "--threshold=20", unit)
	score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(out)
	if !ok || score == nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 or unreadable:\n%s", out)
	} else {
		t.Logf("systemd-analyze security --offline: exposure %s", score[1])
	}

	keys := unitKeys(t, unitFile)
	svc := keys["Service"]
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
		"Restart": "on-failure", "StateDirectory": "coordd", "StateDirectoryMode": "0700", "User": "coordd",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectHome": "yes", "MemoryDenyWriteExecute": "yes",
	} {
		if v := svc[k]; len(v) != 1 || v[0] != want {
			t.Errorf("[Service] %s=%v, want %q", k, v, want)
		}
	}
	if !slices.Contains(svc["SystemCallFilter"], "@system-service") {
		t.Errorf("SystemCallFilter=%v: want @system-service", svc["SystemCallFilter"])
	}
	if v := svc["LimitNOFILE"]; len(v) != 1 || v[0] == "" {
		t.Errorf("LimitNOFILE=%v", v)
	}
	start := svc["ExecStart"]
	if len(start) != 1 || !strings.Contains(start[0], "--config /etc/coordd/coordd.yaml") || !strings.Contains(start[0], "--data-dir /var/lib/coordd") {
		t.Errorf("ExecStart=%v: want --config /etc/coordd/coordd.yaml and the StateDirectory as --data-dir", start)
	}
	if v := svc["ExecReload"]; len(v) != 1 || !strings.Contains(v[0], "-HUP") {
		t.Errorf("ExecReload=%v: want SIGHUP (coordd rereads its TLS files and ACL)", v)
	}
}

// scripts/release.sh, run in a fresh clone of this commit tagged v0.99.0
// (a clone: the Go toolchain stamps no version in a git worktree; a v0
// tag: v2 and up would need a /vN module path), for the host's
// architecture: static binaries in dist/coordd_v0.99.0_linux_<arch>/ that
// print v0.99.0 and the clone's commit, and a SHA256SUMS that matches
// them. A dirty work tree (a changed or an untracked file) is refused.
func TestReleaseScript(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	top, err := exec.Command("git", "-C", repositoryRoot, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "coordd")
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", append([]string{"-C", clone, "-c", "user.name=release test", "-c", "user.email=test@example.com"}, args...)...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "clone", "-q", strings.TrimSpace(string(top)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The script and .gitignore as they are in this work tree, committed.
	for _, f := range []string{"scripts/release.sh", ".gitignore"} {
		b, err := os.ReadFile(filepath.Join(repositoryRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clone, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "scripts/release.sh", ".gitignore")
	if git("status", "--porcelain", "--untracked-files=no") != "" {
		git("commit", "-q", "-m", "release test: the work tree's release.sh")
	}
	git("tag", "v0.99.0")
	rev := git("rev-parse", "HEAD")

	dist := filepath.Join(t.TempDir(), "dist")
	run := func() (string, error) {
		c := exec.Command("bash", "scripts/release.sh")
		c.Dir = clone
		c.Env = append(os.Environ(), "COORDD_RELEASE_PLATFORMS=linux/"+runtime.GOARCH, "COORDD_RELEASE_DIST="+dist)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	// A dirty tree first: refused before anything is built.
	readme := filepath.Join(clone, "README.md")
	orig, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(readme, append(orig, "\nlocal change\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "uncommitted changes") {
		t.Errorf("release.sh on a dirty tree: %v\n%s", err, out)
	}
	if err := os.WriteFile(readme, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	// An untracked file too: the toolchain would stamp the build modified.
	stray := filepath.Join(clone, "stray.txt")
	if err := os.WriteFile(stray, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "untracked files") {
		t.Errorf("release.sh with an untracked file: %v\n%s", err, out)
	}
	if err := os.Remove(stray); err != nil {
		t.Fatal(err)
	}

	out, err := run()
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	t.Logf("release.sh:\n%s", out)
	dir := "coordd_v0.99.0_linux_" + runtime.GOARCH
	for _, bin := range []string{"coordd", "coordctl"} {
		checkStatic(t, filepath.Join(dist, dir, bin), runtime.GOARCH)
	}
	for bin, args := range map[string][]string{"coordd": {"--version"}, "coordctl": {"version"}} {
		b, err := exec.Command(filepath.Join(dist, dir, bin), args...).CombinedOutput()
		v := string(b)
		if err != nil || !strings.Contains(v, "v0.99.0") || !strings.Contains(v, rev[:12]) || strings.Contains(v, "modified") {
			t.Errorf("%s %v: %v: %q; want v0.99.0 and commit %s, not modified", bin, args, err, v, rev[:12])
		}
	}
	// SHA256SUMS names both binaries, with their hashes.
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != 2 {
		t.Fatalf("SHA256SUMS: %q", sums)
	}
	for _, l := range lines {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", l)
		}
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != sum || !strings.HasPrefix(name, dir+"/") {
			t.Errorf("SHA256SUMS: %s %s does not match the file", sum, name)
		}
	}
}
