package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypedSeams: no `any` crosses from the API to the node. Every method
// of api.Node, and of the interfaces it embeds, takes and returns typed
// values, so a command the API needs and the node lacks is a compile error
// at the seam, not a cast that fails at run time.
func TestTypedSeams(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}{{range .GoFiles}} {{.}}{{end}}", mod+"api").Output()
	if err != nil {
		t.Fatalf("go list %sapi: %v", mod, err)
	}
	fields := strings.Fields(string(out))
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range fields[1:] {
		f, err := parser.ParseFile(fset, filepath.Join(fields[0], name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, p := range untypedMethods(files, "Node") {
		t.Errorf("api.%s uses any: the API and the node meet on typed values (one typed method per command)", p)
	}
}

// TestTypedSeamsFindsAny: the check of TestTypedSeams finds `any` and
// `interface{}` wherever they hide in a method of the interface or of one
// it embeds, and an embedded interface it cannot see.
func TestTypedSeamsFindsAny(t *testing.T) {
	const src = `package api
type Node interface {
	Jobs
	fmt.Stringer
	Fine(ctx context.Context, any *fsmv1.Renew) (*fsm.LeaseResult, error)
}
type Body = any
type Jobs interface {
	Propose(ctx context.Context, body any) (any, error)
	Batch(bodies []interface{}) error
	Each(f func(b Body) error) error
	Wrapped(w Wrapper) error
}
type Wrapper struct{ Body map[string]any }
`
	f, err := parser.ParseFile(token.NewFileSet(), "node.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(untypedMethods([]*ast.File{f}, "Node"), "; ")
	want := "Jobs.Propose; Jobs.Batch; Jobs.Each; Jobs.Wrapped; Node embeds fmt.Stringer, declared outside the package"
	if got != want {
		t.Errorf("found %q, want %q", got, want)
	}
}

// untypedMethods lists the methods of the interface root (declared in
// files), and of the interfaces it embeds, whose parameters or results use
// any or interface{} — directly, inside a composite or func type, or
// through a type declared in files.
func untypedMethods(files []*ast.File, root string) []string {
	types := map[string]ast.Expr{}
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					types[ts.Name.Name] = ts.Type
				}
			}
		}
	}
	var untyped func(e ast.Expr, seen map[string]bool) bool
	untyped = func(e ast.Expr, seen map[string]bool) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field: // a parameter's or field's name is no type
				found = found || untyped(n.Type, seen)
				return false
			case *ast.SelectorExpr: // another package's type
				return false
			case *ast.InterfaceType:
				if len(n.Methods.List) == 0 {
					found = true
				}
			case *ast.Ident:
				if n.Name == "any" {
					found = true
				} else if decl, ok := types[n.Name]; ok && !seen[n.Name] {
					seen[n.Name] = true
					found = found || untyped(decl, seen)
				}
			}
			return !found
		})
		return found
	}
	var problems []string
	visited := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		if visited[name] {
			return
		}
		visited[name] = true
		it, ok := types[name].(*ast.InterfaceType)
		if !ok {
			problems = append(problems, name+" is not an interface declared in the package")
			return
		}
		for _, m := range it.Methods.List {
			if len(m.Names) == 0 { // embedded
				if id, ok := m.Type.(*ast.Ident); ok {
					walk(id.Name)
				} else {
					problems = append(problems, name+" embeds "+exprString(m.Type)+", declared outside the package")
				}
				continue
			}
			if untyped(m.Type, map[string]bool{}) {
				problems = append(problems, name+"."+m.Names[0].Name)
			}
		}
	}
	walk(root)
	return problems
}

func exprString(e ast.Expr) string {
	if s, ok := e.(*ast.SelectorExpr); ok {
		return exprString(s.X) + "." + s.Sel.Name
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}
