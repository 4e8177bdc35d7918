package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/testcluster"
)

// A TypeScript client generated from the node's OpenAPI document by a real
// generator (openapi-typescript, with openapi-fetch; test/openapi, whose
// packages scripts/test.sh installs) compiles (tsc, strict) and runs
// against a node: it acquires a lease, submits a job (args as JSON), fetches and
// completes it, and reads a refusal's error body. Without node and npm it
// skips, except in CI (CI set), where it fails.
func TestOpenAPIClient(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	src := nodePackages(t, "../test/openapi", "the OpenAPI client test")
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Generate and compile in a directory of its own, with the packages.
	dir := t.TempDir()
	for _, f := range []string{"check.ts", "tsconfig.json", "package.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(src, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	doc, err := filepath.Abs("../api/openapi/coordd.json")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(src, "node_modules", ".bin")
	run(dir, nil, filepath.Join(bin, "openapi-typescript"), doc, "-o", "gen/coordd.d.ts")
	run(dir, nil, filepath.Join(bin, "tsc"), "-p", ".")

	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	out := run(dir, []string{"COORDD_HTTP=http://" + c.WaitLeader().API.HTTPAddr()}, "node", "out/check.js")
	var got struct {
		Acquired   bool   `json:"acquired"`
		Generation string `json:"generation"`
		Job        string `json:"job"`
		Fetched    string `json:"fetched"`
		Args       any    `json:"args"`
		Completed  bool   `json:"completed"`
		Refused    struct {
			Status int    `json:"status"`
			Reason string `json:"reason"`
		} `json:"refused"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		t.Fatalf("check.js printed %q: %v", out, err)
	}
	if !got.Acquired || got.Generation != "1" || got.Job == "" || got.Fetched != got.Job || !got.Completed ||
		!reflect.DeepEqual(got.Args, map[string]any{"invoice": 44.0}) ||
		got.Refused.Status != 409 || got.Refused.Reason != "STALE_TOKEN" {
		t.Fatalf("the generated client saw %+v", got)
	}
}

// nodePackages is the absolute path of dir (relative to this package),
// a Node package whose dependencies it installs as scripts/test.sh does
// (npm ci) when they are missing. Without node and npm the test skips,
// except in CI (CI set), where it fails: what says which.
func nodePackages(t *testing.T, dir, what string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (scripts/test.sh installs Debian's nodejs and npm as root); CI must run %s", tool, what)
			}
			t.Skipf("%s is not installed (scripts/test.sh installs Debian's nodejs and npm as root): skipping %s", tool, what)
		}
	}
	src, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "node_modules")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return src
}
