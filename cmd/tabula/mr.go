package main

// tabula mr: run MapReduce jobs (package mapreduce) — the built-in jobs of
// mapreduce/jobs under HBase's names, and any job registered in the binary.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/jobs"
	"github.com/tabuladb/tabula/scripts"
)

func newMRCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mr",
		Short: "Run MapReduce jobs over tables: rowcounter, copytable, verify, export, import, wordcount, script",
		Long: `mr runs MapReduce jobs with tables as input splits (one map per tablet, next
to its server) and tables or files as output. The coordinator runs in this
process; tasks run on the worker of the server --addr names (tabula dev hosts
one), on tabula workers (--worker-addrs, --workers-consul), or in this
process (--workers N goroutines).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown mr verb %q: want jobs or run", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return usagef(cmd, "missing verb: jobs or run") },
	}
	cmd.AddCommand(newMRJobsCommand(), newMRRunCommand())
	return cmd
}

func newMRJobsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "jobs",
		Short: "List the registered jobs",
		Args:  argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, j := range mapreduce.Jobs() {
				fmt.Fprintf(w, "%s\t%s\n", j.Name, j.Usage)
			}
			return w.Flush()
		},
	}
}

// mrRunFlags are `mr run`'s flags.
type mrRunFlags struct {
	conn    connFlags
	workers mrWorkerFlags

	localWorkers int
	sortMemory   int64
	tempDir      string
	maxAttempts  int
	noBackups    bool
	backupAfter  time.Duration
	formats      []string
	progress     string
	httpAddr     string
	verbose      bool
	totalOrder   int

	// The input's selection.
	prefix, start, end string
	families           []string
	filter, where      string
	regex              string
	startTime, endTime string
	versions           int
	splitSize          int64
	// Outputs and job options.
	table, out, output, dstAddr, bAddr string
	reducers                           int
	timestamp                          string
	conf                               string
	maxDiffs                           int
	family                             string
	inPrefix                           string
}

func newMRRunCommand() *cobra.Command {
	var f mrRunFlags
	cmd := &cobra.Command{
		Use:   "run JOB [ARGS...] [flags]",
		Short: "Run a registered job",
		Long: `run runs a job to its end, with a live progress display (on a terminal; plain
lines every few seconds otherwise), and prints its counters. The built-in jobs:

  rowcounter TABLE              count rows (counter ROWS)
  copytable SRC DST             copy cells with their timestamps (--families old:new,
                                --start/--end, --starttime/--endtime, --versions, --dst-addr)
  verify A B                    compare two tables row by row (GOOD, ONLY_IN_A,
                                ONLY_IN_B, CONTENT_DIFFERENT and the first differing rows;
                                exits 1 when they differ)
  export TABLE --out DIR|s3://… --format parquet|jsonl
  import DIR|s3://… TABLE      (TABLE must have every family the files use: checked first;
                                the files of a job's export or of tabula export, --in-prefix)
  wordcount [TABLE]             word count of the Webtable's anchors (default table
                                webtable; --output table:NAME or DIR)
  script FILE --table T         any script as a job; prints like tabula script run,
                                or --output table:NAME
  JOB --conf JSON               any other registered job, configured by its JSON

Input flags (--prefix, --start, --end, --families, --filter, --regex, --where,
--starttime, --endtime, --versions) select rows and cells inside the servers.
By default a job reads the cells written up to its start (a consistent view).
Everything is checked before any task starts: an unknown job, a missing table,
an invalid filter or script, an unwritable output fail with nothing written.`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runMR(ctx, cmd, args, f)
		},
	}
	fs := cmd.Flags()
	f.conn.register(fs)
	f.workers.register(cmd)
	fs.IntVar(&f.localWorkers, "workers", 4, "in-process workers (goroutines) when no remote workers are used")
	fs.Int64Var(&f.sortMemory, "sort-memory", mapreduce.DefaultSortMemory, "map-side sort buffer per in-process attempt, bytes (spills beyond)")
	fs.StringVar(&f.tempDir, "temp-dir", "", "where in-process workers keep map outputs and spills (default: the system's)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 4, "attempts per task before the job fails")
	fs.BoolVar(&f.noBackups, "no-backups", false, "no speculative backup attempts for stragglers")
	fs.DurationVar(&f.backupAfter, "backup-after", 5*time.Second, "least run time before a straggler gets a backup attempt")
	fs.StringSliceVar(&f.formats, "format", nil, "how to print (text or json) and, for file outputs, the file format (parquet or jsonl); e.g. --format parquet,json")
	fs.StringVar(&f.progress, "progress", "auto", "progress display: auto (a bar on a terminal, lines otherwise), bar, lines, none")
	fs.StringVar(&f.httpAddr, "http", "", "serve /metrics (Prometheus) and /status (JSON) of the job on this address while it runs")
	fs.BoolVar(&f.verbose, "verbose", false, "log task attempts to stderr")
	fs.IntVar(&f.totalOrder, "total-order", 0, "jobs with reducers: partition by ranges of map keys sampled from the first N rows of each split, so the outputs in partition order are globally sorted (0: hash partitioning)")

	fs.StringVar(&f.prefix, "prefix", "", "input: only rows starting with this prefix")
	fs.StringVar(&f.start, "start", "", "input: first row of the range")
	fs.StringVar(&f.end, "end", "", "input: row after the range (exclusive)")
	fs.StringSliceVar(&f.families, "families", nil, "input: only these families (copytable: old:new renames)")
	fs.StringVar(&f.filter, "filter", "", "input: a Bigtable RowFilter in protobuf text or JSON form, run in the servers (e.g. 'row_key_regex_filter: \"^com\\\\.\"')")
	fs.StringVar(&f.regex, "regex", "", "input: only rows whose key matches this RE2 expression (in the servers)")
	fs.StringVar(&f.where, "where", "", "input: a filter script file (one that emits to keep), run in the servers")
	fs.StringVar(&f.startTime, "starttime", "", "input: only cells at or after this time (µs since the epoch or RFC 3339)")
	fs.StringVar(&f.endTime, "endtime", "", "input: only cells before this time (default: the job's start)")
	fs.IntVar(&f.versions, "versions", 0, "input: only the newest N versions of each column (0: all)")
	fs.Int64Var(&f.splitSize, "split-size", 0, "input: sub-split tablets larger than this many bytes (0: 256 MiB)")

	fs.StringVar(&f.table, "table", "", "script: the table to run over")
	fs.StringVar(&f.out, "out", "", "export: the output directory or s3://bucket/prefix?endpoint=…")
	fs.StringVar(&f.output, "output", "", "wordcount, script: table:NAME, a directory or s3://… (default: print only)")
	fs.StringVar(&f.family, "family", "", "wordcount, script: the family of the output cells (default count, result)")
	fs.StringVar(&f.dstAddr, "dst-addr", "", "copytable: the destination cluster (default --addr)")
	fs.StringVar(&f.bAddr, "b-addr", "", "verify: the cluster of table B (default --addr)")
	fs.IntVar(&f.maxDiffs, "max-diffs", 10, "verify: differing rows to print")
	fs.StringVar(&f.inPrefix, "in-prefix", "", "import: the files' prefix, PREFIX-SSSSS-of-NNNNN.parquet|jsonl (default: part, or the one set DIR holds, as tabula export's TABLE-…)")
	fs.IntVar(&f.reducers, "reducers", 0, "wordcount: reduce tasks (default 4)")
	fs.StringVar(&f.conf, "conf", "", "other jobs: the job's JSON configuration")
	fs.StringVar(&f.timestamp, "timestamp", "", "the timestamp (µs since the epoch or RFC 3339) of the cells a job creates (wordcount, script); default: the newest input cell's for jobs that map rows, else the job's start. The same value makes a re-run rewrite the same cells")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// mrJob is a job ready to run and how to print its result.
type mrJob struct {
	name  string
	conf  []byte
	print func(w io.Writer, res *mapreduce.Result, asJSON bool) (any, error)
	// check runs before the job, against the cluster (admin API).
	check func(ctx context.Context, c *conn) error
	// verdict, when set, judges a finished job's result after it is
	// printed: an error makes the command exit non-zero (verify's tables
	// that differ), so that scripts can tell.
	verdict func(res *mapreduce.Result) error
}

func runMR(ctx context.Context, cmd *cobra.Command, args []string, f mrRunFlags) error {
	printJSON, fileFormat := false, ""
	for _, v := range f.formats {
		switch strings.ToLower(v) {
		case "text":
			printJSON = false
		case "json":
			printJSON = true
		case "parquet", "jsonl":
			fileFormat = strings.ToLower(v)
		default:
			return usagef(cmd, "--format %q: want text, json, parquet or jsonl", v)
		}
	}
	switch f.progress {
	case "auto", "bar", "lines", "none":
	default:
		return usagef(cmd, "--progress %q: want auto, bar, lines or none", f.progress)
	}
	if f.localWorkers < 1 || f.maxAttempts < 1 || f.sortMemory < 64<<10 {
		return usagef(cmd, "--workers and --max-attempts must be ≥ 1, --sort-memory ≥ 64 KiB")
	}
	name := args[0]
	if _, ok := mapreduce.Lookup(name); !ok {
		return usagef(cmd, "unknown job %q (tabula mr jobs lists them)", name)
	}
	j, err := buildMRJob(cmd, name, args[1:], f, fileFormat)
	if err != nil {
		return err
	}
	job, err := mapreduce.Build(j.name, j.conf)
	if err != nil {
		var ce *scripts.CompileError
		if errors.As(err, &ce) {
			printCompileError(cmd.ErrOrStderr(), f.where+f.conf, err)
		}
		return fmt.Errorf("mr run: %w", err)
	}
	if f.timestamp != "" {
		ts, err := parseTime("timestamp", f.timestamp)
		if err != nil {
			return usagef(cmd, "%v", err)
		}
		if ts <= 0 {
			return usagef(cmd, "--timestamp must be after the epoch")
		}
		job.Timestamp = ts
	}
	c, err := f.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if j.check != nil {
		cctx, cancel := context.WithTimeout(ctx, defaultTimeout)
		err := j.check(cctx, c)
		cancel()
		if err != nil {
			return fmt.Errorf("mr run %s: %w", name, describe(err))
		}
	}
	logger := slog.New(slog.DiscardHandler)
	if f.verbose {
		logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	}
	f.workers.tls = c.tls
	f.workers.token = f.conn.token
	workers, release, err := f.workers.workers(ctx, f.conn.addr, logger)
	if err != nil {
		return fmt.Errorf("mr run: %w", err)
	}
	defer release()
	reg := prometheus.NewRegistry()
	cfg := mapreduce.Config{
		Addr: f.conn.addr, Workers: workers, LocalWorkers: f.localWorkers, SortMemory: f.sortMemory, TempDir: f.tempDir,
		MaxAttempts: f.maxAttempts, NoSpeculation: f.noBackups, BackupAfter: f.backupAfter,
		Metrics: mapreduce.NewMetrics(reg), Logger: logger,
	}
	// The coordinator's own table clients (splits, checks, in-process
	// tasks) use the command's TLS and token, as the workers do.
	cfg.Client.Project, cfg.Client.Instance, cfg.Client.Token, cfg.Client.TLS = f.conn.project, f.conn.instance, f.conn.token, c.tls
	if f.workers.pool != nil {
		cfg.Discover = f.workers.pool.Workers
	}
	var last atomic.Pointer[mapreduce.Status]
	last.Store(&mapreduce.Status{})
	if f.httpAddr != "" {
		stopHTTP, err := serveMRStatus(f.httpAddr, reg, func() mapreduce.Status { return *last.Load() })
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	show := newMRProgress(cmd.ErrOrStderr(), f.progress)
	cfg.Progress = func(s mapreduce.Status) { last.Store(&s); show(s) }
	if f.totalOrder > 0 {
		if job.Reducers == 0 {
			return usagef(cmd, "--total-order: %s has no reducers", name)
		}
		if err := mapreduce.TotalOrder(ctx, job, cfg, f.totalOrder); err != nil {
			return fmt.Errorf("mr run %s: --total-order: %w", name, describe(err))
		}
	}
	res, err := mapreduce.Run(ctx, job, cfg)
	if err != nil {
		return fmt.Errorf("mr run %s: %w", name, describe(err))
	}
	if err := printMRResult(cmd.OutOrStdout(), j, res, printJSON); err != nil {
		return err
	}
	if j.verdict != nil {
		return j.verdict(res)
	}
	return nil
}

// tableSpec builds the input selection of table from the flags.
func (f mrRunFlags) tableSpec(cmd *cobra.Command, table string) (jobs.TableSpec, error) {
	s := jobs.TableSpec{Addr: "", Table: table, Prefix: []byte(f.prefix), Start: []byte(f.start), End: []byte(f.end),
		Families: f.families, MaxVersions: f.versions, SplitBytes: f.splitSize}
	if f.prefix != "" && (f.start != "" || f.end != "") {
		return s, usagef(cmd, "--prefix cannot be combined with --start or --end")
	}
	if f.start != "" && f.end != "" && f.start >= f.end {
		return s, usagef(cmd, "--start %q is not before --end %q", f.start, f.end)
	}
	if f.versions < 0 {
		return s, usagef(cmd, "--versions %d: want ≥ 0", f.versions)
	}
	var err error
	if s.StartTime, err = parseTime("starttime", f.startTime); err != nil {
		return s, usagef(cmd, "%v", err)
	}
	if s.EndTime, err = parseTime("endtime", f.endTime); err != nil {
		return s, usagef(cmd, "%v", err)
	}
	if s.EndTime != 0 && s.EndTime <= s.StartTime {
		return s, usagef(cmd, "--endtime must be after --starttime")
	}
	var chain []*bigtablepb.RowFilter
	if f.filter != "" {
		rf := &bigtablepb.RowFilter{}
		text := strings.TrimSpace(f.filter)
		if strings.HasPrefix(text, "{") {
			err = protojson.Unmarshal([]byte(text), rf)
		} else {
			err = prototext.Unmarshal([]byte(text), rf)
		}
		if err != nil {
			return s, usagef(cmd, "--filter: not a RowFilter: %v", err)
		}
		chain = append(chain, rf)
	}
	if f.regex != "" {
		chain = append(chain, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: []byte(f.regex)}})
	}
	switch len(chain) {
	case 1:
		err = s.SetFilter(chain[0])
	case 2:
		err = s.SetFilter(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: chain}}})
	}
	if err != nil {
		return s, err
	}
	if f.where != "" {
		src, err := os.ReadFile(f.where)
		if err != nil {
			return s, fmt.Errorf("--where: %w", err)
		}
		if _, err := scripts.Compile(f.where, string(src)); err != nil {
			var ce *scripts.CompileError
			if errors.As(err, &ce) {
				printCompileError(cmd.ErrOrStderr(), f.where, err)
				return s, fmt.Errorf("--where %s: %s", f.where, nOf(len(ce.Diagnostics), "error", "errors"))
			}
			return s, err
		}
		s.Where = string(src)
	}
	return s, nil
}

// outputSpec parses --output: table:NAME, a directory, or s3://….
func (f mrRunFlags) outputSpec(cmd *cobra.Command, fileFormat string) (jobs.OutputSpec, error) {
	switch {
	case f.output == "":
		return jobs.OutputSpec{}, nil
	case strings.HasPrefix(f.output, "table:"):
		t := strings.TrimPrefix(f.output, "table:")
		if t == "" {
			return jobs.OutputSpec{}, usagef(cmd, "--output table: needs a table name")
		}
		return jobs.OutputSpec{Table: t}, nil
	}
	if fileFormat == "" {
		fileFormat = "jsonl"
	}
	return jobs.OutputSpec{URL: f.output, Format: fileFormat}, nil
}

// needArgs checks a built-in job's positional arguments.
func needArgs(cmd *cobra.Command, name string, args []string, want ...string) error {
	if len(args) != len(want) {
		return usagef(cmd, "%s takes %s (got %d arguments)", name, strings.Join(want, " "), len(args))
	}
	return nil
}

func buildMRJob(cmd *cobra.Command, name string, args []string, f mrRunFlags, fileFormat string) (mrJob, error) {
	j := mrJob{name: name}
	noDupFamilies := func() error {
		for _, fam := range f.families {
			if strings.Contains(fam, ":") {
				return usagef(cmd, "--families %q: renames (old:new) are for copytable", fam)
			}
		}
		return nil
	}
	switch name {
	case "rowcounter":
		if err := needArgs(cmd, name, args, "TABLE"); err != nil {
			return j, err
		}
		if err := noDupFamilies(); err != nil {
			return j, err
		}
		in, err := f.tableSpec(cmd, args[0])
		if err != nil {
			return j, err
		}
		j.conf = jobs.Conf(jobs.RowCounterConf{Input: in})
	case "copytable":
		if err := needArgs(cmd, name, args, "SRC", "DST"); err != nil {
			return j, err
		}
		rename := map[string]string{}
		plain := f
		plain.families = nil
		in, err := plain.tableSpec(cmd, args[0])
		if err != nil {
			return j, err
		}
		for _, fam := range f.families {
			old, nw, ok := strings.Cut(fam, ":")
			if !ok {
				nw = old
			}
			rename[old] = nw
		}
		if len(rename) == 0 {
			rename = nil
		}
		conf := jobs.CopyTableConf{Input: in, Dst: args[1], DstAddr: f.dstAddr, Rename: rename}
		j.conf = jobs.Conf(conf)
		j.check = func(ctx context.Context, c *conn) error {
			return checkCopyFamilies(ctx, c, conf, f.dstAddr)
		}
	case "verify":
		if err := needArgs(cmd, name, args, "A", "B"); err != nil {
			return j, err
		}
		if err := noDupFamilies(); err != nil {
			return j, err
		}
		in, err := f.tableSpec(cmd, args[0])
		if err != nil {
			return j, err
		}
		j.conf = jobs.Conf(jobs.VerifyConf{A: in, B: args[1], BAddr: f.bAddr, MaxDiffs: f.maxDiffs})
		j.print = func(w io.Writer, res *mapreduce.Result, asJSON bool) (any, error) {
			diffs, err := jobs.VerifyDiffs(res, f.maxDiffs)
			if diffs == nil {
				diffs = []jobs.VerifyDiff{}
			}
			if err != nil || asJSON {
				return diffs, err
			}
			for _, d := range diffs {
				fmt.Fprintf(w, "%s\t%q\n", d.Kind, d.Row)
			}
			return nil, nil
		}
		j.verdict = func(res *mapreduce.Result) error {
			c := res.Counters
			if n := c[jobs.CounterOnlyInA] + c[jobs.CounterOnlyInB] + c[jobs.CounterContentDifferent]; n > 0 {
				return fmt.Errorf("mr run verify: %s and %s differ in %d rows (%s %d, %s %d, %s %d)", args[0], args[1], n,
					jobs.CounterOnlyInA, c[jobs.CounterOnlyInA], jobs.CounterOnlyInB, c[jobs.CounterOnlyInB],
					jobs.CounterContentDifferent, c[jobs.CounterContentDifferent])
			}
			return nil
		}
	case "export":
		if err := needArgs(cmd, name, args, "TABLE"); err != nil {
			return j, err
		}
		if err := noDupFamilies(); err != nil {
			return j, err
		}
		if f.out == "" {
			return j, usagef(cmd, "export needs --out DIR|s3://…")
		}
		if fileFormat == "" {
			return j, usagef(cmd, "export needs --format parquet or jsonl")
		}
		in, err := f.tableSpec(cmd, args[0])
		if err != nil {
			return j, err
		}
		j.conf = jobs.Conf(jobs.ExportConf{Input: in, Out: f.out, Format: fileFormat})
	case "import":
		if err := needArgs(cmd, name, args, "DIR", "TABLE"); err != nil {
			return j, err
		}
		j.conf = jobs.Conf(jobs.ImportConf{In: args[0], Table: args[1], Prefix: f.inPrefix})
		j.check = importFamilyCheck(args[0], f.inPrefix, args[1])
	case "wordcount":
		if len(args) > 1 {
			return j, usagef(cmd, "wordcount takes at most TABLE")
		}
		table := "webtable"
		if len(args) == 1 {
			table = args[0]
		}
		if err := noDupFamilies(); err != nil {
			return j, err
		}
		in, err := f.tableSpec(cmd, table)
		if err != nil {
			return j, err
		}
		out, err := f.outputSpec(cmd, fileFormat)
		if err != nil {
			return j, err
		}
		family := f.family
		if family == "" {
			family = "count"
		}
		j.conf = jobs.Conf(jobs.WordCountConf{Input: in, Output: out, Family: f.family, Reducers: f.reducers})
		j.check = outputFamilyCheck(out, family)
	case "script":
		if err := needArgs(cmd, name, args, "FILE"); err != nil {
			return j, err
		}
		if f.table == "" {
			return j, usagef(cmd, "script needs --table")
		}
		if f.where != "" {
			return j, usagef(cmd, "script: the script is the job; --where does not apply")
		}
		if err := noDupFamilies(); err != nil {
			return j, err
		}
		src, err := os.ReadFile(args[0])
		if err != nil {
			return j, err
		}
		if _, err := scripts.Compile(args[0], string(src)); err != nil {
			return j, compileOrRPCError(cmd, args[0], err)
		}
		in, err := f.tableSpec(cmd, f.table)
		if err != nil {
			return j, err
		}
		out, err := f.outputSpec(cmd, fileFormat)
		if err != nil {
			return j, err
		}
		family := f.family
		if family == "" {
			family = "result"
		}
		j.conf = jobs.Conf(jobs.ScriptConf{Input: in, Name: args[0], Source: string(src), Output: out, Family: f.family})
		j.check = outputFamilyCheck(out, family)
		j.print = func(w io.Writer, res *mapreduce.Result, asJSON bool) (any, error) {
			r, err := jobs.ScriptResult(res, args[0], string(src))
			if err != nil {
				return nil, err
			}
			if asJSON {
				b, err := r.MarshalJSON()
				return json.RawMessage(b), err
			}
			return nil, r.WriteText(w)
		}
	default:
		if len(args) > 0 {
			return j, usagef(cmd, "%s is configured by --conf JSON, not arguments", name)
		}
		if f.conf == "" {
			return j, usagef(cmd, "%s needs --conf JSON", name)
		}
		j.conf = []byte(f.conf)
	}
	return j, nil
}

// outputFamilyCheck checks that an output table has the family the job
// writes, so that no row is written before a missing family fails it.
func outputFamilyCheck(out jobs.OutputSpec, family string) func(context.Context, *conn) error {
	if out.Table == "" {
		return nil
	}
	return func(ctx context.Context, c *conn) error {
		info, err := c.admin.TableInfo(ctx, out.Table)
		if err != nil {
			return fmt.Errorf("output table %q: %w", out.Table, err)
		}
		if !slices.Contains(info.Families, family) {
			return fmt.Errorf("output table %q has no family %q (create it: tabula createfamily %s %s)", out.Table, family, out.Table, family)
		}
		return nil
	}
}

// checkCopyFamilies checks that the destination has every family the copy
// writes.
func checkCopyFamilies(ctx context.Context, c *conn, conf jobs.CopyTableConf, dstAddr string) error {
	src, err := c.admin.TableInfo(ctx, conf.Input.Table)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("source table %q not found", conf.Input.Table)
		}
		return fmt.Errorf("source table %q: %w", conf.Input.Table, err)
	}
	dstConn := c
	if dstAddr != "" && dstAddr != c.names.addr {
		names := c.names
		names.addr = dstAddr
		if dstConn, err = names.dial(ctx); err != nil {
			return err
		}
		defer dstConn.Close()
	}
	dst, err := dstConn.admin.TableInfo(ctx, conf.Dst)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("destination table %q not found", conf.Dst)
		}
		return fmt.Errorf("destination table %q: %w", conf.Dst, err)
	}
	want := src.Families
	if len(conf.Rename) > 0 {
		want = nil
		for old, nw := range conf.Rename {
			if !slices.Contains(src.Families, old) {
				return fmt.Errorf("source table %q has no family %q", conf.Input.Table, old)
			}
			want = append(want, nw)
		}
	} else if len(conf.Input.Families) > 0 {
		want = conf.Input.Families
	}
	want = slices.Sorted(slices.Values(want))
	for _, fam := range want {
		if !slices.Contains(dst.Families, fam) {
			return fmt.Errorf("destination table %q has no family %q", conf.Dst, fam)
		}
	}
	return nil
}

// printMRResult prints the job's outcome: job-specific output, then the
// counters (text), or one JSON object.
func printMRResult(out io.Writer, j mrJob, res *mapreduce.Result, asJSON bool) error {
	w := bufio.NewWriter(out)
	var extra any
	if j.print != nil {
		var err error
		if extra, err = j.print(w, res, asJSON); err != nil {
			return err
		}
	}
	if asJSON {
		obj := map[string]any{
			"job_id": res.JobID, "job": j.name, "elapsed_seconds": res.Elapsed.Seconds(),
			"counters": res.Counters, "output_timestamp": res.Timestamp,
		}
		if res.Files != nil {
			obj["files"] = res.Files
		}
		if extra != nil {
			obj["result"] = extra
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
		return w.Flush()
	}
	fmt.Fprintf(w, "job %s succeeded in %s\n", res.JobID, res.Elapsed.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, name := range res.Counters.Names() {
		fmt.Fprintf(tw, "  %s\t%d\n", name, res.Counters[name])
	}
	tw.Flush()
	for _, file := range res.Files {
		fmt.Fprintf(w, "  wrote %s\n", file)
	}
	return w.Flush()
}

// newMRProgress returns the progress display: a bar on a terminal, a
// plain line every 5 s otherwise (or as mode says).
func newMRProgress(w io.Writer, mode string) func(mapreduce.Status) {
	if mode == "none" {
		return func(mapreduce.Status) {}
	}
	if mode == "bar" || mode == "auto" && isTerminal(w) {
		var bar interface {
			Describe(string)
			Set64(int64) error
			ChangeMax64(int64)
			Finish() error
		}
		return func(s mapreduce.Status) {
			total := int64(s.Map.Total + s.Reduce.Total)
			if bar == nil {
				bar = newProgressBar(w, max(total, 1), "mr", "tasks")
			}
			bar.ChangeMax64(max(total, 1))
			bar.Describe(mrProgressLine(s))
			bar.Set64(int64(s.Map.Done + s.Reduce.Done))
			if s.Done {
				bar.Finish()
			}
		}
	}
	var lastLine time.Time
	return func(s mapreduce.Status) {
		if !s.Done && time.Since(lastLine) < 5*time.Second {
			return
		}
		lastLine = time.Now()
		fmt.Fprintf(w, "mr %s: %s\n", s.JobID, mrProgressLine(s))
	}
}

// mrProgressLine is one line of progress: tasks done/running/failed per
// phase, throughput, ETA.
func mrProgressLine(s mapreduce.Status) string {
	c := s.Counters
	secs := max(s.Elapsed.Seconds(), 1e-3)
	rows, bytes := c[mapreduce.CounterInputRows], c[mapreduce.CounterInputBytes]
	line := fmt.Sprintf("map %d/%d (%d running, %d failed)", s.Map.Done, s.Map.Total, s.Map.Running, s.Map.Failed)
	if s.Reduce.Total > 0 {
		line += fmt.Sprintf(", reduce %d/%d (%d running, %d failed)", s.Reduce.Done, s.Reduce.Total, s.Reduce.Running, s.Reduce.Failed)
	}
	line += fmt.Sprintf(", %.0f rows/s, %.1f MB/s", float64(rows)/secs, float64(bytes)/1e6/secs)
	if !s.Done {
		if eta, ok := mrETA(s); ok {
			line += ", ETA " + eta.Round(time.Second).String()
		}
	}
	return line
}

// mrETA estimates the time left from the input read so far against the
// sampled size, or from the tasks done.
func mrETA(s mapreduce.Status) (time.Duration, bool) {
	var frac float64
	if est := s.InputBytesEstimate; est > 0 {
		frac = min(1, float64(s.Counters[mapreduce.CounterInputBytes])/float64(est))
	} else if total := s.Map.Total + s.Reduce.Total; total > 0 {
		frac = float64(s.Map.Done+s.Reduce.Done) / float64(total)
	}
	if frac <= 0 {
		return 0, false
	}
	return time.Duration(float64(s.Elapsed) * (1 - frac) / frac), true
}

// serveMRStatus serves the job's metrics and status while it runs.
func serveMRStatus(addr string, reg *prometheus.Registry, status func() mapreduce.Status) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(status())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	return func() { srv.Close() }, nil
}
