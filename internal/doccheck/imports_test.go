package doccheck

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the import path prefix of the repository's packages.
const module = "github.com/tabuladb/tabula/"

// importRow matches a row of docs/architecture.md's import table:
// | `package` | `import`, `import` | (or — for none).
var importRow = regexp.MustCompile("^\\| `([^`]+)` \\| (.*) \\|$")

// leftOut reports whether the import table leaves pkg out, as the document
// says it does: the generated *pb packages (but
// storage/tabletserver/tabletpb, which holds a hand-written codec), the
// conformance suites and the test helpers.
func leftOut(pkg string) bool {
	switch pkg {
	case "storage/tabletserver/tabletpb":
		return false
	case "storage/blob/blobtest", "storage/coord/coordtest", "internal/devtest", "deploy/testenv":
		return true
	}
	return strings.HasSuffix(pkg, "pb")
}

// TestImportTableIsTrue checks docs/architecture.md's table of every
// package's Tabula imports against `go list`: each package has its row,
// with exactly its imports.
func TestImportTableIsTrue(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	real := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if leftOut(pkg) {
			continue
		}
		imports := []string{}
		for _, imp := range fields[1:] {
			if p, ok := strings.CutPrefix(imp, module); ok && !leftOut(p) {
				imports = append(imports, p)
			}
		}
		slices.Sort(imports)
		real[pkg] = imports
	}
	if len(real) < 40 {
		t.Fatalf("go list gave only %d packages", len(real))
	}

	doc := readDoc(t, "docs/architecture.md")
	start := strings.Index(doc, "| package | imports (Tabula packages) |")
	if start < 0 {
		t.Fatal("docs/architecture.md has no import table")
	}
	documented := map[string][]string{}
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		m := importRow.FindStringSubmatch(line)
		if m == nil {
			break
		}
		imports := []string{}
		if m[2] != "—" {
			for _, imp := range strings.Split(m[2], ",") {
				imports = append(imports, strings.Trim(strings.TrimSpace(imp), "`"))
			}
		}
		slices.Sort(imports)
		documented[m[1]] = imports
	}
	for pkg, imports := range real {
		doc, ok := documented[pkg]
		switch {
		case !ok:
			t.Errorf("package %s has no row in docs/architecture.md's import table (it imports %v)", pkg, imports)
		case !slices.Equal(doc, imports):
			t.Errorf("package %s: the table says it imports %v, go list says %v", pkg, doc, imports)
		}
	}
	for pkg := range documented {
		if _, ok := real[pkg]; !ok {
			t.Errorf("docs/architecture.md's import table lists %s, which is not a package (or is one the table leaves out)", pkg)
		}
	}
}
