// Package doccite checks that the project's prose cites only what exists:
// every test, function, type member, flag and file that README.md, docs/,
// the DESIGN.md files and the other READMEs name must be in the tree. Its
// test runs the check on the repository; a doc that still names a test or
// a function after it was renamed fails it.
//
// What counts as a citation (in a backtick span unless said otherwise):
//   - a test, fuzz target or benchmark name anywhere in the text
//     (TestX, FuzzX, BenchmarkX): a func of that name in a _test.go file;
//   - pkg.Name or pkg.Name() where pkg is one of the module's package
//     names: a top-level declaration of that package; Type.Member where
//     Type is a type the module declares: a method or field of a type of
//     that name; other x.Name (a variable, like j.Token()): Name is an
//     identifier somewhere in the module's Go code; x.Name where x is not
//     ours (errors.Is, http.Handler) is not checked;
//   - a bare lowerCamel identifier (readOnLeader): an identifier somewhere
//     in the module's Go code or TypeScript sources (sdk/typescript);
//   - a path (api/queue.go, docs/jobs.md, a file name with one of the
//     module's extensions) or a Markdown link target: a file or directory,
//     relative to the repository or to the doc;
//   - a flag (--data-dir): a string literal of the module's Go code or a
//     word of its scripts, or one of externalFlags.
package doccite

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Index is what the module's Go code and scripts declare.
type Index struct {
	tests    map[string]bool            // Test*, Fuzz*, Benchmark*, Example* funcs in _test.go files
	pkgs     map[string]map[string]bool // package name → top-level declarations and its types' members
	members  map[string]map[string]bool // type name → methods and fields
	idents   map[string]bool            // every identifier in any Go file
	literals map[string]bool            // every string literal's value in any Go file
	words    map[string]bool            // every --flag word of the scripts
}

// skipDir: directories whose content is not the project's own (third_party
// holds upstream code, e.g. the hashicorp/raft fork: its identifiers must not
// resolve citations of the real package, and its docs are upstream's).
func skipDir(name string) bool {
	return name == ".git" || name == "node_modules" || name == "testdata" || name == "bin" || name == "third_party"
}

// Build indexes the Go files and scripts under root.
func Build(root string) (*Index, error) {
	ix := &Index{tests: map[string]bool{}, pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{},
		idents: map[string]bool{}, literals: map[string]bool{}, words: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skipDir(d.Name()) || strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go") && filepath.Base(filepath.Dir(path)) != "doccite": // not this check's fixtures
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ix.addFile(f, strings.HasSuffix(path, "_test.go"))
		case strings.HasSuffix(path, ".ts"): // the TypeScript SDK (sdk/typescript): its identifiers count as the module's
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, w := range tsIdent.FindAllString(string(b), -1) {
				ix.idents[w] = true
			}
		case strings.HasSuffix(path, ".sh") || strings.HasPrefix(filepath.Base(filepath.Dir(path)), ".ci"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, w := range flagWord.FindAllString(string(b), -1) {
				ix.words[w] = true
			}
		}
		return nil
	})
	return ix, err
}

func (ix *Index) addFile(f *ast.File, test bool) {
	pkg := ix.pkgs[f.Name.Name]
	if pkg == nil {
		pkg = map[string]bool{}
		ix.pkgs[f.Name.Name] = pkg
	}
	member := func(typ, name string) {
		if name != "" {
			pkg[name] = true
		}
		if ix.members[typ] == nil {
			ix.members[typ] = map[string]bool{}
		}
		ix.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				pkg[d.Name.Name] = true
				if test && testFunc.MatchString(d.Name.Name) {
					ix.tests[d.Name.Name] = true
				}
			} else if len(d.Recv.List) == 1 {
				member(recvType(d.Recv.List[0].Type), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					pkg[s.Name.Name] = true
					member(s.Name.Name, "") // the type exists
					switch t := s.Type.(type) {
					case *ast.StructType:
						for _, fl := range t.Fields.List {
							for _, n := range fl.Names {
								member(s.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 { // embedded: its name
								member(s.Name.Name, recvType(fl.Type))
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							for _, n := range m.Names {
								member(s.Name.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						pkg[n.Name] = true
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			ix.idents[n.Name] = true
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				if v, err := strconv.Unquote(n.Value); err == nil {
					ix.literals[v] = true
					for _, w := range flagWord.FindAllString(v, -1) {
						ix.words[w] = true
					}
				}
			}
		}
		return true
	})
}

// recvType names a receiver or embedded type: T, *T, T[X], pkg.T → T.
func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

var (
	testFunc        = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)([A-Z_]|$)`)
	testCite        = regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*`)
	codeSpan        = regexp.MustCompile("`([^`\n]+)`")
	linkTarget      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	pkgPathSelector = regexp.MustCompile(`^([a-z0-9_]+(?:/[a-z0-9_]+)+)\.([A-Z][A-Za-z0-9_]*)(\(\))?$`)
	plainPath       = regexp.MustCompile(`(?:^|[\s(\[])([A-Za-z0-9_-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_-]+\.(?:go|md|sh|proto|yaml|yml))\b`)
	versionPart     = regexp.MustCompile(`^v[0-9]+(alpha|beta)?[0-9]*$`)
	selector        = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(\(\))?$`)
	tsIdent         = regexp.MustCompile(`[A-Za-z_$][A-Za-z0-9_$]*`)
	lowerCamel      = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*(\(\))?$`)
	flagWord        = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)
	pathLike        = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.*-]+)*/?$`)
	fileExts        = []string{".go", ".md", ".binpb", ".golden", ".sh", ".proto", ".yaml", ".yml", ".json", ".mod", ".js", ".ts", ".py", ".html", ".css"}
	tidyOfCites     = strings.NewReplacer("(", "", ")", "", ",", "", ";", "")
)

// externalFlags are flags of other programs the docs show (curl, go, git).
var externalFlags = map[string]bool{"--cacert": true, "--cert": true, "--key": true, "--help": true,
	"--data": true, "--header": true, "--request": true, "--fail": true, "--silent": true, "--show-error": true}

// Problem is one citation of something that does not exist.
type Problem struct {
	Doc  string // relative to the root
	Line int
	Cite string
	Why  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.Doc, p.Line, p.Cite, p.Why) }

// Docs lists the prose the check reads: README.md files, docs/ and every
// DESIGN.md, relative to root.
func Docs(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skipDir(d.Name()) || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if d.Name() == "README.md" || d.Name() == "DESIGN.md" || strings.HasPrefix(rel, "docs/") && strings.HasSuffix(rel, ".md") {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Check reads each doc and returns the citations the index does not hold.
func (ix *Index) Check(root string, docs []string) ([]Problem, error) {
	var out []Problem
	for _, doc := range docs {
		f, err := os.Open(filepath.Join(root, doc))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for line := 1; sc.Scan(); line++ {
			for _, why := range ix.checkLine(root, doc, sc.Text()) {
				out = append(out, Problem{Doc: doc, Line: line, Cite: why[0], Why: why[1]})
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (ix *Index) checkLine(root, doc, text string) (bad [][2]string) {
	report := func(cite, why string) { bad = append(bad, [2]string{cite, why}) }
	for _, t := range testCite.FindAllString(text, -1) {
		if !ix.tests[t] {
			report(t, "no test, fuzz target or benchmark of this name")
		}
	}
	for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
		if target := m[1]; !strings.Contains(target, "://") && !strings.HasPrefix(target, "#") && !strings.HasPrefix(target, "mailto:") {
			if !exists(root, doc, strings.SplitN(target, "#", 2)[0]) {
				report(target, "the link's target does not exist")
			}
		}
	}
	for _, m := range plainPath.FindAllStringSubmatch(codeSpan.ReplaceAllString(text, ""), -1) {
		p := m[1]
		if _, err := os.Stat(filepath.Join(root, strings.SplitN(p, "/", 2)[0])); err == nil && !exists(root, doc, p) {
			report(p, "no such file or directory")
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		span := strings.TrimSpace(m[1])
		for _, w := range flagWord.FindAllString(span, -1) {
			if strings.HasPrefix(span, w) || strings.Contains(span, " "+w) {
				if !ix.words[w] && !ix.literals[strings.TrimPrefix(w, "--")] && !externalFlags[w] {
					report(w, "no program or script of the module has this flag")
				}
			}
		}
		if why := ix.checkSpan(root, doc, span); why != "" {
			report(span, why)
		}
	}
	return bad
}

func (ix *Index) checkSpan(root, doc, span string) string {
	if m := pkgPathSelector.FindStringSubmatch(span); m != nil { // internal/tlsutil.Reloader
		if !exists(root, doc, m[1]) {
			return "no such package directory"
		}
		if pkg := ix.pkgs[filepath.Base(m[1])]; !pkg[m[2]] {
			return fmt.Sprintf("package %s declares no %s", m[1], m[2])
		}
		return ""
	}
	if m := selector.FindStringSubmatch(span); m != nil && !hasFileExt(span) {
		x, name := m[1], m[2]
		if ix.literals[span] {
			return ""
		}
		names := []string{name, goName(name)} // a proto field (Command.now_ms, Lease.value) also by its Go name
		if versionPart.MatchString(name) {    // coord.v1: a proto package
			return ""
		}
		if pkg, ok := ix.pkgs[x]; ok && !isType(ix, x) {
			if !pkg[names[0]] && !pkg[names[1]] {
				return fmt.Sprintf("package %s declares no %s", x, name)
			}
			return ""
		}
		if _, ok := ix.members[x]; ok && !isLower(x) {
			if !ix.hasMember(x, names[0]) && !ix.hasMember(x, names[1]) {
				return fmt.Sprintf("no type %s in the module has a method or field %s", x, name)
			}
			return ""
		}
		if isLower(x) && !externalPackages[x] && !ix.idents[names[0]] && !ix.idents[names[1]] {
			return fmt.Sprintf("%s is not an identifier of the module", name)
		}
		return ""
	}
	if lowerCamel.MatchString(span) && !hasFileExt(span) {
		if name := strings.TrimSuffix(span, "()"); !ix.idents[name] && !ix.literals[name] {
			return fmt.Sprintf("%s is not an identifier of the module", name)
		}
		return ""
	}
	if p := tidyOfCites.Replace(span); pathLike.MatchString(p) && ix.isPath(root, p) && !exists(root, doc, p) {
		return "no such file or directory"
	}
	return ""
}

// externalPackages: lower-case package names the docs use that are not
// the module's (a selector on them is not checked).
var externalPackages = map[string]bool{"errors": true, "context": true, "http": true, "grpc": true, "raft": true,
	"time": true, "slog": true, "proto": true, "concurrency": true, "os": true, "io": true, "sync": true,
	"status": true, "codes": true, "runtime": true, "net": true, "tls": true, "x509": true, "fmt": true,
	"json": true, "strings": true, "bytes": true, "testing": true, "signal": true, "syscall": true, "porcupine": true,
	"raftwal": true, "raftboltdb": true, "bbolt": true, "prometheus": true, "promauto": true, "hclog": true,
	"cobra": true, "pflag": true, "btree": true, "clientv3": true, "exec": true, "filepath": true, "atomic": true}

// hasMember: a method or field of type x, or of the gRPC server, client,
// request or response type of that name (Cluster.Members is a call of
// coord.v1.Cluster).
func (ix *Index) hasMember(x, name string) bool {
	for _, suffix := range []string{"", "Server", "Client", "Request", "Response"} {
		if ix.members[x+suffix][name] {
			return true
		}
	}
	return false
}

// goName is protoc-gen-go's name of a field: now_ms → NowMs.
func goName(field string) string {
	var b strings.Builder
	for _, part := range strings.Split(field, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

func hasFileExt(p string) bool {
	for _, ext := range fileExts {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

func isLower(s string) bool { return s != "" && s[0] >= 'a' && s[0] <= 'z' }

// isType: x names both a package and a type (rare); the type wins.
func isType(ix *Index, x string) bool { _, ok := ix.members[x]; return ok && !isLower(x) }

// isPath: does p look like a path into the repository (it starts with one
// of the root's entries, or ends in one of the module's file extensions)?
func (ix *Index) isPath(root, p string) bool {
	if strings.HasPrefix(p, ".") && !strings.HasPrefix(p, "./") && !strings.HasPrefix(p, "../") {
		return false
	}
	first := strings.SplitN(strings.TrimPrefix(p, "./"), "/", 2)[0]
	if strings.Contains(p, "/") {
		if _, err := os.Stat(filepath.Join(root, first)); err == nil {
			return true
		}
	}
	return hasFileExt(p)
}

// exists: a file or directory (or a glob with matches) relative to the
// doc's directory, the root, or, for a bare file name, anywhere in the tree.
func exists(root, doc, p string) bool {
	if p == "" {
		return true
	}
	for _, base := range []string{filepath.Dir(filepath.Join(root, doc)), root} {
		if m, _ := filepath.Glob(filepath.Join(base, p)); len(m) > 0 {
			return true
		}
	}
	if strings.Contains(p, "/") {
		return false
	}
	found := false
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipAll
		}
		if d.IsDir() && path != root && (skipDir(d.Name()) || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		found = d.Name() == p
		return nil
	})
	return found
}
