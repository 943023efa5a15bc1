package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

func TestProcessCPUFromMetrics(t *testing.T) {
	for _, c := range []struct {
		name, page string
		want       float64
		err        string
	}{
		{"plain", "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 9.55\n", 9.55, ""},
		{"after others, longer names skipped", "process_cpu_seconds_total_extra 1\ngo_goroutines 12\nprocess_cpu_seconds_total 0.02 1700000000000\n", 0.02, ""},
		{"labels", "process_cpu_seconds_total{job=\"x\"} 3e2\n", 300, ""},
		{"absent", "go_goroutines 12\n", 0, "no process_cpu_seconds_total"},
		{"malformed value", "process_cpu_seconds_total abc\n", 0, "malformed sample"},
		{"unclosed labels", "process_cpu_seconds_total{a=\"b\" 3\n", 0, "malformed sample"},
	} {
		got, err := processCPUFromMetrics(strings.NewReader(c.page))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, %v; want an error containing %q", c.name, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestCPUFromProcStat(t *testing.T) {
	// A command name with spaces and a parenthesis: fields count from the
	// last ')'. utime 250 and stime 50 ticks: 3 s.
	line := "4242 (tab (ula) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 1000000 300"
	got, err := cpuFromProcStat([]byte(line))
	if err != nil || got != 3 {
		t.Fatalf("cpuFromProcStat = %v, %v; want 3", got, err)
	}
	if _, err := cpuFromProcStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short line gave no error")
	}
	// This process: its reading grows with the CPU it burns (in ticks of
	// 10 ms, however long a loaded machine takes to give it them).
	p := procCPU{pid: os.Getpid()}
	before, err := p.CPUSeconds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; {
		after, err := p.CPUSeconds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("CPU still %v s after 30 s of spinning", after)
		}
		for spin := time.Now(); time.Since(spin) < 10*time.Millisecond; {
		}
	}
}

// TestBenchServerCPU: with --server-metrics bench reports the server's
// CPU per operation (from a real tabula dev's /metrics) and the
// emulator subprocess's (from /proc) for every workload and round, and a
// summary of both; a URL that does not serve the metric fails the run
// before it creates the table.
func TestBenchServerCPU(t *testing.T) {
	ctx, d := startMetricsDev(t)
	cfg := benchConfig{
		conn:            connFlags{addr: d.Addr(), project: devProject, instance: devInstance},
		table:           "cpu",
		rows:            8000,
		concurrency:     4,
		batch:           100,
		valueSize:       100,
		rounds:          2,
		workloads:       []string{wlSeqWrite, wlScan},
		emulatorCmd:     emulatorSubprocess,
		compareEmulator: true,
		json:            true,
		serverMetrics:   fmt.Sprintf("http://%s/metrics", d.HTTPAddr()),
	}
	var out, progress bytes.Buffer
	rep := benchJSON(t, ctx, cfg, &progress)
	for _, tr := range rep.Targets {
		checkRounds(t, tr, cfg.workloads, cfg.rows, cfg.rounds)
		var sum float64
		for _, r := range tr.Results {
			if r.ServerCPUMicros == nil || *r.ServerCPUMicros < 0 || r.ClientCPUMicros < 0 {
				t.Fatalf("%s %s round %d: server CPU %v, client %v µs/op", tr.Target, r.Workload, r.Round, r.ServerCPUMicros, r.ClientCPUMicros)
			}
			sum += *r.ServerCPUMicros
		}
		// 8000 rows written twice and scanned twice cost well over the
		// 10 ms resolution of either reading.
		if sum <= 0 {
			t.Errorf("%s: no CPU measured in any workload", tr.Target)
		}
	}
	for _, s := range rep.Summary {
		if len(s.MedianServerCPUMicros) != 2 || s.MedianServerCPUMicros[0] < 0 || s.MedianServerCPUMicros[1] < 0 || len(s.MedianClientCPUMicros) != 2 {
			t.Errorf("summary of %s: server CPU %v, client %v", s.Workload, s.MedianServerCPUMicros, s.MedianClientCPUMicros)
		}
	}
	// The text report has the CPU section with a ratio per workload.
	cfg.json, cfg.rounds, cfg.workloads = false, 1, []string{wlSeqWrite}
	out.Reset()
	if err := runBench(ctx, cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(out.String()), " ")
	if !strings.Contains(text, "CPU per operation, µs") || !strings.Contains(text, "client (emulator)") {
		t.Errorf("text report lacks the CPU section:\n%s", out.String())
	}

	// A page without the metric: an error naming the flag, and no table.
	cfg.serverMetrics = fmt.Sprintf("http://%s/healthz", d.HTTPAddr())
	cfg.table = "never"
	err := runBench(ctx, cfg, &out, &progress)
	if err == nil || !strings.Contains(err.Error(), "--server-metrics") {
		t.Fatalf("bench with a page without the metric: %v, want an error naming --server-metrics", err)
	}
	c := dialDev(t, d.Addr(), devProject, devInstance)
	tables, err := c.admin.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb == "never" {
			t.Error("the failed run created its table")
		}
	}
}

// TestBenchSessions: with --sessions the workloads' client dials the
// server itself, and its point reads and single-row writes reach a tabula
// dev on sessions (the server's count of calls on sessions grows by about
// the reads and writes made).
func TestBenchSessions(t *testing.T) {
	ctx, d := startMetricsDev(t)
	calls := func() int {
		resp, err := http.Get(fmt.Sprintf("http://%s/metrics", d.HTTPAddr()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := devtest.SumMetric(resp.Body, "tabula_session_calls_total", `code="OK"`)
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	// deploy/local's env file exports BIGTABLE_EMULATOR_HOST for the
	// other tools; the official client reads it itself and, when set,
	// dials that address on a connection of its own without sessions.
	// The session client must dial --addr regardless: here the variable
	// even names a server that is not there.
	t.Setenv("BIGTABLE_EMULATOR_HOST", "127.0.0.1:1")
	cfg := benchConfig{
		conn:        connFlags{addr: d.Addr(), project: devProject, instance: devInstance},
		table:       "sessions",
		rows:        2000,
		concurrency: 4,
		batch:       1,
		valueSize:   100,
		rounds:      1,
		workloads:   []string{wlSeqWrite, wlRandRead},
		sessions:    true,
	}
	var out, progress bytes.Buffer
	if err := runBench(ctx, cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	// The client turns sessions on after its first poll of the server's
	// configuration, a few calls in: nearly all of the 4,000 go on them
	// (and the reads by which bench waits for the table's tablets).
	if n := calls(); n < 3000 || n > 4010 {
		t.Errorf("%d calls on sessions of 2,000 single-row writes and 2,000 reads", n)
	}
}

// startMetricsDev starts a tabula dev serving /metrics, closed when the
// test ends, and a context for the test's calls.
func startMetricsDev(t *testing.T) (context.Context, *cluster.Dev) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	d, err := cluster.StartDev(ctx, cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: quietDevLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return ctx, d
}
