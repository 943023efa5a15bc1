//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cluster"
)

// The official Go client's own integration suite, run against tabula dev.
//
// The suite (the TestIntegration_* tests of cloud.google.com/go/bigtable,
// in package bigtable itself) chooses its environment in export_test.go:
// flags naming a production instance, or else an emulated environment that
// always starts the in-memory emulator (bttest) in-process — it has no
// setting for another address. So the test copies the module's source
// from the module cache (fetched through the Go module proxy when absent),
// patches NewEmulatedEnv to use the address in TABULA_SUITE_ADDR instead
// of starting bttest when that is set, builds the suite once, and runs it
// twice: against bttest (the variable unset) and against an in-process
// tabula dev --instance-agnostic. Every test and subtest the emulator
// passes must pass against Tabula, except those in suiteKnownFailures,
// each with its reason; a known failure that passes fails the test too, so
// the list stays true.
const (
	suiteModule  = "cloud.google.com/go/bigtable"
	suiteVersion = "v1.58.0"
)

// suiteSkipped are not run: they exercise the suite's own fake servers, not
// the environment's endpoint, so they say nothing about Tabula (and, timed
// against a fake under a shared machine's load, they are flaky).
const suiteSkipped = "^TestIntegration_SessionVRpc_"

// suiteKnownFailures are the tests the emulator passes and Tabula does
// not, with the reason. Keep it short and true: TestOfficialSuite fails
// when one of them passes.
var suiteKnownFailures = map[string]string{}

// suitePatch is the change to export_test.go: the emulated environment
// uses TABULA_SUITE_ADDR when set instead of starting bttest, and then has
// nothing to close.
var suitePatch = []struct{ old, new string }{
	{
		old: `	srv, err := bttest.NewServer("localhost:0", serverOptions...)
	if err != nil {
		return nil, err
	}
`,
		new: `	var srv *bttest.Server
	if addr := os.Getenv("TABULA_SUITE_ADDR"); addr != "" {
		srv = &bttest.Server{Addr: addr}
	} else {
		var err error
		srv, err = bttest.NewServer("localhost:0", serverOptions...)
		if err != nil {
			return nil, err
		}
	}
`,
	},
	{
		// The backup tests name a cluster; the emulated environment has
		// none. Tabula has one (any name is accepted).
		old: `	if config.Table == "" {
		config.Table = "mytable"
	}
`,
		new: `	if config.Table == "" {
		config.Table = "mytable"
	}
	if os.Getenv("TABULA_SUITE_ADDR") != "" && config.Cluster == "" {
		config.Cluster = "tabula"
	}
`,
	},
	{
		old: `func (e *EmulatedEnv) Close() {
	e.server.Close()`,
		new: `func (e *EmulatedEnv) Close() {
	if os.Getenv("TABULA_SUITE_ADDR") != "" {
		return
	}
	e.server.Close()`,
	},
}

func TestOfficialSuite(t *testing.T) {
	runOfficialSuite(t, func(ctx context.Context) string {
		d, err := cluster.StartDev(ctx, cluster.DevConfig{
			Dir: t.TempDir(), Addr: "127.0.0.1:0", InstanceAgnostic: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d.Addr()
	})
}

// TestOfficialSuiteCluster runs the suite against a local cluster (a
// master and two tablet servers on Consul and MinIO), through one tablet
// server's gateway.
func TestOfficialSuiteCluster(t *testing.T) {
	runOfficialSuite(t, func(ctx context.Context) string {
		c := newTestCluster(t, clusterOptions{masters: 1, servers: 2})
		return c.servers[0].addr
	})
}

// runOfficialSuite builds the suite, runs it against the emulator and
// against the server start returns the address of, and compares.
func runOfficialSuite(t *testing.T, start func(context.Context) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the official suite: %v", err)
	}
	src := suiteSource(t, ctx, goBin)
	dir := filepath.Join(t.TempDir(), "bigtable")
	copyTree(t, src, dir)
	patchSuite(t, filepath.Join(dir, "export_test.go"))

	bin := filepath.Join(t.TempDir(), "suite.test")
	began := time.Now()
	build := exec.CommandContext(ctx, goBin, "test", "-c", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the official suite: %v\n%s", err, out)
	}
	t.Logf("built the suite of %s@%s in %v", suiteModule, suiteVersion, time.Since(began).Round(time.Second))

	emu := runSuite(t, ctx, bin, dir, "")
	tab := runSuite(t, ctx, bin, dir, start(ctx))
	names := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range []map[string]string{emu, tab} {
			for n := range m {
				if !seen[n] {
					seen[n] = true
					if !yield(n) {
						return
					}
				}
			}
		}
	})
	count := map[string]int{}
	var tabulaOnly []string
	for _, n := range names {
		e, g := emu[n], tab[n]
		count["emulator "+e]++
		count["tabula "+g]++
		reason, known := suiteKnownFailures[n]
		switch {
		case e == "PASS" && g != "PASS" && !known:
			t.Errorf("%s: passes against the emulator, %s against Tabula", n, orMissing(g))
		case known && g == "PASS":
			t.Errorf("%s passes against Tabula now: remove it from suiteKnownFailures", n)
		case known:
			t.Logf("known failure %s (%s against Tabula): %s", n, orMissing(g), reason)
		case g == "PASS" && e != "PASS":
			tabulaOnly = append(tabulaOnly, n+" (emulator: "+orMissing(e)+")")
		}
	}
	for n := range suiteKnownFailures {
		if _, ok := emu[n]; !ok {
			t.Errorf("known failure %s is not in the suite any more", n)
		}
	}
	if count["tabula PASS"] == 0 {
		t.Errorf("no test passed against Tabula")
	}
	t.Logf("tests and subtests: %v", count)
	t.Logf("passing against Tabula, not against the emulator: %v", tabulaOnly)
	var skipped []string
	for _, n := range names {
		if tab[n] == "SKIP" && !strings.Contains(n, "/") {
			skipped = append(skipped, n)
		}
	}
	t.Logf("skipped by the suite against Tabula (as against the emulator, unless listed above): %v", skipped)
}

func orMissing(s string) string {
	if s == "" {
		return "missing"
	}
	return s
}

// suiteSource returns the module's directory in the module cache,
// downloading it through the Go module proxy if needed.
func suiteSource(t *testing.T, ctx context.Context, goBin string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", suiteModule+"@"+suiteVersion)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", suiteModule, suiteVersion, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download: %v %s (%s)", err, info.Error, out)
	}
	return info.Dir
}

// copyTree copies the regular files under src to dst, writable (the module
// cache is read-only).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !de.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying the suite: %v", err)
	}
}

// suiteEnabled are the suite's tests that skip themselves outside
// production ("emulator doesn't support ...") but whose features Tabula
// serves: with TABULA_SUITE_ADDR set they run (against bttest they still
// skip). Each skip message is patched wherever it occurs; count is how
// many times it must.
var suiteEnabled = []struct {
	skip  string
	count int
}{
	{`t.Skip("emulator doesn't support authorizedViews")`, 1},
	{`t.Skip("emulator doesn't support backups")`, 2},
	{`t.Skip("emulator doesn't support PingAndWarm")`, 1},
}

func patchSuite(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range suitePatch {
		if bytes.Count(b, []byte(p.old)) != 1 {
			t.Fatalf("%s does not hold the code the patch replaces (the suite changed):\n%s", path, p.old)
		}
		b = bytes.Replace(b, []byte(p.old), []byte(p.new), 1)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The enabled tests are in integration_test.go, which imports os.
	ipath := filepath.Join(filepath.Dir(path), "integration_test.go")
	ib, err := os.ReadFile(ipath)
	if err != nil {
		t.Fatal(err)
	}
	// The backup test closes the instance admin client it gets, which the
	// emulated environment leaves nil (other tests take nil to mean "no
	// instance admin API"); it uses it only to create instances, which it
	// does not here.
	const closeNil = "\tt.Cleanup(func() { iAdminClient.Close() })\n\n\tlist := func(cluster string)"
	if n := bytes.Count(ib, []byte(closeNil)); n != 1 {
		t.Fatalf("%s holds %d, not 1, of the backup test's cleanup (the suite changed)", ipath, n)
	}
	ib = bytes.Replace(ib, []byte(closeNil), []byte("\tt.Cleanup(func() {\n\t\tif iAdminClient != nil {\n\t\t\tiAdminClient.Close()\n\t\t}\n\t})\n\n\tlist := func(cluster string)"), 1)
	// Its cases across instances run when instanceToCreate is set, which
	// the emulated environment leaves at its default: they need the
	// instance admin API, which Tabula does not serve.
	const diffInstance = "\tif instanceToCreate != \"\" {\n\t\tdiffInstance, diffCluster, err := createRandomInstance(ctx, iAdminClient)"
	if n := bytes.Count(ib, []byte(diffInstance)); n != 1 {
		t.Fatalf("%s holds %d, not 1, of the backup test's instance cases (the suite changed)", ipath, n)
	}
	ib = bytes.Replace(ib, []byte(diffInstance), []byte("\tif instanceToCreate != \"\" && iAdminClient != nil {\n\t\tdiffInstance, diffCluster, err := createRandomInstance(ctx, iAdminClient)"), 1)
	for _, e := range suiteEnabled {
		old := "if !testEnv.Config().UseProd {\n\t\t" + e.skip
		if n := bytes.Count(ib, []byte(old)); n != e.count {
			t.Fatalf("%s holds %d, not %d, skips to enable (the suite changed):\n%s", ipath, n, e.count, old)
		}
		ib = bytes.ReplaceAll(ib, []byte(old), []byte(`if !testEnv.Config().UseProd && os.Getenv("TABULA_SUITE_ADDR") == "" {`+"\n\t\t"+e.skip))
	}
	if err := os.WriteFile(ipath, ib, 0o644); err != nil {
		t.Fatal(err)
	}
}

var suiteResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)

// runSuite runs the built suite against addr (the emulator when empty) and
// returns each test's and subtest's result.
func runSuite(t *testing.T, ctx context.Context, bin, dir, addr string) map[string]string {
	t.Helper()
	what := "the emulator"
	if addr != "" {
		what = "Tabula at " + addr
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestIntegration_", "-test.skip", suiteSkipped,
		"-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TABULA_SUITE_ADDR="+addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	res := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := suiteResult.FindStringSubmatch(sc.Text()); m != nil {
			res[m[2]] = m[1]
		}
	}
	fails := 0
	for _, r := range res {
		if r == "FAIL" {
			fails++
		}
	}
	t.Logf("the suite against %s: %d results, %d failed, in %v (exit: %v)", what, len(res), fails, time.Since(start).Round(time.Second), runErr)
	if len(res) == 0 {
		t.Fatalf("no results from the suite against %s:\n%s", what, out.String())
	}
	if fails > 0 {
		// The failures' own messages, for the reader of the log.
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "_test.go:") && addr != "" {
				t.Logf("  %s", strings.TrimSpace(line))
			}
		}
	}
	return res
}
