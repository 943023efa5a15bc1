package main

// `tabula bench`: the Bigtable paper's Figure 6 workloads against any
// Cloud Bigtable endpoint, optionally side by side with the Cloud
// Bigtable emulator in a separate process.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/master"
)

// The workloads, in the order they run: writes first so the reads find
// the rows they wrote.
const (
	wlSeqWrite    = "seqwrite"
	wlRandWrite   = "randwrite"
	wlSeqRead     = "seqread"
	wlRandRead    = "randread"
	wlRandReadMem = "randread-mem"
	wlScan        = "scan"
	// wlEmpty is the RPC floor: PingAndWarm, a unary call that does no
	// work on either server, so its rate is what the connection, gRPC and
	// the two processes' scheduling allow at this concurrency.
	wlEmpty = "empty"
)

var allWorkloads = []string{wlSeqWrite, wlRandWrite, wlSeqRead, wlRandRead, wlRandReadMem, wlScan, wlEmpty}

// The bench table's families: data for most workloads, mem for the
// in-memory random reads.
const (
	benchFamily    = "f"
	benchMemFamily = "m"
	benchMemGroup  = "mem"
	// scanChunk is the number of rows one scan request covers; scan
	// latencies are per request of this many rows.
	scanChunk = 1000
)

// benchConfig is the configuration of one bench run.
type benchConfig struct {
	conn            connFlags
	table           string
	rows            int
	concurrency     int
	batch           int
	valueSize       int
	presplit        int // tablets at creation: N-1 split keys evenly over the rows; 0 and 1 none
	workloads       []string
	compareEmulator bool
	rounds          int // each workload runs this many times per target, the order alternating
	json            bool
	keep            bool
	// sessions: the workloads' client dials the server itself, as
	// applications outside the emulator mechanism do, and so sends its
	// single-row reads and writes on sessions where the server offers
	// them (storage/datasession).
	sessions bool
	// serverMetrics is the server's Prometheus /metrics URL, from which
	// its CPU per operation is read; empty: not measured.
	serverMetrics string
	// emulatorCmd returns the command that runs the emulator process;
	// nil means this binary's hidden "emulator" subcommand. Tests
	// replace it because the test binary is not tabula.
	emulatorCmd func() (*exec.Cmd, error)
}

func newBenchCommand() *cobra.Command {
	var b benchConfig
	var workloads string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run the paper's Figure 6 workloads against a server, optionally compared with the Cloud Bigtable emulator",
		Long: `bench runs the Bigtable paper's Figure 6 workloads against --addr:
  seqwrite      rows 0..N-1 in order (ApplyBulk of --batch rows when --batch > 1, else Apply)
  randwrite     random rows of 0..N-1, batched the same way
  seqread       ReadRow of consecutive rows
  randread      ReadRow of random rows
  randread-mem  ReadRow of random rows of a family in an in-memory locality group
                (a normal family, said so in the report, when the server has no such extension)
  scan          ReadRows over the whole table, in requests of 1000 rows
  empty         PingAndWarm, --rows calls: the RPC floor (no work on the server)
Each reports ops/s (rows/s; calls for empty), MB/s of values, and p50/p99
latency per request.
--compare-emulator starts the Cloud Bigtable emulator in a separate process,
runs each workload against it next to the server (so that both see the
same machine load) and prints the ratio server/emulator.
--rounds N runs everything N times: in each round every workload runs
against both targets, the server first in odd rounds and the emulator first
in even ones (A B, B A, A B, ...), so neither always gets the warmer or the
quieter slot. The report gives every round's figures, and per workload the
median ratio with its range; and the point reads' rates as a fraction of
the empty-RPC floor measured in the same run.
--server-metrics URL (the server's Prometheus /metrics, its --http port)
adds each process's CPU per operation while the workload ran: the
server's from its process_cpu_seconds_total, the emulator's from /proc
(Linux), and this client's own — figures that move far less with the
machine's load than rates do.
The table (--table) is dropped and re-created at the start and deleted at
the end unless --keep. --presplit N creates it with N-1 initial split keys
spread evenly over the rows, so that a cluster serves it from N tablets
(the emulator ignores splits).`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b.workloads = splitList(workloads)
			// Flags first, before anything is dialed or started.
			if err := b.validate(); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			// Interrupted, bench still stops the emulator and drops its
			// table instead of leaving them behind.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, b, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	b.conn.register(cmd.Flags())
	cmd.Flags().StringVar(&b.table, "table", "tabula-bench", "table to create, use and delete")
	cmd.Flags().IntVar(&b.rows, "rows", 100000, "rows written and read per workload")
	cmd.Flags().IntVar(&b.concurrency, "concurrency", 32, "concurrent requests")
	cmd.Flags().IntVar(&b.batch, "batch", 100, "rows per write request (1: single-row Apply)")
	cmd.Flags().IntVar(&b.valueSize, "value-size", 1000, "bytes per value")
	cmd.Flags().IntVar(&b.presplit, "presplit", 1, "tablets to create the table with (N-1 split keys evenly spaced over the rows)")
	cmd.Flags().StringVar(&workloads, "workloads", strings.Join(allWorkloads, ","), "comma-separated workloads to run")
	cmd.Flags().BoolVar(&b.compareEmulator, "compare-emulator", false, "also run against the Cloud Bigtable emulator in a subprocess and print ratios")
	cmd.Flags().IntVar(&b.rounds, "rounds", 1, "times to run every workload on each target, alternating which goes first; medians and ranges are reported")
	cmd.Flags().BoolVar(&b.json, "json", false, "print the results as JSON")
	cmd.Flags().BoolVar(&b.keep, "keep", false, "keep the table afterwards")
	cmd.Flags().BoolVar(&b.sessions, "sessions", false, "the workloads' official client dials each target itself (not through a connection of its own, as BIGTABLE_EMULATOR_HOST makes it; the variable is ignored for it): it sends ReadRow and single-row Apply on sessions when the target offers them; empty stays a plain PingAndWarm on a connection")
	cmd.Flags().StringVar(&b.serverMetrics, "server-metrics", "", "the server's Prometheus /metrics URL (e.g. http://127.0.0.1:8087/metrics, tabula's --http): report its process CPU per operation")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// workloadResult is one workload's measurements against one server.
type workloadResult struct {
	Workload  string  `json:"workload"`
	Round     int     `json:"round"` // 1-based
	Ops       int64   `json:"ops"`
	Requests  int64   `json:"requests"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	// ServerCPUMicros is the target process's CPU per operation (µs)
	// while the workload ran: --server-metrics for the server, /proc for
	// the emulator; absent when not measured. ClientCPUMicros is this
	// process's (the client's).
	ServerCPUMicros *float64 `json:"server_cpu_us_per_op,omitempty"`
	ClientCPUMicros float64  `json:"client_cpu_us_per_op"`
	Note            string   `json:"note,omitempty"`
}

// targetReport is a whole run against one server.
type targetReport struct {
	Target  string           `json:"target"`
	Addr    string           `json:"addr"`
	Results []workloadResult `json:"results"`
}

// benchReport is what --json prints.
type benchReport struct {
	Rows        int `json:"rows"`
	Concurrency int `json:"concurrency"`
	Batch       int `json:"batch"`
	ValueSize   int `json:"value_size"`
	Presplit    int `json:"presplit"`
	Rounds      int `json:"rounds"`
	// Targets hold every round's results, in the order they ran per
	// target (round by round, workload by workload).
	Targets []targetReport `json:"targets"`
	// Ratios are the median over the rounds of server ops/s over
	// emulator ops/s per workload, present with --compare-emulator.
	Ratios map[string]float64 `json:"ratios,omitempty"`
	// Summary is per workload the ratios of every round, their median
	// and range (with --compare-emulator), and each target's median
	// ops/s.
	Summary []workloadSummary `json:"summary"`
	// FloorFractions are, per point-read workload and target, the median
	// over rounds of its ops/s over the empty workload's in the same
	// round: how close a read gets to the RPC floor. Present when the
	// empty workload ran.
	FloorFractions map[string]map[string]float64 `json:"floor_fractions,omitempty"`
}

// workloadSummary is one workload over all rounds.
type workloadSummary struct {
	Workload string `json:"workload"`
	// MedianOpsPerSec is per target (in Targets' order) the median ops/s.
	MedianOpsPerSec []float64 `json:"median_ops_per_sec"`
	RoundRatios     []float64 `json:"round_ratios,omitempty"`
	MedianRatio     float64   `json:"median_ratio,omitempty"`
	MinRatio        float64   `json:"min_ratio,omitempty"`
	MaxRatio        float64   `json:"max_ratio,omitempty"`
	// MedianServerCPUMicros is per target (in Targets' order) the median
	// over rounds of its process's CPU per operation, -1 when it was not
	// measured; MedianClientCPUMicros the client's while it ran against
	// that target.
	MedianServerCPUMicros []float64 `json:"median_server_cpu_us_per_op"`
	MedianClientCPUMicros []float64 `json:"median_client_cpu_us_per_op"`
}

func (b benchConfig) validate() error {
	for _, f := range []struct {
		flag string
		n    int
	}{{"--rows", b.rows}, {"--concurrency", b.concurrency}, {"--batch", b.batch}, {"--value-size", b.valueSize}} {
		if f.n < 1 {
			return fmt.Errorf("%s %d: want a number ≥ 1", f.flag, f.n)
		}
	}
	if b.rounds < 1 || b.rounds > 100 {
		return fmt.Errorf("--rounds %d: want 1 to 100", b.rounds)
	}
	if b.presplit < 0 {
		return fmt.Errorf("--presplit %d: want a number of tablets ≥ 0 (0 and 1: no splits)", b.presplit)
	}
	if b.presplit > b.rows {
		return fmt.Errorf("--presplit %d: more tablets than --rows %d", b.presplit, b.rows)
	}
	if len(b.workloads) == 0 {
		return fmt.Errorf("--workloads names no workload; want some of %s", strings.Join(allWorkloads, ","))
	}
	for _, w := range b.workloads {
		if !slices.Contains(allWorkloads, w) {
			return fmt.Errorf("unknown workload %q; want some of %s", w, strings.Join(allWorkloads, ","))
		}
	}
	return nil
}

// runBench runs the workloads against the server and, with
// compareEmulator, against an emulator subprocess, then reports. With
// both, each workload runs against one target and then the other before
// the next workload starts, so that the two measurements a ratio compares
// are a minute apart at most, not a whole run: on a shared machine the
// load changes faster than that. Over several rounds the order alternates
// (A B, B A, ...) and the ratios' median and range are reported.
func runBench(ctx context.Context, b benchConfig, out, progress io.Writer) (err error) {
	if err := b.validate(); err != nil {
		return err
	}
	rep := benchReport{Rows: b.rows, Concurrency: b.concurrency, Batch: b.batch, ValueSize: b.valueSize, Presplit: max(1, b.presplit), Rounds: b.rounds}
	var serverCPU cpuMeter
	if b.serverMetrics != "" {
		m := newMetricsCPU(b.serverMetrics)
		// Read once now: a wrong URL fails the run before any work.
		if _, err := m.CPUSeconds(ctx); err != nil {
			return err
		}
		serverCPU = m
	}
	srv, err := openBenchTarget(ctx, b, "server", b.conn, progress)
	if err != nil {
		return err
	}
	defer srv.close()
	srv.cpu = serverCPU
	targets := []*benchTarget{srv}
	if b.compareEmulator {
		// err is the named result here, not a new variable: the deferred
		// stop reports into it.
		var emu *emulatorProcess
		if emu, err = startEmulatorProcess(b); err != nil {
			return err
		}
		defer func() {
			if serr := emu.stop(); err == nil && serr != nil {
				err = fmt.Errorf("stop emulator: %w", serr)
			}
		}()
		cf := b.conn
		cf.addr = emu.addr
		var et *benchTarget
		if et, err = openBenchTarget(ctx, b, "emulator", cf, progress); err != nil {
			return err
		}
		// Dropped before the emulator stops (defers run last first).
		defer et.close()
		// Its CPU from /proc where there is one (Linux); elsewhere not
		// measured.
		if m := (procCPU{pid: emu.cmd.Process.Pid}); m.readable(ctx) {
			et.cpu = m
		}
		targets = append(targets, et)
	}
	for round := 1; round <= b.rounds; round++ {
		order := roundOrder(targets, round)
		if b.rounds > 1 {
			names := make([]string, len(order))
			for i, t := range order {
				names[i] = t.report.Target
			}
			fmt.Fprintf(progress, "round %d of %d: %s\n", round, b.rounds, strings.Join(names, " then "))
		}
		for _, w := range allWorkloads {
			if !slices.Contains(b.workloads, w) {
				continue
			}
			for _, t := range order {
				if err := t.run(ctx, w, round); err != nil {
					return err
				}
			}
		}
	}
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.report)
	}
	summarize(&rep)
	if b.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchReport(out, rep)
	return nil
}

// roundOrder is the order the targets run in round (1-based): as given in
// odd rounds, reversed in even ones.
func roundOrder[T any](targets []T, round int) []T {
	order := slices.Clone(targets)
	if round%2 == 0 {
		slices.Reverse(order)
	}
	return order
}

// pointReads are the workloads whose rate is compared with the RPC floor.
var pointReads = []string{wlSeqRead, wlRandRead, wlRandReadMem}

// summarize fills rep's Summary, Ratios and FloorFractions from its
// targets' per-round results.
func summarize(rep *benchReport) {
	type key struct {
		workload string
		round    int
	}
	rates := make([]map[key]float64, len(rep.Targets))
	results := make([]map[key]workloadResult, len(rep.Targets))
	for i, t := range rep.Targets {
		rates[i] = map[key]float64{}
		results[i] = map[key]workloadResult{}
		for _, r := range t.Results {
			rates[i][key{r.Workload, r.Round}] = r.OpsPerSec
			results[i][key{r.Workload, r.Round}] = r
		}
	}
	compare := len(rep.Targets) > 1
	if compare {
		rep.Ratios = map[string]float64{}
	}
	for _, w := range allWorkloads {
		if _, ran := rates[0][key{w, 1}]; !ran {
			continue
		}
		s := workloadSummary{Workload: w}
		for i := range rep.Targets {
			var xs []float64
			for round := 1; round <= rep.Rounds; round++ {
				xs = append(xs, rates[i][key{w, round}])
			}
			s.MedianOpsPerSec = append(s.MedianOpsPerSec, median(xs))
			var server, client []float64
			for round := 1; round <= rep.Rounds; round++ {
				r := results[i][key{w, round}]
				if r.ServerCPUMicros != nil {
					server = append(server, *r.ServerCPUMicros)
				}
				client = append(client, r.ClientCPUMicros)
			}
			sm := -1.0
			if len(server) > 0 {
				sm = median(server)
			}
			s.MedianServerCPUMicros = append(s.MedianServerCPUMicros, sm)
			s.MedianClientCPUMicros = append(s.MedianClientCPUMicros, median(client))
		}
		if compare {
			for round := 1; round <= rep.Rounds; round++ {
				if e := rates[1][key{w, round}]; e > 0 {
					s.RoundRatios = append(s.RoundRatios, rates[0][key{w, round}]/e)
				}
			}
			if len(s.RoundRatios) > 0 {
				s.MedianRatio = median(s.RoundRatios)
				s.MinRatio, s.MaxRatio = slices.Min(s.RoundRatios), slices.Max(s.RoundRatios)
				rep.Ratios[w] = s.MedianRatio
			}
		}
		rep.Summary = append(rep.Summary, s)
	}
	if _, ran := rates[0][key{wlEmpty, 1}]; !ran {
		return
	}
	for _, w := range pointReads {
		if _, ran := rates[0][key{w, 1}]; !ran {
			continue
		}
		if rep.FloorFractions == nil {
			rep.FloorFractions = map[string]map[string]float64{}
		}
		rep.FloorFractions[w] = map[string]float64{}
		for i, t := range rep.Targets {
			var xs []float64
			for round := 1; round <= rep.Rounds; round++ {
				if f := rates[i][key{wlEmpty, round}]; f > 0 {
					xs = append(xs, rates[i][key{w, round}]/f)
				}
			}
			if len(xs) > 0 {
				rep.FloorFractions[w][t.Target] = median(xs)
			}
		}
	}
}

// median is the middle of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchTarget is one server under test: its connection, its freshly
// created table and the results so far.
type benchTarget struct {
	cfg    benchConfig
	conn   *conn
	runner *benchRunner
	// sessionData is the workloads' client with --sessions (nil without).
	sessionData *bigtable.Client
	memNote     string
	report      targetReport
	// cpu reads the target process's CPU time; nil: not measured.
	cpu cpuMeter
}

// openBenchTarget connects to the server at cf, creates the bench table
// and waits until it is served.
func openBenchTarget(ctx context.Context, b benchConfig, target string, cf connFlags, progress io.Writer) (*benchTarget, error) {
	c, err := cf.dial(ctx)
	if err != nil {
		return nil, err
	}
	t := &benchTarget{cfg: b, conn: c, report: targetReport{Target: target, Addr: cf.addr}}
	splits := benchSplits(b.rows, b.presplit)
	inMemory, err := createBenchTable(ctx, c, b.table, splits)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s %s: %w", target, cf.addr, err)
	}
	t.memNote = "family " + benchMemFamily + " in the in-memory locality group " + benchMemGroup
	if !inMemory {
		t.memNote = "no in-memory locality groups on this server (no tabula.admin.v1.LocalityGroups); fell back to a normal family"
	}
	data := btpb.NewBigtableClient(c.cc)
	instance := fmt.Sprintf("projects/%s/instances/%s", cf.project, cf.instance)
	ping := func(ctx context.Context) error {
		_, err := data.PingAndWarm(ctx, &btpb.PingAndWarmRequest{Name: instance})
		return err
	}
	tbl := c.data.Open(b.table)
	if b.sessions {
		if t.sessionData, err = cf.sessionClient(ctx, c.tls); err != nil {
			t.close()
			return nil, fmt.Errorf("%s %s: %w", target, cf.addr, err)
		}
		tbl = t.sessionData.Open(b.table)
	}
	t.runner = &benchRunner{cfg: b, tbl: tbl, ping: ping, progress: progress, target: target, pool: valuePool(b.valueSize)}
	if err := t.runner.awaitTablets(ctx, append([]string{benchKey(0)}, splits...)); err != nil {
		t.close()
		return nil, fmt.Errorf("%s %s: %w", target, cf.addr, err)
	}
	return t, nil
}

// run runs round's run of workload w, first filling the rows it reads, untimed, unless
// an earlier workload wrote them.
func (t *benchTarget) run(ctx context.Context, w string, round int) error {
	r := t.runner
	fam := ""
	switch w {
	case wlSeqRead, wlRandRead, wlScan:
		fam = benchFamily
	case wlRandReadMem:
		fam = benchMemFamily
	}
	if fam != "" && !r.filled[fam] {
		if err := r.fill(ctx, fam); err != nil {
			return fmt.Errorf("%s %s: %w", t.report.Target, t.report.Addr, err)
		}
	}
	var res workloadResult
	cpu, err := measureCPU(ctx, []cpuMeter{t.cpu, selfCPU{}}, func() error {
		var err error
		res, err = r.run(ctx, w)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s, workload %s: %w", t.report.Target, t.report.Addr, w, describe(err))
	}
	if res.Ops > 0 {
		if cpu[0] >= 0 {
			us := cpu[0] * 1e6 / float64(res.Ops)
			res.ServerCPUMicros = &us
		}
		res.ClientCPUMicros = cpu[1] * 1e6 / float64(res.Ops)
	}
	if w == wlRandReadMem {
		res.Note = t.memNote
	}
	res.Round = round
	t.report.Results = append(t.report.Results, res)
	return nil
}

// close drops the table unless --keep, and closes the connection.
func (t *benchTarget) close() {
	if !t.cfg.keep {
		// A fresh context: the run's may be why we are leaving.
		dctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		defer cancel()
		_ = t.conn.admin.DeleteTable(master.WithPurge(dctx), t.cfg.table) // a scratch table: not kept for undelete
	}
	if t.sessionData != nil {
		t.sessionData.Close()
	}
	t.conn.Close()
}

// createBenchTable drops and re-creates the table, split at splits, so
// every run starts from the same empty state, with the mem family in an
// in-memory locality group when the server has Tabula's extension. It
// reports whether it could make that group.
func createBenchTable(ctx context.Context, c *conn, table string, splits []string) (bool, error) {
	if err := c.admin.DeleteTable(master.WithPurge(ctx), table); err != nil && status.Code(err) != codes.NotFound {
		return false, fmt.Errorf("drop %s: %w", table, describe(err))
	}
	err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: table, SplitKeys: splits, ColumnFamilies: map[string]bigtable.Family{
		benchFamily: {GCPolicy: bigtable.MaxVersionsPolicy(1)},
	}})
	if err != nil {
		return false, fmt.Errorf("create %s: %w", table, describe(err))
	}
	inMemory, err := setInMemoryGroup(ctx, c, table, benchMemGroup, []string{benchMemFamily})
	if err != nil || inMemory {
		return inMemory, err
	}
	if err := c.admin.CreateColumnFamilyWithConfig(ctx, table, benchMemFamily, bigtable.Family{GCPolicy: bigtable.MaxVersionsPolicy(1)}); err != nil {
		return false, fmt.Errorf("create family %s: %w", benchMemFamily, describe(err))
	}
	return false, nil
}

// printBenchReport prints one line per workload and round, with the
// emulator's numbers and the ratio when there are two targets; then, over
// several rounds, the medians and ranges; then the point reads against the
// RPC floor.
func printBenchReport(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "rows %d, concurrency %d, batch %d, value size %d B, presplit %d, rounds %d\n", rep.Rows, rep.Concurrency, rep.Batch, rep.ValueSize, rep.Presplit, rep.Rounds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "workload\t"
	if rep.Rounds > 1 {
		head += "round\t"
	}
	for _, t := range rep.Targets {
		head += fmt.Sprintf("%s ops/s\tMB/s\tp50\tp99\t", t.Target)
	}
	if len(rep.Targets) > 1 {
		head += "ratio\t"
	}
	fmt.Fprintln(tw, head)
	var notes []string
	for i, r := range rep.Targets[0].Results {
		line := r.Workload + "\t"
		if rep.Rounds > 1 {
			line += fmt.Sprintf("%d\t", r.Round)
		}
		for _, t := range rep.Targets {
			x := t.Results[i]
			line += fmt.Sprintf("%.0f\t%.2f\t%s\t%s\t", x.OpsPerSec, x.MBPerSec, fmtMicros(x.P50Micros), fmtMicros(x.P99Micros))
			if x.Note != "" {
				notes = append(notes, fmt.Sprintf("%s (%s): %s", r.Workload, t.Target, x.Note))
			}
		}
		if len(rep.Targets) > 1 {
			line += fmt.Sprintf("%.2fx\t", r.OpsPerSec/rep.Targets[1].Results[i].OpsPerSec)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if rep.Rounds > 1 {
		fmt.Fprintf(w, "\nover %d rounds:\n", rep.Rounds)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		head = "workload\t"
		for _, t := range rep.Targets {
			head += fmt.Sprintf("%s median ops/s\t", t.Target)
		}
		if len(rep.Targets) > 1 {
			head += "median ratio\trange\t"
		}
		fmt.Fprintln(tw, head)
		for _, s := range rep.Summary {
			line := s.Workload + "\t"
			for _, x := range s.MedianOpsPerSec {
				line += fmt.Sprintf("%.0f\t", x)
			}
			if len(rep.Targets) > 1 {
				line += fmt.Sprintf("%.2fx\t%.2f–%.2fx\t", s.MedianRatio, s.MinRatio, s.MaxRatio)
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
	printCPUSummary(w, rep)
	for _, pr := range pointReads {
		f, ok := rep.FloorFractions[pr]
		if !ok {
			continue
		}
		line := fmt.Sprintf("%s / empty-RPC floor (median of rounds):", pr)
		for _, t := range rep.Targets {
			line += fmt.Sprintf(" %s %.0f%%", t.Target, 100*f[t.Target])
		}
		fmt.Fprintln(w, line)
	}
	slices.Sort(notes) // every round repeats them
	for _, n := range slices.Compact(notes) {
		fmt.Fprintln(w, "note:", n)
	}
}

// printCPUSummary prints, per workload, the median CPU per operation of
// every target whose process CPU was measured, their ratio when both
// were, and the client's. Nothing when no target was measured.
func printCPUSummary(w io.Writer, rep benchReport) {
	measured := false
	for _, s := range rep.Summary {
		for _, x := range s.MedianServerCPUMicros {
			measured = measured || x >= 0
		}
	}
	if !measured {
		return
	}
	fmt.Fprintf(w, "\nCPU per operation, µs (median of rounds; client: this process while it drove that target):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "workload\t"
	for _, t := range rep.Targets {
		head += fmt.Sprintf("%s\t", t.Target)
	}
	both := len(rep.Targets) > 1
	if both {
		head += "ratio\t"
	}
	for _, t := range rep.Targets {
		head += fmt.Sprintf("client (%s)\t", t.Target)
	}
	fmt.Fprintln(tw, head)
	for _, s := range rep.Summary {
		line := s.Workload + "\t"
		for _, x := range s.MedianServerCPUMicros {
			line += fmtCPU(x) + "\t"
		}
		if both {
			a, b := s.MedianServerCPUMicros[0], s.MedianServerCPUMicros[1]
			if a >= 0 && b > 0 {
				line += fmt.Sprintf("%.2fx\t", a/b)
			} else {
				line += "-\t"
			}
		}
		for _, x := range s.MedianClientCPUMicros {
			line += fmtCPU(x) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// fmtCPU formats a CPU figure in µs; "-" for one not measured.
func fmtCPU(us float64) string {
	if us < 0 {
		return "-"
	}
	return strconv.FormatFloat(us, 'f', 1, 64)
}

func fmtMicros(us float64) string {
	return time.Duration(us * 1e3).Round(time.Microsecond).String()
}
