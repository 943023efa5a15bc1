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
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
)

var allWorkloads = []string{wlSeqWrite, wlRandWrite, wlSeqRead, wlRandRead, wlRandReadMem, wlScan}

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
	json            bool
	keep            bool
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
Each reports ops/s (rows/s), MB/s of values, and p50/p99 latency per request.
--compare-emulator starts the Cloud Bigtable emulator in a separate process,
runs each workload against it right after the server (so that both see the
same machine load) and prints the ratio server/emulator.
The table (--table) is dropped and re-created at the start and deleted at
the end unless --keep. --presplit N creates it with N-1 initial split keys
spread evenly over the rows, so that a cluster serves it from N tablets
(the emulator ignores splits).`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b.workloads = splitList(workloads)
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
	cmd.Flags().BoolVar(&b.json, "json", false, "print the results as JSON")
	cmd.Flags().BoolVar(&b.keep, "keep", false, "keep the table afterwards")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// workloadResult is one workload's measurements against one server.
type workloadResult struct {
	Workload  string  `json:"workload"`
	Ops       int64   `json:"ops"`
	Requests  int64   `json:"requests"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	Note      string  `json:"note,omitempty"`
}

// targetReport is a whole run against one server.
type targetReport struct {
	Target  string           `json:"target"`
	Addr    string           `json:"addr"`
	Results []workloadResult `json:"results"`
}

// benchReport is what --json prints.
type benchReport struct {
	Rows        int            `json:"rows"`
	Concurrency int            `json:"concurrency"`
	Batch       int            `json:"batch"`
	ValueSize   int            `json:"value_size"`
	Presplit    int            `json:"presplit"`
	Targets     []targetReport `json:"targets"`
	// Ratios are server ops/s over emulator ops/s per workload, present
	// with --compare-emulator.
	Ratios map[string]float64 `json:"ratios,omitempty"`
}

func (b benchConfig) validate() error {
	if b.rows < 1 || b.concurrency < 1 || b.batch < 1 || b.valueSize < 1 {
		return fmt.Errorf("--rows, --concurrency, --batch and --value-size must be ≥ 1")
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
// both, each workload runs against the server and then against the
// emulator before the next workload starts, so that the two measurements
// a ratio compares are minutes apart at most, not a whole run: on a
// shared machine the load changes faster than that.
func runBench(ctx context.Context, b benchConfig, out, progress io.Writer) (err error) {
	if err := b.validate(); err != nil {
		return err
	}
	rep := benchReport{Rows: b.rows, Concurrency: b.concurrency, Batch: b.batch, ValueSize: b.valueSize, Presplit: max(1, b.presplit)}
	srv, err := openBenchTarget(ctx, b, "server", b.conn, progress)
	if err != nil {
		return err
	}
	defer srv.close()
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
		targets = append(targets, et)
	}
	for _, w := range allWorkloads {
		if !slices.Contains(b.workloads, w) {
			continue
		}
		for _, t := range targets {
			if err := t.run(ctx, w); err != nil {
				return err
			}
		}
	}
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.report)
	}
	if b.compareEmulator {
		rep.Ratios = map[string]float64{}
		for i, r := range rep.Targets[0].Results {
			if e := rep.Targets[1].Results[i].OpsPerSec; e > 0 {
				rep.Ratios[r.Workload] = r.OpsPerSec / e
			}
		}
	}
	if b.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchReport(out, rep)
	return nil
}

// benchTarget is one server under test: its connection, its freshly
// created table and the results so far.
type benchTarget struct {
	cfg     benchConfig
	conn    *conn
	runner  *benchRunner
	memNote string
	report  targetReport
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
	t.runner = &benchRunner{cfg: b, tbl: c.data.Open(b.table), progress: progress, target: target, pool: valuePool(b.valueSize)}
	if err := t.runner.awaitTablets(ctx, append([]string{benchKey(0)}, splits...)); err != nil {
		t.close()
		return nil, fmt.Errorf("%s %s: %w", target, cf.addr, err)
	}
	return t, nil
}

// run runs workload w, first filling the rows it reads, untimed, unless
// an earlier workload wrote them.
func (t *benchTarget) run(ctx context.Context, w string) error {
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
	res, err := r.run(ctx, w)
	if err != nil {
		return fmt.Errorf("%s %s, workload %s: %w", t.report.Target, t.report.Addr, w, describe(err))
	}
	if w == wlRandReadMem {
		res.Note = t.memNote
	}
	t.report.Results = append(t.report.Results, res)
	return nil
}

// close drops the table unless --keep, and closes the connection.
func (t *benchTarget) close() {
	if !t.cfg.keep {
		// A fresh context: the run's may be why we are leaving.
		dctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		defer cancel()
		_ = t.conn.admin.DeleteTable(dctx, t.cfg.table)
	}
	t.conn.Close()
}

// createBenchTable drops and re-creates the table, split at splits, so
// every run starts from the same empty state, with the mem family in an
// in-memory locality group when the server has Tabula's extension. It
// reports whether it could make that group.
func createBenchTable(ctx context.Context, c *conn, table string, splits []string) (bool, error) {
	if err := c.admin.DeleteTable(ctx, table); err != nil && status.Code(err) != codes.NotFound {
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

// printBenchReport prints one line per workload, with the emulator's
// numbers and the ratio when there are two targets.
func printBenchReport(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "rows %d, concurrency %d, batch %d, value size %d B, presplit %d\n", rep.Rows, rep.Concurrency, rep.Batch, rep.ValueSize, rep.Presplit)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "workload\t"
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
		for _, t := range rep.Targets {
			x := t.Results[i]
			line += fmt.Sprintf("%.0f\t%.2f\t%s\t%s\t", x.OpsPerSec, x.MBPerSec, fmtMicros(x.P50Micros), fmtMicros(x.P99Micros))
			if x.Note != "" {
				notes = append(notes, fmt.Sprintf("%s (%s): %s", r.Workload, t.Target, x.Note))
			}
		}
		if len(rep.Targets) > 1 {
			line += fmt.Sprintf("%.2fx\t", rep.Ratios[r.Workload])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, n := range slices.Compact(notes) {
		fmt.Fprintln(w, "note:", n)
	}
}

func fmtMicros(us float64) string {
	return time.Duration(us * 1e3).Round(time.Microsecond).String()
}
