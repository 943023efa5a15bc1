//go:build integration

package faultcampaign

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The campaign needs its own Consul agent and MinIO server (the nemesis
// pauses and restarts them), from the binaries deploy/test.sh installs
// into .cache/bin, headless Chromium for the report (TABULA_TEST_CHROMIUM,
// set by deploy/test.sh), and builds the tabula binary.

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func binaries(t *testing.T, dir string) (tabula, consul, minio string) {
	t.Helper()
	root := repoRoot(t)
	consul, minio = filepath.Join(root, ".cache/bin/consul"), filepath.Join(root, ".cache/bin/minio")
	for _, b := range []string{consul, minio} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v: run the campaign through deploy/test.sh, which installs Consul and MinIO into .cache/bin", err)
		}
	}
	tabula = filepath.Join(dir, "tabula")
	if out, err := exec.Command("go", "build", "-o", tabula, "github.com/tabuladb/tabula/cmd/tabula").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return tabula, consul, minio
}

// chromium returns the browser: $TABULA_TEST_CHROMIUM, else chromium or
// chromium-browser on PATH; without one the test fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TABULA_TEST_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("TABULA_TEST_CHROMIUM=%q is not an executable: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium to render the report: set TABULA_TEST_CHROMIUM (bash deploy/test.sh installs it)")
	return ""
}

// dumpDOM loads the file in headless Chromium and returns the DOM after
// load, as the status page tests do.
func dumpDOM(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--user-data-dir="+t.TempDir(),
		"--dump-dom", "file://"+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.Bytes())
	}
	if !bytes.Contains(out, []byte("</html>")) {
		t.Fatalf("chromium printed no document:\n%s", stderr.Bytes())
	}
	return string(out)
}

// TestCampaign runs the fault campaign: short by default (every kind that
// can be applied, once), long with TABULA_LONG=1 (TABULA_CAMPAIGN_CYCLES
// nemesis cycles, default 26: every kind at least twice;
// TABULA_CAMPAIGN_KINDS=a,b only those kinds). It fails on any
// anomaly or lost acknowledged write, keeping the run's directory
// (history, servers' logs, porcupine's visualisation, report).
func TestCampaign(t *testing.T) {
	dir, err := os.MkdirTemp("", "tabula-campaign-")
	if err != nil {
		t.Fatal(err)
	}
	tabula, consul, minio := binaries(t, dir)
	var kinds []string
	for _, k := range AllKinds {
		if Skipped[k] == "" {
			kinds = append(kinds, k)
		}
	}
	cfg := Config{Dir: dir, TabulaBin: tabula, ConsulBin: consul, MinIOBin: minio, Servers: 3, Cycles: len(kinds),
		Kinds: kinds, Workers: 2, Seed: uint64(time.Now().UnixNano()), Settle: 40 * time.Second, Log: t.Logf}
	timeout := 6 * time.Minute
	if os.Getenv("TABULA_LONG") == "1" {
		cfg.Cycles, cfg.Workers, timeout = 26, 3, 60*time.Minute
		if n := os.Getenv("TABULA_CAMPAIGN_CYCLES"); n != "" {
			fmt.Sscan(n, &cfg.Cycles)
		}
	}
	if s := os.Getenv("TABULA_CAMPAIGN_SEED"); s != "" {
		fmt.Sscan(s, &cfg.Seed)
	}
	if s := os.Getenv("TABULA_CAMPAIGN_KINDS"); s != "" {
		// Only these kinds, in turn: one fault's behaviour, repeated.
		cfg.Kinds = strings.Split(s, ",")
		for _, k := range cfg.Kinds {
			if !slices.Contains(kinds, k) {
				t.Fatalf("TABULA_CAMPAIGN_KINDS: %q is not a kind the campaign applies (%s)", k, strings.Join(kinds, ", "))
			}
		}
	}
	t.Logf("campaign seed %d (TABULA_CAMPAIGN_SEED replays the nemesis's choices), directory %s", cfg.Seed, dir)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("campaign (directory %s kept): %v", dir, err)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	t.Log("\n" + text.String())
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), text.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.html")
	f, err := os.Create(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	failed := false
	fail := func(format string, args ...any) {
		failed = true
		t.Errorf(format, args...)
	}
	s := res.Summarize()
	if s.Anomalies > 0 || s.LostWrites > 0 {
		fail("%d anomalies, %d acknowledged writes lost", s.Anomalies, s.LostWrites)
	}
	if s.OK < 100 {
		fail("only %d operations succeeded", s.OK)
	}
	for _, k := range s.Kinds {
		if k.Skipped == "" && k.Count == 0 && slices.Contains(cfg.Kinds, k.Kind) {
			fail("fault kind %s never applied", k.Kind)
		}
	}

	// The report as a browser renders it.
	dom := dumpDOM(t, report)
	for _, want := range []string{
		fmt.Sprintf(`<td id="ops">%d</td>`, s.Ops),
		fmt.Sprintf(`<td id="faults">%d</td>`, len(res.Faults)),
		fmt.Sprintf(`<td id="anomalies">%d</td>`, s.Anomalies),
		fmt.Sprintf(`<td id="lost">%d</td>`, s.LostWrites),
	} {
		if !strings.Contains(dom, want) {
			fail("report DOM lacks %s", want)
		}
	}
	if got := strings.Count(dom, `class="faultrow"`); got != len(res.Faults) {
		fail("report lists %d faults, want %d", got, len(res.Faults))
	}
	if got := strings.Count(dom, `<rect class="fault"`); got != len(res.Faults) {
		fail("timeline has %d fault bands, want %d", got, len(res.Faults))
	}
	if got, want := len(regexp.MustCompile(`<circle class="(ok|failed|unknown)"`).FindAllString(dom, -1)), timelineDots(len(res.Events)); got != want || want == 0 {
		fail("timeline has %d operation dots for %d operations, want %d", got, len(res.Events), want)
	}
	for _, k := range AllKinds {
		if !strings.Contains(dom, `data-kind="`+k+`"`) {
			fail("per-kind table lacks %s", k)
		}
	}
	if want := map[bool]string{true: "FAILED", false: "PASSED"}[s.Anomalies+s.LostWrites > 0]; !strings.Contains(dom, want) {
		fail("report verdict is not %s", want)
	}

	if failed || t.Failed() {
		if err := res.Keep(); err != nil {
			t.Error(err)
		}
		t.Logf("run kept in %s: history.txt, the servers' logs, porcupine-*.html, report.html", dir)
		return
	}
	t.Logf("report: %s", report)
	if keep := os.Getenv("TABULA_CAMPAIGN_KEEP"); keep != "" {
		_ = res.Keep()
		t.Logf("kept %s (TABULA_CAMPAIGN_KEEP)", dir)
		return
	}
	os.RemoveAll(dir)
}
