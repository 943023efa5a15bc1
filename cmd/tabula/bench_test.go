package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// emulatorSubprocess is benchConfig.emulatorCmd for tests: this test
// binary running TestEmulatorProcess, which serves the emulator in a
// process of its own as "tabula emulator" does.
func emulatorSubprocess() (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmulatorProcess$")
	cmd.Env = append(os.Environ(), emulatorProcessEnv+"=1")
	return cmd, nil
}

// benchJSON runs bench with cfg (its json set) and decodes its report;
// progress gets the progress lines.
func benchJSON(t *testing.T, ctx context.Context, cfg benchConfig, progress io.Writer) benchReport {
	t.Helper()
	cfg.json = true
	var out bytes.Buffer
	if err := runBench(ctx, cfg, &out, progress); err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out.String())
	}
	return rep
}

// checkResults asserts that every workload ran in every round, in order,
// and reported sane numbers.
func checkResults(t *testing.T, tr targetReport, workloads []string, rows int) {
	t.Helper()
	checkRounds(t, tr, workloads, rows, 1)
}

func checkRounds(t *testing.T, tr targetReport, workloads []string, rows, rounds int) {
	t.Helper()
	if len(tr.Results) != len(workloads)*rounds {
		t.Fatalf("%s: %d results, want %d", tr.Target, len(tr.Results), len(workloads)*rounds)
	}
	for i, r := range tr.Results {
		if w := workloads[i%len(workloads)]; r.Workload != w || r.Round != 1+i/len(workloads) {
			t.Errorf("%s: result %d is %s of round %d, want %s of round %d", tr.Target, i, r.Workload, r.Round, w, 1+i/len(workloads))
		}
		if r.Workload == wlEmpty {
			// Calls, no values.
			if r.Ops != int64(rows) || r.Requests != int64(rows) || r.OpsPerSec <= 0 || r.Bytes != 0 || r.P50Micros <= 0 || r.P50Micros > r.P99Micros {
				t.Errorf("%s empty: %+v", tr.Target, r)
			}
			continue
		}
		if r.Ops != int64(rows) || r.OpsPerSec <= 0 || r.MBPerSec <= 0 || r.Requests <= 0 {
			t.Errorf("%s %s: ops %d (want %d), %.1f ops/s, %.3f MB/s, %d requests", tr.Target, r.Workload, r.Ops, rows, r.OpsPerSec, r.MBPerSec, r.Requests)
		}
		if r.P50Micros <= 0 || r.P50Micros > r.P99Micros {
			t.Errorf("%s %s: p50 %.0fµs, p99 %.0fµs", tr.Target, r.Workload, r.P50Micros, r.P99Micros)
		}
		// Every write moved rows × value size; every read and the scan
		// found exactly one value per row.
		if r.Bytes != int64(rows)*100 {
			t.Errorf("%s %s: %d value bytes, want %d", tr.Target, r.Workload, r.Bytes, rows*100)
		}
	}
}

// TestBenchWorkloads runs every workload against the in-process emulator
// with tiny sizes, single-row and batched writes.
func TestBenchWorkloads(t *testing.T) {
	addr := startEmulator(t)
	for _, batch := range []string{"1", "7"} {
		out, _, err := runTabula(t, "bench", "--addr", addr, "--rows", "120", "--concurrency", "3",
			"--batch", batch, "--value-size", "100", "--json")
		if err != nil {
			t.Fatalf("batch %s: %v", batch, err)
		}
		var rep benchReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("batch %s: bad JSON %v:\n%s", batch, err, out)
		}
		if len(rep.Targets) != 1 || rep.Ratios != nil {
			t.Fatalf("batch %s: targets %+v, ratios %v; want one target, no ratios", batch, rep.Targets, rep.Ratios)
		}
		checkResults(t, rep.Targets[0], allWorkloads, 120)
		if note := rep.Targets[0].Results[4].Note; !strings.Contains(note, "normal family") {
			t.Errorf("randread-mem note = %q, want the fallback said", note)
		}
	}
	// The table is gone afterwards (no --keep).
	if out, _, err := runTabula(t, "ls", "--addr", addr); err != nil || out != "" {
		t.Errorf("tables after bench: %q, %v", out, err)
	}
	// Reads without a write workload fill the table first, untimed.
	out, _, err := runTabula(t, "bench", "--addr", addr, "--rows", "50", "--concurrency", "2",
		"--value-size", "100", "--workloads", "randread,scan", "--json", "--keep")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	checkResults(t, rep.Targets[0], []string{wlRandRead, wlScan}, 50)
	if out, _, _ := runTabula(t, "ls", "--addr", addr); out != "tabula-bench\n" {
		t.Errorf("tables after bench --keep: %q", out)
	}
	for _, bad := range [][]string{{"--workloads", "nope"}, {"--rows", "0"}, {"--workloads", ""}, {"--presplit", "-1"}, {"--rows", "5", "--presplit", "6"}} {
		if _, _, err := runTabula(t, append([]string{"bench", "--addr", addr}, bad...)...); err == nil {
			t.Errorf("bench %v succeeded, want an error", bad)
		}
	}
}

// TestBenchCompareEmulator runs bench with --compare-emulator: the
// emulator runs as a subprocess (this test binary in its emulator mode),
// both targets report every workload, the table has a ratio column, and
// the subprocess has exited when bench returns.
func TestBenchCompareEmulator(t *testing.T) {
	addr := startEmulator(t)
	var procs []*exec.Cmd
	cfg := benchConfig{
		conn:        connFlags{addr: addr, project: "tabula", instance: "dev"},
		table:       "cmp",
		rows:        60,
		concurrency: 2,
		batch:       5,
		valueSize:   100,
		rounds:      1,
		workloads:   allWorkloads,
		emulatorCmd: func() (*exec.Cmd, error) {
			cmd, err := emulatorSubprocess()
			procs = append(procs, cmd)
			return cmd, err
		},
		compareEmulator: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, progress bytes.Buffer
	if err := runBench(ctx, cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 {
		t.Fatalf("started %d emulator processes, want 1", len(procs))
	}
	if st := procs[0].ProcessState; st == nil || !st.Exited() {
		t.Errorf("emulator subprocess still running or killed after bench returned: %v", st)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2+len(allWorkloads) {
		t.Fatalf("report too short:\n%s", out.String())
	}
	header := lines[1]
	for _, col := range []string{"server ops/s", "emulator ops/s", "ratio"} {
		if !strings.Contains(header, col) {
			t.Errorf("header %q lacks %q", header, col)
		}
	}
	for i, w := range allWorkloads {
		f := strings.Fields(lines[2+i])
		// The empty workload moves no bytes: 0.00 MB/s.
		if len(f) != 10 || f[0] != w || !strings.HasSuffix(f[9], "x") {
			t.Errorf("row for %s = %q, want workload, 2×4 numbers and a ratio", w, lines[2+i])
		}
	}
	if !strings.Contains(progress.String(), "emulator seqwrite") {
		t.Errorf("no progress for the emulator's workloads on stderr")
	}
	// JSON has both targets and a ratio per workload.
	cfg.workloads = []string{wlSeqWrite, wlScan}
	rep := benchJSON(t, ctx, cfg, &progress)
	if len(rep.Targets) != 2 || rep.Targets[1].Target != "emulator" || len(rep.Ratios) != 2 || rep.Ratios[wlScan] <= 0 {
		t.Errorf("JSON report: %d targets, ratios %v", len(rep.Targets), rep.Ratios)
	}
	checkResults(t, rep.Targets[1], cfg.workloads, 60)
}

// TestBenchRounds runs three rounds against the emulator in and out of
// process: every round has every workload on both targets, the order
// alternates, the summary's median lies within its range, and the point
// reads are related to the empty floor.
func TestBenchRounds(t *testing.T) {
	addr := startEmulator(t)
	cfg := benchConfig{
		conn:            connFlags{addr: addr, project: "tabula", instance: "dev"},
		table:           "rounds",
		rows:            40,
		concurrency:     2,
		batch:           4,
		valueSize:       100,
		rounds:          3,
		workloads:       []string{wlSeqWrite, wlRandRead, wlEmpty},
		emulatorCmd:     emulatorSubprocess,
		compareEmulator: true,
		json:            true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, progress bytes.Buffer
	rep := benchJSON(t, ctx, cfg, &progress)
	if rep.Rounds != 3 || len(rep.Targets) != 2 {
		t.Fatalf("rounds %d, %d targets", rep.Rounds, len(rep.Targets))
	}
	for _, tr := range rep.Targets {
		checkRounds(t, tr, cfg.workloads, 40, 3)
	}
	for _, want := range []string{"round 1 of 3: server then emulator", "round 2 of 3: emulator then server", "round 3 of 3: server then emulator"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	if len(rep.Summary) != 3 {
		t.Fatalf("summary %+v, want 3 workloads", rep.Summary)
	}
	for _, s := range rep.Summary {
		if len(s.RoundRatios) != 3 || s.MinRatio > s.MedianRatio || s.MedianRatio > s.MaxRatio || s.MinRatio <= 0 || rep.Ratios[s.Workload] != s.MedianRatio {
			t.Errorf("summary of %s: %+v (ratios %v)", s.Workload, s, rep.Ratios)
		}
		if len(s.MedianOpsPerSec) != 2 || s.MedianOpsPerSec[0] <= 0 || s.MedianOpsPerSec[1] <= 0 {
			t.Errorf("summary of %s: medians %v", s.Workload, s.MedianOpsPerSec)
		}
	}
	f := rep.FloorFractions[wlRandRead]
	if f["server"] <= 0 || f["emulator"] <= 0 || len(rep.FloorFractions) != 1 {
		t.Errorf("floor fractions %v, want randread's for both targets", rep.FloorFractions)
	}
	// The text report has a line per workload and round, and the medians.
	cfg.json = false
	cfg.rounds = 2
	cfg.workloads = []string{wlEmpty}
	out.Reset()
	if err := runBench(ctx, cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"rounds 2", "over 2 rounds:", "median ratio", "empty 1", "empty 2"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}
	cfg.rounds = -1
	if err := runBench(ctx, cfg, &out, &progress); err == nil || !strings.Contains(err.Error(), "--rounds") {
		t.Errorf("--rounds -1: %v, want an error naming the flag", err)
	}
}

func TestRoundOrderAndMedian(t *testing.T) {
	if got := roundOrder([]string{"a", "b"}, 1); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("round 1: %v", got)
	}
	if got := roundOrder([]string{"a", "b"}, 2); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("round 2: %v", got)
	}
	if got := roundOrder([]string{"a"}, 2); !slices.Equal(got, []string{"a"}) {
		t.Errorf("one target, round 2: %v", got)
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestBenchSplits(t *testing.T) {
	for _, tc := range []struct {
		rows, tablets int
		want          []string
	}{
		{100, 0, nil},
		{100, 1, nil},
		{100, 2, []string{benchKey(50)}},
		{100, 4, []string{benchKey(25), benchKey(50), benchKey(75)}},
		{10, 3, []string{benchKey(3), benchKey(6)}},
		{3, 3, []string{benchKey(1), benchKey(2)}},
	} {
		if got := benchSplits(tc.rows, tc.tablets); !slices.Equal(got, tc.want) {
			t.Errorf("benchSplits(%d, %d) = %q, want %q", tc.rows, tc.tablets, got, tc.want)
		}
	}
}

// TestBenchPresplit runs bench --presplit against tabula dev, which
// creates the table with the initial splits, and keeps the table to
// look at its tablets.
func TestBenchPresplit(t *testing.T) {
	addr := startTabula(t)
	out, _, err := runTabula(t, "bench", "--addr", addr, "--rows", "90", "--concurrency", "3",
		"--value-size", "100", "--presplit", "3", "--workloads", "seqwrite,scan", "--keep", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	if rep.Presplit != 3 {
		t.Errorf("report presplit = %d, want 3", rep.Presplit)
	}
	checkResults(t, rep.Targets[0], []string{wlSeqWrite, wlScan}, 90)
	c := dialTest(t, addr)
	keys, err := c.data.Open("tabula-bench").SampleRowKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{benchKey(30), benchKey(60)} {
		if !slices.Contains(keys, k) {
			t.Errorf("SampleRowKeys %q lacks the split %q", keys, k)
		}
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	if p := percentile(s, 0.5); p != 50 {
		t.Errorf("p50 of 1..100 = %d", p)
	}
	if p := percentile(s, 0.99); p != 99 {
		t.Errorf("p99 of 1..100 = %d", p)
	}
	if p := percentile(s[:1], 0.99); p != 1 {
		t.Errorf("p99 of one sample = %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %d", p)
	}
}
