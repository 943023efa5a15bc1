package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// documents are the files whose references are checked.
var documents = []string{"docs/architecture.md", "docs/api.md", "README.md", "BENCHMARKS.md"}

// namedDecl matches `Name` (`path.go`): a declaration and the file holding
// it, the form docs/architecture.md uses for its paths through the code.
var namedDecl = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)(?:\\(\\))?` \\(`([^`]+\\.go)`\\)")

// repoPath matches a backticked path that starts at one of the
// repository's top-level directories.
var repoPath = regexp.MustCompile("`((?:storage|mapreduce|beamio|scripts|cmd|pipelines|deploy|rowfile|internal|security|docs)/[A-Za-z0-9_./-]*)`")

// TestArchitectureNamesExist checks every `Name` (`file`) pair: the file
// exists and declares Name — a function, type, variable or constant, or
// for Type.Method a method of that type (or Type is the package's name
// and Method a top-level declaration).
func TestArchitectureNamesExist(t *testing.T) {
	text := readDoc(t, "docs/architecture.md")
	pairs := namedDecl.FindAllStringSubmatch(text, -1)
	if len(pairs) < 100 {
		t.Fatalf("found only %d `Name` (`file`) pairs in docs/architecture.md; the pattern no longer matches the document's form", len(pairs))
	}
	decls := map[string]map[string]bool{}
	seen := map[[2]string]bool{}
	for _, p := range pairs {
		name, file := p[1], p[2]
		if seen[[2]string{name, file}] {
			continue
		}
		seen[[2]string{name, file}] = true
		names, ok := decls[file]
		if !ok {
			var err error
			names, err = declaredNames(filepath.Join(repoRoot, file))
			if err != nil {
				t.Errorf("docs/architecture.md names `%s` in `%s`: %v", name, file, err)
				decls[file] = nil
				continue
			}
			decls[file] = names
		}
		if names == nil {
			continue
		}
		if !names[name] {
			t.Errorf("docs/architecture.md names `%s` (`%s`), but the file declares no such thing", name, file)
		}
	}
}

// TestDocumentPathsExist checks that every repository path the documents
// name in backticks exists (a glob pattern must match something).
func TestDocumentPathsExist(t *testing.T) {
	for _, doc := range documents {
		text := readDoc(t, doc)
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimSuffix(m[1], ".")
			if strings.ContainsAny(p, "*?[") {
				if matches, _ := filepath.Glob(filepath.Join(repoRoot, p)); len(matches) == 0 {
					t.Errorf("%s names `%s`, which matches nothing", doc, p)
				}
				continue
			}
			if strings.Contains(p, "<") || strings.HasSuffix(p, "/...") {
				continue // a template (`sortedlogs/<server>/...`) or a package pattern
			}
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s names `%s`, which does not exist", doc, p)
			}
		}
	}
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// declaredNames returns the names a Go file declares: top-level functions,
// types, variables and constants as "Name" and "pkg.Name", methods as
// "Type.Method", and struct fields and interface methods as "Type.Field".
func declaredNames(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	pkg := f.Name.Name
	names := map[string]bool{}
	add := func(n string) {
		names[n] = true
		names[pkg+"."+n] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				add(d.Name.Name)
				continue
			}
			names[receiverType(d.Recv.List[0].Type)+"."+d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					add(s.Name.Name)
					addMembers(names, s.Name.Name, s.Type)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						add(n.Name)
					}
				}
			}
		}
	}
	return names, nil
}

func addMembers(names map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	}
	if fields == nil {
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			names[typ+"."+n.Name] = true
		}
	}
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
