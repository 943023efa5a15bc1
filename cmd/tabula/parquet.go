package main

// `tabula export parquet|jsonl` and `tabula import parquet|jsonl`: a table
// to sharded files and back, without Beam or MapReduce. Files are those of
// package rowfile (the Cloud Bigtable → Parquet template's layout), so the
// template's importer, Spark, DuckDB and Arrow read what export writes, and
// import reads what the template writes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func newExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export a table to sharded files (parquet, jsonl)",
		// The flags belong to the format's subcommand: an unknown format
		// followed by them must be reported as the format, not a flag.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown export format %q: want parquet or jsonl", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef(cmd, "missing the format: parquet or jsonl")
		},
	}
	cmd.AddCommand(newExportFormatCommand(rowfile.Parquet), newExportFormatCommand(rowfile.JSONL))
	return cmd
}

func newImportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Import sharded files (parquet, jsonl) into a table",
		// The flags belong to the format's subcommand: an unknown format
		// followed by them must be reported as the format, not a flag.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown import format %q: want parquet or jsonl", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef(cmd, "missing the format: parquet or jsonl")
		},
	}
	cmd.AddCommand(newImportFormatCommand(rowfile.Parquet), newImportFormatCommand(rowfile.JSONL))
	return cmd
}

// exportJob is the configuration of one export.
type exportJob struct {
	conn        connFlags
	table       string
	out         string
	prefix      string
	shards      int
	layout      string
	codec       string
	columns     string
	start, end  string
	rowPrefix   string
	startTime   string
	endTime     string
	concurrency int
	overwrite   bool
	timeout     time.Duration
}

func newExportFormatCommand(format rowfile.Format) *cobra.Command {
	var j exportJob
	name := format.Ext()
	cmd := &cobra.Command{
		Use:   name + " TABLE --out DIR|s3://BUCKET/PATH?endpoint=HOST:PORT",
		Short: "Export a table to " + name + " files, one per shard, split on tablet boundaries",
		Long: `export ` + name + ` scans TABLE (every version of every cell, or the rows and
times selected) and writes it to --shards files named PREFIX-SSSSS-of-NNNNN.` + name + `
in --out: a local directory or an S3/MinIO path (credentials from
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Shards split the table on
tablet boundaries (at sampled keys when there are more shards than
tablets) and are written concurrently. Each file appears under its name
only once it is complete; if the export fails, the files it committed are
removed again, so a directory never holds a complete-looking set that is
not.

Parquet files have the layout of Google's Cloud Bigtable to Parquet
template (--layout template: one record per row, {key, cells: [{family,
qualifier, timestamp, value}]}); --layout columns writes one column per
family:qualifier with the newest value instead, for analysts (--columns
names them; without it a first scan finds them). JSON Lines hold one
object per row: {"key": base64, "cells": [{"family", "qualifier": base64,
"timestamp": µs, "value": base64}]}.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j.table = args[0]
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runExport(ctx, cmd, j, format)
		},
	}
	fs := cmd.Flags()
	j.conn.register(fs)
	fs.StringVar(&j.out, "out", "", "destination: a directory, file:///dir, or s3://bucket/path?endpoint=host:port&secure=false (required)")
	fs.StringVar(&j.prefix, "prefix", "", "file name prefix (default: the table ID)")
	fs.IntVar(&j.shards, "shards", 0, "number of files (default: one per tablet, at most 64)")
	if format != rowfile.JSONL {
		fs.StringVar(&j.layout, "layout", "template", "template (every version, the Dataflow template's schema) or columns (newest value per column)")
		fs.StringVar(&j.codec, "codec", "snappy", "compression: snappy, zstd, gzip or none")
		fs.StringVar(&j.columns, "columns", "", "columns layout: family:qualifier,... (default: every column found by a first scan)")
	}
	fs.StringVar(&j.start, "start", "", "first row key (inclusive)")
	fs.StringVar(&j.end, "end", "", "last row key (exclusive)")
	fs.StringVar(&j.rowPrefix, "prefix-rows", "", "only rows whose key starts with this")
	fs.StringVar(&j.startTime, "starttime", "", "only cells at or after this time: microseconds since the epoch or RFC 3339")
	fs.StringVar(&j.endTime, "endtime", "", "only cells before this time: microseconds since the epoch or RFC 3339")
	fs.IntVar(&j.concurrency, "concurrency", 4, "shards written at once")
	fs.BoolVar(&j.overwrite, "overwrite", false, "replace files of the same prefix already in --out")
	fs.DurationVar(&j.timeout, "timeout", defaultTimeout, "give up on an unreachable server after this long")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// parseTime parses a --starttime/--endtime: microseconds since the epoch,
// or an RFC 3339 time.
func parseTime(flag, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if us, err := strconv.ParseInt(s, 10, 64); err == nil {
		if us < 0 {
			return 0, fmt.Errorf("--%s=%s: must not be negative", flag, s)
		}
		return us, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--%s=%q: want microseconds since the epoch or an RFC 3339 time (2024-01-02T15:04:05Z)", flag, s)
	}
	if t.Before(time.Unix(0, 0)) {
		return 0, fmt.Errorf("--%s=%s: before the epoch", flag, s)
	}
	return t.UnixMicro(), nil
}

// keyRange is the rows [Start, End) of one shard; nil End is the end of
// the table. An empty range (Empty) still gets its (empty) file, so the
// set has the shard count its names promise.
type keyRange struct {
	Start, End []byte
	Empty      bool
}

// planShards splits the rows [start, end) (nil end: the end of the table)
// into n ranges for n shards. Boundaries are tablet starts (so that a
// shard's scan stays on few servers), or, when there are fewer tablets
// than shards, also sampled keys inside tablets; among them it picks the
// ones nearest to equal shares of the bytes the samples estimate (equal
// counts of candidates when the samples say nothing). With fewer
// candidates than n-1 the last ranges are empty.
func planShards(tabletStarts [][]byte, samples []client.RowSample, n int, start, end []byte) []keyRange {
	inside := func(k []byte) bool {
		return len(k) > 0 && bytes.Compare(k, start) > 0 && (end == nil || bytes.Compare(k, end) < 0)
	}
	var cands [][]byte
	for _, k := range tabletStarts {
		if inside(k) {
			cands = append(cands, k)
		}
	}
	if len(cands) < n-1 {
		for _, s := range samples {
			if inside(s.Key) {
				cands = append(cands, s.Key)
			}
		}
	}
	slices.SortFunc(cands, bytes.Compare)
	cands = slices.CompactFunc(cands, bytes.Equal)

	// offset estimates the bytes of the table before key k: the offset of
	// the last sample at or before it.
	offset := func(k []byte) int64 {
		var off int64
		for _, s := range samples {
			if len(s.Key) == 0 || bytes.Compare(s.Key, k) > 0 {
				break
			}
			off = s.Offset
		}
		return off
	}
	lo := offset(start)
	hi := lo
	if end != nil {
		hi = offset(end)
	} else if len(samples) > 0 {
		hi = samples[len(samples)-1].Offset
	}

	var bounds [][]byte
	if len(cands) <= n-1 {
		bounds = cands
	} else {
		next := 0 // first candidate still available
		for i := 1; i < n; i++ {
			last := len(cands) - (n - i) // leave one candidate per later boundary
			best := next
			if hi > lo {
				target := lo + (hi-lo)*int64(i)/int64(n)
				bestDist := int64(-1)
				for c := next; c <= last; c++ {
					d := offset(cands[c]) - target
					if d < 0 {
						d = -d
					}
					if bestDist < 0 || d < bestDist {
						best, bestDist = c, d
					}
				}
			} else {
				best = max(next, min(last, i*len(cands)/n))
			}
			bounds = append(bounds, cands[best])
			next = best + 1
		}
	}
	ranges := make([]keyRange, 0, n)
	from := start
	for _, b := range bounds {
		ranges = append(ranges, keyRange{Start: from, End: b})
		from = b
	}
	ranges = append(ranges, keyRange{Start: from, End: end})
	for len(ranges) < n {
		ranges = append(ranges, keyRange{Empty: true})
	}
	return ranges
}

// exportSummary is what an export wrote.
type exportSummary struct {
	Rows, Cells int64
	Payload     int64 // bytes of keys and cells read from the table
	Bytes       int64 // bytes of the files
	Files       []string
	Elapsed     time.Duration
}

func runExport(ctx context.Context, cmd *cobra.Command, j exportJob, format rowfile.Format) error {
	out, progressOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if j.out == "" {
		return usagef(cmd, "--out is required")
	}
	if j.prefix == "" {
		j.prefix = path.Base(j.table) // the table ID of a full projects/P/instances/I/tables/T name
	}
	if strings.Contains(j.prefix, "/") {
		return usagef(cmd, "--prefix %q must not contain '/'; put directories in --out", j.prefix)
	}
	if j.shards < 0 || j.shards > rowfile.MaxShards {
		return usagef(cmd, "--shards must be in [1, %d]", rowfile.MaxShards)
	}
	if j.concurrency < 1 {
		return usagef(cmd, "--concurrency must be at least 1")
	}
	if format != rowfile.JSONL {
		switch j.layout {
		case "template":
		case "columns":
			format = rowfile.ParquetColumns
		default:
			return usagef(cmd, "--layout %q: want template or columns", j.layout)
		}
	}
	codec, err := rowfile.ParseCodec(j.codec)
	if err != nil {
		return usagef(cmd, "--codec %q: want snappy, zstd, gzip or none", j.codec)
	}
	var columns []rowfile.Column
	for _, s := range splitList(j.columns) {
		c, err := rowfile.ParseColumn(s)
		if err != nil {
			return usagef(cmd, "--columns: %v", err)
		}
		columns = append(columns, c)
	}
	scan := client.ScanOptions{}
	if j.rowPrefix != "" {
		if j.start != "" || j.end != "" {
			return usagef(cmd, "--prefix-rows cannot be combined with --start or --end")
		}
		scan.Start, scan.End = []byte(j.rowPrefix), cell.PrefixSuccessor([]byte(j.rowPrefix))
	} else {
		scan.Start = []byte(j.start)
		if j.end != "" {
			scan.End = []byte(j.end)
		}
	}
	if (tabletdesc.KeyRange{Start: scan.Start, End: scan.End}).Empty() {
		return usagef(cmd, "--start %q is not before --end %q", scan.Start, scan.End)
	}
	if scan.StartTime, err = parseTime("starttime", j.startTime); err != nil {
		return usagef(cmd, "%v", err)
	}
	if scan.EndTime, err = parseTime("endtime", j.endTime); err != nil {
		return usagef(cmd, "%v", err)
	}
	if scan.EndTime != 0 && scan.EndTime <= scan.StartTime {
		return usagef(cmd, "--endtime must be after --starttime")
	}

	loc, err := rowfile.OpenLocation(ctx, j.out)
	if err != nil {
		return err
	}
	tc, err := j.conn.tls.config()
	if err != nil {
		return err
	}
	cl, err := client.Dial(j.conn.addr, client.Options{Project: j.conn.project, Instance: j.conn.instance, TLS: tc, Token: j.conn.token})
	if err != nil {
		return err
	}
	defer cl.Close()

	// The table's layout; an unreachable server or a missing table ends
	// the export here, before any file is touched.
	plan, err := func() ([]keyRange, error) {
		pctx, cancel := context.WithTimeout(ctx, j.timeout)
		defer cancel()
		tablets, err := cl.Tablets(pctx, j.table)
		if err != nil {
			return nil, serverErr(j.conn.addr, j.table, err)
		}
		samples, err := cl.SampleRowKeys(pctx, j.table)
		if err != nil {
			return nil, serverErr(j.conn.addr, j.table, err)
		}
		starts := make([][]byte, len(tablets))
		n := 0
		for i, t := range tablets {
			starts[i] = t.Start
			if (tabletdesc.KeyRange{Start: t.Start, End: t.End}).Overlaps(tabletdesc.KeyRange{Start: scan.Start, End: scan.End}) {
				n++
			}
		}
		if j.shards == 0 {
			j.shards = min(max(n, 1), 64)
		}
		return planShards(starts, samples, j.shards, scan.Start, scan.End), nil
	}()
	if err != nil {
		return err
	}

	if format == rowfile.ParquetColumns && len(columns) == 0 {
		if columns, err = findColumns(ctx, cl, j.table, scan); err != nil {
			return err
		}
		if len(columns) == 0 {
			return fmt.Errorf("export %s: no cells in the rows and times selected, so no columns for --layout columns", j.table)
		}
	} else if format == rowfile.ParquetColumns {
		// Columns chosen by name: a family the table lacks is a mistake,
		// not an empty column.
		if err := checkColumnFamilies(ctx, j, columns); err != nil {
			return err
		}
		// Read only those columns: the rest would be read and dropped.
		scan.Filter = columnsRowFilter(columns)
	}
	if format == rowfile.ParquetColumns {
		if _, err := rowfile.ColumnsSchema(columns); err != nil {
			return fmt.Errorf("export %s: %w (choose columns with --columns)", j.table, err)
		}
		scan.MaxVersions = 1 // only the newest value is written
	}

	// Files of the same prefix already there would mix with the new set.
	names, err := loc.List(ctx)
	if err != nil {
		return err
	}
	if old := rowfile.MatchShards(names, j.prefix, format.Ext()); len(old) > 0 {
		if !j.overwrite {
			return fmt.Errorf("export %s: %s already holds %d files named %s-*.%s (%s...); use --overwrite to replace them or another --prefix",
				j.table, loc, len(old), j.prefix, format.Ext(), old[0])
		}
		for _, n := range old {
			if err := loc.Delete(ctx, n); err != nil {
				return fmt.Errorf("export %s: remove old %s: %w", j.table, n, err)
			}
		}
	}

	s, err := exportShards(ctx, cl, loc, j, format, codec, columns, scan, plan, progressOut)
	if err != nil {
		// Leave no part of this export behind: a later import must not
		// find a set that looks complete.
		for _, n := range s.Files {
			_ = loc.Delete(context.WithoutCancel(ctx), n)
		}
		return fmt.Errorf("export %s: %w (files removed; nothing of this export remains in %s)", j.table, err, loc)
	}
	what := format.String()
	if format != rowfile.JSONL {
		what += ", " + codec.String()
	}
	fmt.Fprintf(out, "exported %s: %d rows, %d cells, %.1f MB in %d files of %.1f MB (%s) to %s in %s: %s\n",
		j.table, s.Rows, s.Cells, float64(s.Payload)/1e6, len(s.Files), float64(s.Bytes)/1e6, what, loc, s.Elapsed.Round(time.Millisecond), rate(s.Rows, s.Payload, s.Elapsed))
	return nil
}

// checkColumnFamilies fails when a column of --columns names a family the
// table does not have.
func checkColumnFamilies(ctx context.Context, j exportJob, columns []rowfile.Column) error {
	c, err := j.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	tctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	info, err := c.admin.TableInfo(tctx, j.table)
	if err != nil {
		return serverErr(j.conn.addr, j.table, err)
	}
	var missing []string
	for _, col := range columns {
		if !slices.Contains(info.Families, col.Family) && !slices.Contains(missing, col.Family) {
			missing = append(missing, col.Family)
		}
	}
	if len(missing) > 0 {
		have := slices.Sorted(slices.Values(info.Families))
		return fmt.Errorf("export %s: --columns names families the table does not have: %s (its families: %s)",
			j.table, strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	return nil
}

// columnsRowFilter keeps the cells of the given columns: the union of one
// column range per column, [q, q+"\x00"), which holds q alone. A range
// compares bytes exactly, which a regular expression over arbitrary
// qualifier bytes would not; the end is open because an empty bound means
// no bound (an empty qualifier's closed range [“”, “”] would be every
// qualifier).
func columnsRowFilter(columns []rowfile.Column) *bigtablepb.RowFilter {
	fs := make([]*bigtablepb.RowFilter, len(columns))
	for i, c := range columns {
		fs[i] = &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: &bigtablepb.ColumnRange{
			FamilyName:     c.Family,
			StartQualifier: &bigtablepb.ColumnRange_StartQualifierClosed{StartQualifierClosed: c.Qualifier},
			EndQualifier:   &bigtablepb.ColumnRange_EndQualifierOpen{EndQualifierOpen: append(slices.Clip(c.Qualifier), 0)},
		}}}
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: fs}}}
}

// serverErr explains a failed first call: the server is down, or the
// table is missing.
func serverErr(addr, table string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Unavailable:
		return fmt.Errorf("table %s: no answer from %s (is the server running?): %w", table, addr, describe(err))
	case status.Code(err) == codes.NotFound:
		return fmt.Errorf("table %s: NOT_FOUND: no such table at %s", table, addr)
	}
	return fmt.Errorf("table %s: %w", table, describe(err))
}

// maxFoundColumns bounds the columns a first scan may find for the columns
// layout; a table with more wants --columns.
const maxFoundColumns = 10_000

// findColumns scans the selection once for its distinct columns, sorted.
func findColumns(ctx context.Context, cl *client.Client, table string, scan client.ScanOptions) ([]rowfile.Column, error) {
	scan.MaxVersions = 1
	sc := cl.Scan(ctx, table, scan)
	defer sc.Close()
	seen := map[string]bool{}
	var cols []rowfile.Column
	for sc.Next() {
		for _, c := range sc.Row().Cells {
			k := c.Family + ":" + string(c.Qualifier)
			if seen[k] {
				continue
			}
			seen[k] = true
			cols = append(cols, rowfile.Column{Family: c.Family, Qualifier: bytes.Clone(c.Qualifier)})
			if len(cols) > maxFoundColumns {
				return nil, fmt.Errorf("export %s: more than %d columns; choose the columns with --columns", table, maxFoundColumns)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("export %s: find columns: %w", table, describe(err))
	}
	slices.SortFunc(cols, func(a, b rowfile.Column) int {
		return cell.CompareColumns(a.Family, a.Qualifier, b.Family, b.Qualifier)
	})
	return cols, nil
}

// exportShards writes every shard of plan, j.concurrency at a time. It
// returns, even on error, the names of the files it committed.
func exportShards(ctx context.Context, cl *client.Client, loc *rowfile.Location, j exportJob, format rowfile.Format,
	codec rowfile.Codec, columns []rowfile.Column, scan client.ScanOptions, plan []keyRange, progressOut io.Writer) (exportSummary, error) {
	start := time.Now()
	prog := newCounterProgress(progressOut, -1, "export "+j.table, "rows")
	var s exportSummary
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(j.concurrency)
	for i, r := range plan {
		name := rowfile.ShardName(j.prefix, i, len(plan), format.Ext())
		g.Go(func() error {
			w, err := loc.CreateShard(gctx, name, rowfile.WriterOptions{Format: format, Codec: codec, Columns: columns})
			if err != nil {
				return err
			}
			defer w.Abort() // no-op once committed
			if !r.Empty {
				o := scan
				o.Start, o.End = r.Start, r.End
				sc := cl.Scan(gctx, j.table, o)
				defer sc.Close()
				for sc.Next() {
					row := sc.Row()
					before := w.Stats()
					if err := w.Write(row); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					after := w.Stats()
					prog.add(1, after.Cells-before.Cells, int64(len(row.Key))+cellBytes(row))
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("scan rows [%q, %q): %w", r.Start, r.End, describe(err))
				}
			}
			if err := w.Commit(); err != nil {
				return err
			}
			st := w.Stats()
			mu.Lock()
			s.Rows += st.Rows
			s.Cells += st.Cells
			s.Bytes += st.Bytes
			s.Files = append(s.Files, name)
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	prog.finish()
	s.Payload = prog.bytes.Load()
	sort.Strings(s.Files)
	s.Elapsed = time.Since(start)
	return s, err
}

func cellBytes(r cell.Row) int64 {
	var n int64
	for _, c := range r.Cells {
		n += int64(len(c.Family) + len(c.Qualifier) + len(c.Value) + 8)
	}
	return n
}

// counterProgress shows the progress of long work: a progress bar on a
// terminal, a plain line every few seconds otherwise (logs, CI). Safe for
// concurrent use.
type counterProgress struct {
	rows, cells, bytes atomic.Int64
	start              time.Time
	what               string
	bar                interface {
		Add(int) error
		Describe(string)
		Finish() error
	}
	w    io.Writer
	stop chan struct{}
	done chan struct{}
}

// newCounterProgress starts a progress display of total units (-1:
// unknown) on w.
func newCounterProgress(w io.Writer, total int64, what, unit string) *counterProgress {
	p := &counterProgress{start: time.Now(), what: what, w: w}
	if isTerminal(w) {
		p.bar = newProgressBar(w, total, what, unit)
		return p
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(plainProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				fmt.Fprintln(w, p.line())
			}
		}
	}()
	return p
}

func (p *counterProgress) line() string {
	d := time.Since(p.start)
	return fmt.Sprintf("%s: %d rows, %d cells, %.1f MB after %s (%s)", p.what, p.rows.Load(), p.cells.Load(),
		float64(p.bytes.Load())/1e6, d.Round(time.Second), rate(p.rows.Load(), p.bytes.Load(), d))
}

func (p *counterProgress) add(rows, cells, bytes int64) {
	p.rows.Add(rows)
	p.cells.Add(cells)
	total := p.bytes.Add(bytes)
	if p.bar != nil {
		_ = p.bar.Add(int(rows))
		p.bar.Describe(fmt.Sprintf("%s %.2f MB/s", p.what, float64(total)/1e6/time.Since(p.start).Seconds()))
	}
}

func (p *counterProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		return
	}
	close(p.stop)
	<-p.done
}

// importJob is the configuration of one import.
type importJob struct {
	conn        connFlags
	src         string
	table       string
	prefix      string
	create      bool
	concurrency int
	batchRows   int
	timeout     time.Duration
}

func newImportFormatCommand(format rowfile.Format) *cobra.Command {
	var j importJob
	name := format.Ext()
	cmd := &cobra.Command{
		Use:   name + " DIR|s3://BUCKET/PATH?endpoint=HOST:PORT TABLE",
		Short: "Import " + name + " files (a complete shard set) into a table, every cell with its own timestamp",
		Long: `import ` + name + ` reads the shard set PREFIX-SSSSS-of-NNNNN.` + name + ` in DIR (a local
directory or an S3/MinIO path) and writes every cell into TABLE with its own
timestamp, so re-running an import writes the same cells again. Parquet
files must have the template layout (what export parquet and Google's
Cloud Bigtable to Parquet template write).

Nothing is written unless every file is whole and valid: a first pass
checks that the set is complete, every file's schema and every row (keys,
family names, timestamps, sizes), and that the table has the families the
files use. --create creates the table, or the families it lacks, with
every version kept.`,
		Args: argsBetween(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			j.src, j.table = args[0], args[1]
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runImport(ctx, cmd, j, format)
		},
	}
	fs := cmd.Flags()
	j.conn.register(fs)
	fs.StringVar(&j.prefix, "prefix", "", "file name prefix (default: the only shard set in DIR)")
	fs.BoolVar(&j.create, "create", false, "create the table, or the families it lacks")
	fs.IntVar(&j.concurrency, "concurrency", 4, "files read and written at once")
	fs.IntVar(&j.batchRows, "batch", 500, "rows per ApplyBulk call")
	fs.DurationVar(&j.timeout, "timeout", defaultTimeout, "give up on an unreachable server after this long")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// importCheck is what the first pass found.
type importCheck struct {
	files     []string
	rows      int64
	cells     int64
	bytes     int64
	families  []string
	fileBytes int64
}

func runImport(ctx context.Context, cmd *cobra.Command, j importJob, format rowfile.Format) error {
	out, progressOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if j.concurrency < 1 || j.batchRows < 1 {
		return usagef(cmd, "--concurrency and --batch must be at least 1")
	}
	loc, err := rowfile.OpenSource(ctx, j.src)
	if err != nil {
		return err
	}
	if j.prefix == "" {
		names, err := loc.List(ctx)
		if err != nil {
			return err
		}
		prefixes := rowfile.ShardPrefixes(names, format.Ext())
		switch len(prefixes) {
		case 0:
			return fmt.Errorf("import: %s holds no files named PREFIX-SSSSS-of-NNNNN.%s", loc, format.Ext())
		case 1:
			j.prefix = prefixes[0]
		default:
			return usagef(cmd, "%s holds shard sets of several prefixes (%s): choose one with --prefix", loc, strings.Join(prefixes, ", "))
		}
	}

	// Pass 1: everything is checked before anything is written.
	check, err := checkImport(ctx, loc, j, format)
	if err != nil {
		return fmt.Errorf("import: %w (nothing written)", err)
	}

	c, err := j.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := prepareTable(ctx, c, j, check.families); err != nil {
		return fmt.Errorf("import: %w (nothing written)", err)
	}
	cl := client.New(c.cc, client.Options{Project: j.conn.project, Instance: j.conn.instance, TLS: c.tls, Token: c.names.token})
	defer cl.Close()

	// Pass 2: write.
	start := time.Now()
	prog := newCounterProgress(progressOut, check.rows, "import "+j.table, "rows")
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(j.concurrency)
	for _, name := range check.files {
		g.Go(func() error { return importFile(gctx, cl, loc, j, format, name, prog) })
	}
	err = g.Wait()
	prog.finish()
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("import into %s stopped after %d rows: %w (the rows written stay; cells keep their timestamps, so running the import again completes it without duplicates)",
			j.table, prog.rows.Load(), err)
	}
	fmt.Fprintf(out, "imported %s: %d rows, %d cells, %.1f MB from %d files (%.1f MB) in %s to %s in %s: %s\n",
		j.prefix, check.rows, check.cells, float64(check.bytes)/1e6, len(check.files), float64(check.fileBytes)/1e6, loc, j.table,
		elapsed.Round(time.Millisecond), rate(check.rows, check.bytes, elapsed))
	return nil
}

// checkImport finds the shard set and reads every file whole, checking
// schemas and rows, and collects the families the rows use.
func checkImport(ctx context.Context, loc *rowfile.Location, j importJob, format rowfile.Format) (importCheck, error) {
	var ch importCheck
	files, err := loc.Shards(ctx, j.prefix, format.Ext())
	if err != nil {
		return ch, err
	}
	ch.files = files
	// Schemas first: the cheap check finds a wrong file in any shard
	// before the long one reads rows.
	for _, name := range files {
		obj, err := loc.Open(ctx, name)
		if err != nil {
			return ch, err
		}
		ch.fileBytes += obj.Size()
		if format != rowfile.JSONL {
			err = rowfile.CheckSchema(obj, obj.Size(), format, name)
		}
		obj.Close()
		if err != nil {
			return ch, err
		}
	}
	fams := map[string]bool{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(j.concurrency)
	for _, name := range files {
		g.Go(func() error {
			r, err := loc.OpenShard(gctx, name, rowfile.ReaderOptions{Format: format})
			if err != nil {
				return err
			}
			defer r.Close()
			var rows, cells, size int64
			local := map[string]bool{}
			if err := rowfile.Each(r, func(row cell.Row) error {
				rows++
				cells += int64(len(row.Cells))
				size += int64(len(row.Key)) + cellBytes(row)
				for _, c := range row.Cells {
					local[c.Family] = true
				}
				return gctx.Err()
			}); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			ch.rows += rows
			ch.cells += cells
			ch.bytes += size
			for f := range local {
				fams[f] = true
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return ch, err
	}
	for f := range fams {
		ch.families = append(ch.families, f)
	}
	slices.Sort(ch.families)
	return ch, nil
}

// prepareTable checks that the table exists with the families; with
// --create it creates what is missing, keeping every version.
func prepareTable(ctx context.Context, c *conn, j importJob, families []string) error {
	tctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	info, err := c.admin.TableInfo(tctx, j.table)
	if status.Code(err) == codes.NotFound {
		if !j.create {
			return fmt.Errorf("table %s: NOT_FOUND: no such table at %s (use --create to create it)", j.table, j.conn.addr)
		}
		conf := &bigtable.TableConf{TableID: j.table, ColumnFamilies: map[string]bigtable.Family{}}
		for _, f := range families {
			conf.ColumnFamilies[f] = bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}
		}
		if err := c.admin.CreateTableFromConf(tctx, conf); err != nil {
			return fmt.Errorf("create table %s: %w", j.table, describe(err))
		}
		return nil
	}
	if err != nil {
		return serverErr(j.conn.addr, j.table, err)
	}
	var missing []string
	for _, f := range families {
		if !slices.Contains(info.Families, f) {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !j.create {
		return fmt.Errorf("table %s lacks families %s that the files use (use --create to add them)", j.table, strings.Join(missing, ", "))
	}
	for _, f := range missing {
		if err := c.admin.CreateColumnFamilyWithConfig(tctx, j.table, f, bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}); err != nil {
			return fmt.Errorf("add family %s to %s: %w", f, j.table, describe(err))
		}
	}
	return nil
}

// importBatchBytes ends an ApplyBulk batch early once it holds this much.
const importBatchBytes = 4 << 20

// maxMutationsPerEntry is the API's limit of mutations in one row's entry;
// a row with more cells is written in several entries (not atomically,
// as the template's importer does with splitLargeRows).
const maxMutationsPerEntry = 100_000

// importFile writes the rows of one file with ApplyBulk, each cell at its
// own timestamp.
func importFile(ctx context.Context, cl *client.Client, loc *rowfile.Location, j importJob, format rowfile.Format, name string, prog *counterProgress) error {
	r, err := loc.OpenShard(ctx, name, rowfile.ReaderOptions{Format: format})
	if err != nil {
		return err
	}
	defer r.Close()
	var batch []cell.RowMutation
	var batchBytes, batchRows, batchCells int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		errs, err := cl.ApplyBulk(ctx, j.table, batch, client.BulkOptions{})
		if err != nil {
			for i, e := range errs {
				if e != nil {
					return fmt.Errorf("%s: row %q: %w", name, batch[i].Row, describe(e))
				}
			}
			return fmt.Errorf("%s: %w", name, describe(err))
		}
		prog.add(batchRows, batchCells, batchBytes)
		batch, batchBytes, batchRows, batchCells = batch[:0], 0, 0, 0
		return nil
	}
	if err := rowfile.Each(r, func(row cell.Row) error {
		batchRows++
		batchCells += int64(len(row.Cells))
		batchBytes += int64(len(row.Key)) + cellBytes(row)
		for cells := row.Cells; len(cells) > 0; {
			n := min(len(cells), maxMutationsPerEntry)
			muts := make([]cell.Mutation, n)
			for i, c := range cells[:n] {
				muts[i] = cell.Mutation{Kind: cell.SetCell, Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value}
			}
			batch = append(batch, cell.RowMutation{Row: row.Key, Mutations: muts})
			cells = cells[n:]
		}
		if len(batch) >= j.batchRows || batchBytes >= importBatchBytes {
			return flush()
		}
		return nil
	}); err != nil {
		return err
	}
	return flush()
}
