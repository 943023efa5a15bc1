package main

// `tabula bench`: the Bigtable paper's Figure 6 workloads against any
// Cloud Bigtable endpoint, optionally side by side with the Cloud
// Bigtable emulator in a separate process.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// benchKey is row i's key: fixed width so keys sort as numbers.
func benchKey(i int) string { return fmt.Sprintf("row%010d", i) }

// benchSplits returns the tablets-1 increasing keys that cut rows
// 0..rows-1 into that many ranges of nearly equal row counts (none for
// one tablet).
func benchSplits(rows, tablets int) []string {
	var keys []string
	for k := 1; k < tablets; k++ {
		keys = append(keys, benchKey(k*rows/tablets))
	}
	return keys
}

// valuePool is random bytes that values are cut from at random offsets,
// so values are distinct and incompressible without generating each.
func valuePool(size int) []byte {
	pool := make([]byte, 1<<20+size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(r.Uint32())
	}
	return pool
}

// benchRunner runs workloads against one table.
type benchRunner struct {
	cfg      benchConfig
	tbl      *bigtable.Table
	progress io.Writer
	target   string
	pool     []byte
	filled   map[string]bool
}

func (r *benchRunner) value(rng *rand.Rand) []byte {
	off := rng.IntN(len(r.pool) - r.cfg.valueSize)
	return r.pool[off : off+r.cfg.valueSize]
}

// write applies rows keys[] to family with one request: Apply for a
// single row, ApplyBulk otherwise.
func (r *benchRunner) write(ctx context.Context, rng *rand.Rand, family string, rows []int) (int64, error) {
	// Millisecond timestamps: the emulator's (and Cloud Bigtable's)
	// default granularity.
	ts := bigtable.Time(time.Now().Truncate(time.Millisecond))
	if len(rows) == 1 {
		m := bigtable.NewMutation()
		v := r.value(rng)
		m.Set(family, "c", ts, v)
		return int64(len(v)), r.tbl.Apply(ctx, benchKey(rows[0]), m)
	}
	keys := make([]string, len(rows))
	muts := make([]*bigtable.Mutation, len(rows))
	var n int64
	for i, row := range rows {
		keys[i] = benchKey(row)
		m := bigtable.NewMutation()
		v := r.value(rng)
		m.Set(family, "c", ts, v)
		muts[i] = m
		n += int64(len(v))
	}
	return n, bulkWriter{tbl: r.tbl}.apply(ctx, keys, muts)
}

// awaitTablets reads the row at each key, untimed, so that the first
// workload does not time the wait for a new table's tablets: a cluster's
// master assigns them only after CreateTable returns, and requests until
// then are retried. keys are the tablets' start keys.
func (r *benchRunner) awaitTablets(ctx context.Context, keys []string) error {
	start := time.Now()
	for _, k := range keys {
		if _, err := r.tbl.ReadRow(ctx, k); err != nil {
			return fmt.Errorf("waiting for the tablet of %s: %w", k, describe(err))
		}
	}
	fmt.Fprintf(r.progress, "%s: %d tablet(s) served after %v\n", r.target, len(keys), time.Since(start).Round(time.Millisecond))
	return nil
}

// fill writes every row of family, untimed, so read workloads have data.
func (r *benchRunner) fill(ctx context.Context, family string) error {
	const batch = 100
	requests := (r.cfg.rows + batch - 1) / batch
	_, err := r.drive(ctx, "fill "+family, requests, func(ctx context.Context, rng *rand.Rand, req int) (int64, int64, error) {
		rows := make([]int, 0, batch)
		for i := req * batch; i < min((req+1)*batch, r.cfg.rows); i++ {
			rows = append(rows, i)
		}
		n, err := r.write(ctx, rng, family, rows)
		return int64(len(rows)), n, err
	})
	if err != nil {
		return fmt.Errorf("fill %s: %w", family, describe(err))
	}
	if r.filled == nil {
		r.filled = map[string]bool{}
	}
	r.filled[family] = true
	return nil
}

// run runs one workload and measures it.
func (r *benchRunner) run(ctx context.Context, w string) (workloadResult, error) {
	n, batch := r.cfg.rows, r.cfg.batch
	filter := func(fam string) bigtable.ReadOption {
		// The latest version only: randwrite leaves older versions that
		// GC may not have collected yet.
		return bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^"+fam+"$"), bigtable.LatestNFilter(1)))
	}
	readOne := func(ctx context.Context, key, fam string) (int64, int64, error) {
		row, err := r.tbl.ReadRow(ctx, key, filter(fam))
		if err != nil {
			return 0, 0, err
		}
		var b int64
		for _, items := range row {
			for _, it := range items {
				b += int64(len(it.Value))
			}
		}
		if b == 0 {
			return 0, 0, fmt.Errorf("row %s has no %s cell", key, fam)
		}
		return 1, b, nil
	}
	var op benchOp
	requests := n
	switch w {
	case wlSeqWrite, wlRandWrite:
		requests = (n + batch - 1) / batch
		seq := w == wlSeqWrite
		op = func(ctx context.Context, rng *rand.Rand, req int) (int64, int64, error) {
			rows := make([]int, 0, batch)
			for i := req * batch; i < min((req+1)*batch, n); i++ {
				if seq {
					rows = append(rows, i)
				} else {
					rows = append(rows, rng.IntN(n))
				}
			}
			b, err := r.write(ctx, rng, benchFamily, rows)
			return int64(len(rows)), b, err
		}
	case wlSeqRead:
		op = func(ctx context.Context, _ *rand.Rand, req int) (int64, int64, error) {
			return readOne(ctx, benchKey(req), benchFamily)
		}
	case wlRandRead:
		op = func(ctx context.Context, rng *rand.Rand, _ int) (int64, int64, error) {
			return readOne(ctx, benchKey(rng.IntN(n)), benchFamily)
		}
	case wlRandReadMem:
		op = func(ctx context.Context, rng *rand.Rand, _ int) (int64, int64, error) {
			return readOne(ctx, benchKey(rng.IntN(n)), benchMemFamily)
		}
	case wlScan:
		requests = (n + scanChunk - 1) / scanChunk
		op = func(ctx context.Context, _ *rand.Rand, req int) (int64, int64, error) {
			rng := bigtable.NewRange(benchKey(req*scanChunk), benchKey(min((req+1)*scanChunk, n)))
			var rows, b int64
			err := r.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
				rows++
				for _, it := range row[benchFamily] {
					b += int64(len(it.Value))
				}
				return true
			}, filter(benchFamily))
			return rows, b, err
		}
	}
	res, err := r.drive(ctx, r.target+" "+w, requests, op)
	res.Workload = w
	if err == nil && w == wlSeqWrite {
		if r.filled == nil {
			r.filled = map[string]bool{}
		}
		r.filled[benchFamily] = true
	}
	return res, err
}

// benchOp performs request req and returns the rows and value bytes it
// moved.
type benchOp func(ctx context.Context, rng *rand.Rand, req int) (rows, bytes int64, err error)

// drive runs requests [0, n) on cfg.concurrency workers that take the
// next request number from a shared counter — so sequential workloads
// stay nearly in order — timing each request.
func (r *benchRunner) drive(ctx context.Context, what string, n int, op benchOp) (workloadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bar := newProgress(r.progress, int64(n), what, "req")
	var next atomic.Int64
	var ops, bytes atomic.Int64
	first := newErrFirst()
	lat := make([][]time.Duration, r.cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range r.cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				req := int(next.Add(1) - 1)
				if req >= n {
					return
				}
				t0 := time.Now()
				o, b, err := op(ctx, rng, req)
				d := time.Since(t0)
				if err != nil {
					first.set(err)
					cancel()
					return
				}
				lat[w] = append(lat[w], d)
				ops.Add(o)
				bytes.Add(b)
				_ = bar.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	_ = bar.Finish()
	if err := first.get(); err != nil {
		return workloadResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return workloadResult{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := workloadResult{
		Ops:      ops.Load(),
		Requests: int64(len(all)),
		Bytes:    bytes.Load(),
		Seconds:  elapsed.Seconds(),
	}
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.MBPerSec = float64(res.Bytes) / 1e6 / res.Seconds
	res.P50Micros = float64(percentile(all, 0.50).Nanoseconds()) / 1e3
	res.P99Micros = float64(percentile(all, 0.99).Nanoseconds()) / 1e3
	return res, nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
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

// emulatorProcess is a running emulator subprocess.
type emulatorProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

// startEmulatorProcess starts the emulator and waits for the line with
// its address.
func startEmulatorProcess(b benchConfig) (*emulatorProcess, error) {
	mk := b.emulatorCmd
	if mk == nil {
		mk = func() (*exec.Cmd, error) {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			return exec.Command(self, "emulator", "--addr", "127.0.0.1:0"), nil
		}
	}
	cmd, err := mk()
	if err != nil {
		return nil, fmt.Errorf("emulator command: %w", err)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	p := &emulatorProcess{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), emulatorReadyPrefix); ok {
				lines <- a
				break
			}
		}
		// Keep draining so the child never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-lines:
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("emulator exited before it served: %v", err)
	case <-time.After(30 * time.Second):
		_ = p.stop()
		return nil, fmt.Errorf("emulator did not announce its address within 30s")
	}
}

// stop asks the emulator to exit and kills it if it does not in time.
func (p *emulatorProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("emulator did not exit on SIGTERM; killed")
	}
}
