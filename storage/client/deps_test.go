package client

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The client is embedded in applications, Beam workers and MapReduce
// workers: it must not link the storage engine (SSTables, memtables, the
// commit log, the object stores) nor the libraries only the engine needs.
// The values it shares with the engine live in storage/tabletdesc, the
// METADATA codec in storage/meta; both are light.

// engine is the storage engine and the control plane: packages (exact
// import paths) that only servers link. Subpackages holding wire types
// only, such as storage/tabletserver/tabletpb or storage/cluster/clusterpb,
// are not in it.
var engine = []string{
	"github.com/tabuladb/tabula/storage/cluster",
	"github.com/tabuladb/tabula/storage/commitlog",
	"github.com/tabuladb/tabula/storage/crashtest",
	"github.com/tabuladb/tabula/storage/gateway",
	"github.com/tabuladb/tabula/storage/master",
	"github.com/tabuladb/tabula/storage/memtable",
	"github.com/tabuladb/tabula/storage/sstable",
	"github.com/tabuladb/tabula/storage/tablet",
	"github.com/tabuladb/tabula/storage/tabletserver",
}

// dependencyRule says which packages must not link what.
type dependencyRule struct {
	name string
	// patterns are go list patterns, relative to the module root.
	patterns []string
	// packages are forbidden import paths (exact); modules are forbidden
	// path prefixes (a module and its packages).
	packages, modules []string
}

var dependencyRules = []dependencyRule{{
	// The client, the METADATA codec and the shared value types link
	// neither the engine nor the object stores, the lock service or the
	// filter engine, nor the libraries only those need: the S3 client,
	// the compression codecs, the bloom filters, the Consul client.
	name:     "client",
	patterns: []string{"./storage/client", "./storage/meta", "./storage/tabletdesc"},
	packages: append([]string{
		"github.com/tabuladb/tabula/storage/blob",
		"github.com/tabuladb/tabula/storage/coord",
		"github.com/tabuladb/tabula/storage/filter",
	}, engine...),
	modules: []string{
		"github.com/minio/minio-go",
		"github.com/klauspost/compress",
		"github.com/bits-and-blooms/bloom",
		"github.com/greatroar/blobloom",
		"github.com/hashicorp/consul",
	},
}, {
	// MapReduce embeds the client: its workers reach tablets through it,
	// never through the engine. (They may use the object stores and the
	// lock service, for their files and their registration.)
	name:     "mapreduce",
	patterns: []string{"./mapreduce/..."},
	packages: engine,
}, {
	// Beam's IO and pipelines run in SDK workers: they reach tablets
	// through the client only.
	name:     "beam",
	patterns: []string{"./beamio/...", "./pipelines/..."},
	packages: engine,
}, {
	// The tablet server is below what assembles it: the gateway in front
	// of it (which routes through the client), the master, the cluster's
	// roles. It finds no tablet elsewhere by itself.
	name:     "tabletserver",
	patterns: []string{"./storage/tabletserver/..."},
	packages: []string{
		"github.com/tabuladb/tabula/storage/client",
		"github.com/tabuladb/tabula/storage/cluster",
		"github.com/tabuladb/tabula/storage/gateway",
		"github.com/tabuladb/tabula/storage/master",
	},
}}

// TestDependenciesStayLight runs `go list -deps` over each rule's packages
// and fails on any forbidden dependency, naming a chain of imports that
// pulls it in.
func TestDependenciesStayLight(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	for _, rule := range dependencyRules {
		roots := goList(t, dir, append([]string{"-f", "{{.ImportPath}}"}, rule.patterns...))
		imports := make(map[string][]string)
		var deps []string
		for _, line := range goList(t, dir, append([]string{"-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, rule.patterns...)) {
			f := strings.Fields(line)
			deps = append(deps, f[0])
			imports[f[0]] = f[1:]
		}
		if len(deps) <= len(roots) {
			t.Fatalf("%s: go list -deps %v listed only %d packages", rule.name, rule.patterns, len(deps))
		}
		for _, d := range deps {
			if forbidden(d, rule) {
				t.Errorf("%s: %s is forbidden: %s", rule.name, d, strings.Join(importChain(imports, roots, d), " → "))
			}
		}
	}
}

// goList runs `go list args...` in dir and returns its output lines. A
// pattern matching no package is an error of the go command.
func goList(t *testing.T, dir string, args []string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %v in %s: %v\n%s", args, dir, err, ee.Stderr)
		}
		t.Fatalf("go list %v in %s: %v", args, dir, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("go list %v in %s listed nothing", args, dir)
	}
	return lines
}

func forbidden(pkg string, rule dependencyRule) bool {
	if slices.Contains(rule.packages, pkg) {
		return true
	}
	for _, m := range rule.modules {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			return true
		}
	}
	return false
}

// importChain returns a shortest chain of imports from one of roots to
// pkg (breadth first over the import graph).
func importChain(imports map[string][]string, roots []string, pkg string) []string {
	prev := make(map[string]string)
	for _, r := range roots {
		prev[r] = ""
	}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{"…", pkg}
}

func TestForbidden(t *testing.T) {
	client := dependencyRules[0]
	for pkg, want := range map[string]bool{
		"github.com/tabuladb/tabula/storage/tablet":                true,
		"github.com/tabuladb/tabula/storage/blob":                  true,
		"github.com/tabuladb/tabula/storage/tabletdesc":            false,
		"github.com/tabuladb/tabula/storage/tabletserver/tabletpb": false,
		"github.com/tabuladb/tabula/storage/tabletserver":          true,
		"github.com/tabuladb/tabula/storage/cluster/clusterpb":     false,
		"github.com/klauspost/compress/zstd":                       true,
		"github.com/klauspost/compressor":                          false,
		"github.com/minio/minio-go/v7":                             true,
		"github.com/bits-and-blooms/bloom/v3":                      true,
	} {
		if got := forbidden(pkg, client); got != want {
			t.Errorf("forbidden(%q) = %v, want %v", pkg, got, want)
		}
	}
	chain := importChain(map[string][]string{"a": {"b", "c"}, "b": {"d"}, "c": {"d", "e"}, "e": {"f"}}, []string{"a"}, "f")
	if strings.Join(chain, " ") != "a c e f" {
		t.Errorf("importChain = %v", chain)
	}
}
