package client

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The client is embedded in applications, Beam workers and MapReduce
// workers: it must not link the storage engine (SSTables, memtables, the
// commit log, the object stores) nor the libraries only the engine needs.
// Shared value types live in storage/tabletdesc, METADATA's codec in
// storage/meta; both are light.

// forbiddenPackages are import paths (exact) that the client must not
// depend on. Subpackages holding wire types only, such as
// storage/tabletserver/tabletpb or storage/cluster/clusterpb, are allowed.
var forbiddenPackages = []string{
	"github.com/tabuladb/tabula/storage/blob",
	"github.com/tabuladb/tabula/storage/cluster",
	"github.com/tabuladb/tabula/storage/commitlog",
	"github.com/tabuladb/tabula/storage/coord",
	"github.com/tabuladb/tabula/storage/crashtest",
	"github.com/tabuladb/tabula/storage/filter",
	"github.com/tabuladb/tabula/storage/master",
	"github.com/tabuladb/tabula/storage/memtable",
	"github.com/tabuladb/tabula/storage/sstable",
	"github.com/tabuladb/tabula/storage/tablet",
	"github.com/tabuladb/tabula/storage/tabletserver",
}

// forbiddenModules are path prefixes of libraries the engine uses: the S3
// client, the compression codecs, the bloom filter, the Consul client.
var forbiddenModules = []string{
	"github.com/minio/minio-go",
	"github.com/klauspost/compress",
	"github.com/bits-and-blooms/bloom",
	"github.com/hashicorp/consul",
}

// lightPackages are the packages (relative to the module root) that must
// stay light.
var lightPackages = []string{"./storage/client", "./storage/meta", "./storage/tabletdesc"}

// TestDependenciesStayLight runs `go list -deps` over the light packages
// and fails on any forbidden dependency, naming the chain of imports that
// pulls it in.
func TestDependenciesStayLight(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	for _, pkg := range lightPackages {
		cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s in %s: %v", pkg, dir, err)
		}
		imports := make(map[string][]string)
		var deps []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			deps = append(deps, f[0])
			imports[f[0]] = f[1:]
		}
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(deps), out)
		}
		self := "github.com/tabuladb/tabula/" + filepath.ToSlash(strings.TrimPrefix(pkg, "./"))
		for _, d := range deps {
			if forbidden(d) {
				t.Errorf("%s depends on %s: %s", pkg, d, strings.Join(importChain(imports, self, d), " → "))
			}
		}
	}
}

func forbidden(pkg string) bool {
	if slices.Contains(forbiddenPackages, pkg) {
		return true
	}
	for _, m := range forbiddenModules {
		if pkg == m || strings.HasPrefix(pkg, m+"/") {
			return true
		}
	}
	return false
}

// importChain returns a shortest chain of imports from one package to
// another (breadth first over the import graph).
func importChain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
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
	return []string{from, "…", to}
}

func TestForbidden(t *testing.T) {
	for pkg, want := range map[string]bool{
		"github.com/tabuladb/tabula/storage/tablet":                true,
		"github.com/tabuladb/tabula/storage/tabletdesc":            false,
		"github.com/tabuladb/tabula/storage/tabletserver/tabletpb": false,
		"github.com/tabuladb/tabula/storage/tabletserver":          true,
		"github.com/klauspost/compress/zstd":                       true,
		"github.com/klauspost/compressor":                          false,
		"github.com/minio/minio-go/v7":                             true,
		"github.com/bits-and-blooms/bloom/v3":                      true,
		"github.com/tabuladb/tabula/storage/cluster/clusterpb":     false,
	} {
		if got := forbidden(pkg); got != want {
			t.Errorf("forbidden(%q) = %v, want %v", pkg, got, want)
		}
	}
}
