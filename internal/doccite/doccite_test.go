package doccite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsCiteWhatExists: every doc of the repository cites only tests,
// functions, members, flags and files that exist.
func TestDocsCiteWhatExists(t *testing.T) {
	root, err := filepath.Abs("../..") // the package's directory is internal/doccite
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	ix, err := Build(root)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d docs under %s: %v", len(docs), root, docs)
	}
	problems, err := ix.Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckFindsEachKindOfStaleCitation: a small tree whose doc cites one
// existing and one missing name of each kind; only the missing ones are
// reported.
func TestCheckFindsEachKindOfStaleCitation(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("store/store.go", `package store

type Store struct{ Clock int }

func (s *Store) Apply() {}

func Open(dir string) { readOnLeader(flag("--data-dir")) }

func readOnLeader(string) {}

func flag(s string) string { return s }
`)
	write("store/store_test.go", "package store\n\nimport \"testing\"\n\nfunc TestOpen(t *testing.T) {}\n")
	write("scripts/run.sh", "#!/bin/sh\nexec store --log-level info\n")
	write("sdk/ts/src/lease.ts", "export class Lease { outcomeUnknown = false; held(): boolean { return true; } }\n")
	write("docs/x.md", strings.Join([]string{
		"TestOpen and TestGone.",                            // 1: TestGone
		"`store.Open` and `store.Close()`.",                 // 2: store.Close
		"`Store.Apply()`, `Store.Clock`, `Store.Revert()`",  // 3: Store.Revert
		"`readOnLeader` then `jobsRead`.",                   // 4: jobsRead
		"`store/store.go` and `store/gone.go`.",             // 5: store/gone.go
		"[store](../store/store.go), [gone](../gone.md)",    // 6: ../gone.md
		"`store --data-dir d --log-level x --no-such`",      // 7: --no-such
		"`errors.Is` and `s.Apply()` and `s.Vanished()`",    // 8: Vanished
		"see store/store.go and docs/gone.md in prose",      // 9: docs/gone.md
		"`outcomeUnknown` and `e.outcomeUnknown`, `tsGone`", // 10: tsGone (TypeScript identifiers count)
	}, "\n")+"\n")
	ix, err := Build(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := ix.Check(root, []string{"docs/x.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{1: "TestGone", 2: "store.Close()", 3: "Store.Revert()", 4: "jobsRead",
		5: "store/gone.go", 6: "../gone.md", 7: "--no-such", 8: "s.Vanished()", 9: "docs/gone.md", 10: "tsGone"}
	got := map[int]string{}
	for _, p := range problems {
		if got[p.Line] != "" {
			t.Errorf("line %d: a second problem: %v", p.Line, p)
		}
		got[p.Line] = p.Cite
	}
	for line, cite := range want {
		if got[line] != cite {
			t.Errorf("line %d: reported %q, want %q", line, got[line], cite)
		}
	}
	for line := range got {
		if want[line] == "" {
			t.Errorf("line %d: unexpected problem %q", line, got[line])
		}
	}
}
