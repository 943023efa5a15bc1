package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"sync"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/filter"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"
	"github.com/parquet-go/parquet-go"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"google.golang.org/protobuf/proto"
)

// ExportConfig is an export: the rows Read selects, written as shards
// PREFIX-SSSSS-of-NNNNN.parquet under Out.
type ExportConfig struct {
	Read beamio.ReadConfig
	// Out is a local directory or s3://BUCKET/PATH?endpoint=… (rowfile's
	// locations). Required.
	Out string
	// Prefix of the shard names; default the table's name.
	Prefix string
	// Shards is the number of files; default one per tablet. Each holds
	// a contiguous key range of about equal size, its rows in key order,
	// shard i before shard i+1.
	Shards int
	// Format is rowfile.Parquet (the template layout, every version) or
	// rowfile.ParquetColumns (one column per family:qualifier, newest
	// value); JSONL works too.
	Format rowfile.Format
	// Codec compresses the pages (snappy by default).
	Codec rowfile.Codec
	// Columns of the columns layout; default every column the export
	// reads (found by the pipeline itself, at most 10,000).
	Columns []rowfile.Column
}

// ExportSummary is what an export wrote.
type ExportSummary struct {
	Files              []string
	Rows, Cells, Bytes int64
}

// maxFoundColumns bounds the columns the columns layout finds itself.
const maxFoundColumns = 10_000

// Export checks the table and the output location, runs the export
// pipeline and returns what it wrote. Shards that already exist under
// the prefix are an error (nothing is overwritten); if the pipeline
// fails, the shards it committed are deleted again.
func Export(ctx context.Context, cfg ExportConfig) (ExportSummary, error) {
	t := cfg.Read.Table
	if cfg.Out == "" {
		return ExportSummary{}, pipe.Usagef("--out is required: a directory or s3://bucket/path?endpoint=host:port")
	}
	if cfg.Format == rowfile.ParquetColumns && len(cfg.Columns) > 0 {
		if _, err := rowfile.ColumnsSchema(cfg.Columns); err != nil {
			return ExportSummary{}, pipe.Usagef("--columns: %v", err)
		}
	}
	selection, err := cfg.Read.Selection()
	if err != nil {
		return ExportSummary{}, err
	}
	// One connection for the checks and the plan. The table's samples
	// are fetched while its tablets are listed and the output is
	// checked: each is a round trip to the server or more (the samples
	// read the tablets' files), and the pipeline waits for all.
	c, release, err := beamio.SharedClient(t, true)
	if err != nil {
		return ExportSummary{}, err
	}
	defer release()
	pctx, cancelPlan := context.WithCancel(ctx)
	defer cancelPlan()
	sampled := fetchSamples(pctx, c, t)
	tabs, err := pipe.CheckTableOn(ctx, c, t)
	if err != nil {
		return ExportSummary{}, err
	}
	if cfg.Shards <= 0 {
		cfg.Shards = len(tabs)
	}
	if cfg.Shards > rowfile.MaxShards {
		return ExportSummary{}, pipe.Usagef("--shards %d: at most %d", cfg.Shards, rowfile.MaxShards)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = t.Table
	}
	loc, err := rowfile.OpenLocation(ctx, cfg.Out)
	if err != nil {
		return ExportSummary{}, err
	}
	ext := cfg.Format.Ext()
	names, err := loc.List(ctx)
	if err != nil {
		return ExportSummary{}, err
	}
	if old := rowfile.MatchShards(names, cfg.Prefix, ext); len(old) > 0 {
		return ExportSummary{}, fmt.Errorf("%s already holds shards of %s (%s, …): remove them or choose another --prefix", cfg.Out, cfg.Prefix, old[0])
	}

	smp := <-sampled
	if smp.err != nil {
		return ExportSummary{}, smp.err
	}
	pl := plan{pieces: beamio.PlanSplits(selection, tablets(tabs), smp.samples, 0), samples: smp.samples}
	shardRanges := planShards(pl, tabs, cfg.Shards)
	readSpec := cfg.Read
	var filterBytes []byte
	if readSpec.Filter != nil {
		if filterBytes, err = proto.Marshal(readSpec.Filter); err != nil {
			return ExportSummary{}, err
		}
		readSpec.Filter = nil
	}
	var specs []string
	for i, rs := range shardRanges {
		b, err := json.Marshal(shardSpec{Index: i, Ranges: rs})
		if err != nil {
			return ExportSummary{}, err
		}
		specs = append(specs, string(b))
	}

	p, s := beam.NewPipelineWithRoot()
	// One element per shard; each writes its file from its key ranges,
	// read straight from the servers in key order (no shuffle of the
	// rows: on prism a shuffle costs more than the export). On a
	// distributed runner the shards are reshuffled to spread them over
	// the workers (a Create is one element on one worker); prism runs
	// them in this process either way, and a reshuffle there costs a
	// second of its element manager's time.
	shards := beam.CreateList(s, specs)
	if r := *runners.Runner; r != "" && r != "prism" && r != "PrismRunner" {
		shards = beam.Reshuffle(s, shards)
	}
	readJSON, err := json.Marshal(readSpec)
	if err != nil {
		return ExportSummary{}, err
	}
	wf := writeShardFn{ReadJSON: string(readJSON), Filter: filterBytes, Out: cfg.Out, Prefix: cfg.Prefix, Shards: cfg.Shards, Format: int(cfg.Format), Codec: int(cfg.Codec)}
	// The writers' stage has an output (the names of the files written,
	// into a GroupByKey) although nothing needs it: prism v2.77.0 spins
	// a core for as long as a bundle of a stage without outputs runs
	// (its bundle loop selects on a closed channel). A GroupByKey is the
	// runner's own, so no worker stage follows the writers (one would
	// cost a bundle, 1–6 ms at the end of every export, and spin too).
	var written beam.PCollection
	if cfg.Format == rowfile.ParquetColumns && len(cfg.Columns) == 0 {
		// The columns come first, from a read of their own, and reach
		// the writers as a side input. (Prism v2.77.0 re-evaluates a
		// stage with a side input in a busy loop while its bundle runs,
		// so the writers take a side input only when they need one.)
		rows, err := beamio.TryRead(s, cfg.Read)
		if err != nil {
			return ExportSummary{}, pipe.UsageError{Err: err}
		}
		cols := filter.Distinct(s, beam.ParDo(s, &columnsOfFn{}, rows))
		written = beam.ParDo(s, &writeFoundColumnsFn{W: wf}, shards, beam.SideInput{Input: cols})
	} else {
		for _, c := range cfg.Columns {
			wf.Columns = append(wf.Columns, c.Name())
		}
		written = beam.ParDo(s, &wf, shards)
	}
	beam.GroupByKey(s, beam.AddFixedKey(s, written))

	pr, err := beamx.RunWithMetrics(ctx, p)
	var all []string
	for i := range cfg.Shards {
		all = append(all, rowfile.ShardName(cfg.Prefix, i, cfg.Shards, ext))
	}
	if err != nil {
		// Leave nothing that looks like a finished export.
		for _, n := range all {
			if derr := loc.Delete(context.WithoutCancel(ctx), n); derr != nil && !errors.Is(derr, blob.ErrNotExist) {
				err = fmt.Errorf("%w (and removing %s: %v)", err, n, derr)
			}
		}
		return ExportSummary{}, fmt.Errorf("export %s: %w", t.Table, err)
	}
	sum := ExportSummary{Files: all, Rows: counter(pr, "export_rows"), Cells: counter(pr, "export_cells"), Bytes: counter(pr, "export_bytes")}
	if cfg.Format == rowfile.Parquet {
		// The files' footers are the record (a runner may lose the
		// metrics of a bundle it split; the files it committed stand).
		if sum.Rows, sum.Cells, sum.Bytes, err = templateStats(ctx, loc, all); err != nil {
			return sum, fmt.Errorf("export %s: %w", t.Table, err)
		}
	}
	return sum, nil
}

// templateStats sums the rows, cells and bytes of template-layout files
// from their footers: rows per row group, cells as the values of the
// cells' family column (every row has a cell).
func templateStats(ctx context.Context, loc *rowfile.Location, names []string) (rows, cells, bytes int64, err error) {
	for _, n := range names {
		obj, err := loc.Open(ctx, n)
		if err != nil {
			return 0, 0, 0, err
		}
		pf, err := parquet.OpenFile(obj, obj.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
		if err != nil {
			obj.Close()
			return 0, 0, 0, fmt.Errorf("%s: %w", n, err)
		}
		bytes += obj.Size()
		rows += pf.NumRows()
		for _, rg := range pf.Metadata().RowGroups {
			for _, c := range rg.Columns {
				if len(c.MetaData.PathInSchema) > 0 && c.MetaData.PathInSchema[len(c.MetaData.PathInSchema)-1] == "family" {
					cells += c.MetaData.NumValues
				}
			}
		}
		obj.Close()
	}
	return rows, cells, bytes, nil
}

// counter is the committed value of a "pipelines" counter.
func counter(pr beam.PipelineResult, name string) int64 {
	var n int64
	for _, c := range pr.Metrics().Query(func(r metrics.SingleResult) bool {
		return r.Namespace() == "pipelines" && r.Name() == name
	}).Counters() {
		n += c.Result()
	}
	return n
}

var (
	exportRows  = beam.NewCounter("pipelines", "export_rows")
	exportCells = beam.NewCounter("pipelines", "export_cells")
	exportBytes = beam.NewCounter("pipelines", "export_bytes")
)

// shardSpec is one shard to write: its index and its key ranges.
type shardSpec struct {
	Index  int
	Ranges []keyrange.Restriction
}

// plan is what planShards cuts the selection with.
type plan struct {
	pieces  []keyrange.Restriction // the selection, one piece per tablet (PlanSplits, target 0: beamio's Plan)
	samples []beamio.Sample        // the table's sampled keys and offsets
}

// sampling is the answer of fetchSamples.
type sampling struct {
	samples []beamio.Sample
	err     error
}

// fetchSamples fetches the table's sampled keys and offsets through c,
// sending them on the channel it returns.
func fetchSamples(ctx context.Context, c *client.Client, t beamio.Table) <-chan sampling {
	out := make(chan sampling, 1)
	go func() {
		samples, err := c.SampleRowKeys(ctx, t.Table)
		if err != nil {
			out <- sampling{err: fmt.Errorf("SampleRowKeys of %s at %s: %w", t.Table, t.Addr, err)}
			return
		}
		smp := make([]beamio.Sample, len(samples))
		for i, s := range samples {
			smp[i] = beamio.Sample{Key: s.Key, Offset: s.Offset}
		}
		out <- sampling{samples: smp}
	}()
	return out
}

// tablets are tabs as beamio's planning takes them.
func tablets(tabs []client.TabletInfo) []beamio.Tablet {
	out := make([]beamio.Tablet, len(tabs))
	for i, t := range tabs {
		out[i] = beamio.Tablet{Start: t.Start, End: t.End}
	}
	return out
}

// planShards cuts the selection (pl.pieces) into shards contiguous key
// ranges of about equal estimated bytes (by the samples; by count of
// pieces when the table has none), shard i before shard i+1: the pieces
// are cut further at sampled keys to about a quarter of a shard each
// (as beamio's Plan would with that target), then grouped. A shard may
// get no range (more shards than the selection can be cut into): its
// file is empty.
func planShards(pl plan, tabs []client.TabletInfo, shards int) [][]keyrange.Restriction {
	pieces := pl.pieces
	var total int64
	for _, p := range pieces {
		total += p.Bytes
	}
	if target := total / int64(4*shards); target > 0 {
		pieces = beamio.PlanSplits(pieces, tablets(tabs), pl.samples, max(target, 64<<10))
	}
	groups := GroupShards(pieces, shards)
	for i, g := range groups {
		groups[i] = Coalesce(g)
	}
	return groups
}

// Coalesce merges ranges (in key order) that adjoin — one ends where the
// next starts — into one, their Bytes summed: a shard's pieces of the
// same tablets are read as one scan, which crosses tablets by itself,
// instead of one stream per piece.
func Coalesce(ranges []keyrange.Restriction) []keyrange.Restriction {
	var out []keyrange.Restriction
	for _, r := range ranges {
		if n := len(out); n > 0 && !out[n-1].Unbounded() && bytes.Equal(out[n-1].End, r.Start) {
			out[n-1].End, out[n-1].Bytes = r.End, out[n-1].Bytes+r.Bytes
			continue
		}
		out = append(out, r)
	}
	return out
}

// GroupShards groups pieces (in key order) into n contiguous groups of
// about equal Bytes — by count when no piece has a size.
func GroupShards(pieces []keyrange.Restriction, n int) [][]keyrange.Restriction {
	out := make([][]keyrange.Restriction, n)
	var total int64
	for _, p := range pieces {
		total += p.Bytes
	}
	var acc int64
	for i, p := range pieces {
		var shard int
		if total > 0 {
			// The shard of the piece's middle byte.
			shard = int((acc + p.Bytes/2) * int64(n) / total)
		} else {
			shard = i * n / len(pieces)
		}
		shard = min(shard, n-1)
		out[shard] = append(out[shard], p)
		acc += p.Bytes
	}
	return out
}

// columnsOfFn emits the distinct family:qualifier names of a bundle's
// rows (the columns layout's columns, deduplicated again afterwards).
type columnsOfFn struct {
	seen map[string]bool
}

func (f *columnsOfFn) StartBundle(_ func(string)) { f.seen = map[string]bool{} }

func (f *columnsOfFn) ProcessElement(r beamio.Row, emit func(string)) {
	for _, c := range r.Cells {
		name := c.Family + ":" + string(c.Qualifier)
		if !f.seen[name] {
			f.seen[name] = true
			if len(f.seen) <= maxFoundColumns+1 {
				emit(name)
			}
		}
	}
}

// writeShardFn writes shards' files from their key ranges and commits
// them, several at a time: a bundle's shards are written concurrently,
// at most GOMAXPROCS of them reading and encoding at a time — a shard
// whose file is written waits for its commit (an fsync, an upload)
// outside that bound (prism hands a stage all its pending
// elements as one bundle and splits only splittable DoFns, so one
// element at a time would write the files one after the other on one
// core). The files written are emitted when the bundle finishes; the
// first failure cancels the bundle's other writes and fails it.
type writeShardFn struct {
	ReadJSON      string // the beamio.ReadConfig without its Filter, which travels as bytes
	Filter        []byte
	Out, Prefix   string
	Shards        int
	Format, Codec int
	// Columns are the columns layout's columns, when known up front
	// (family:qualifier names).
	Columns []string

	read    beamio.ReadConfig
	c       *client.Client
	release func() // gives c back to the process's pool (beamio.SharedClient)

	inflight *bundleWrites
}

// bundleWrites are a bundle's shard writes in flight.
type bundleWrites struct {
	ctx     context.Context
	cancel  context.CancelFunc
	slots   chan struct{} // one per write running
	wg      sync.WaitGroup
	mu      sync.Mutex
	written []rowfile.Stats
	names   []string
	err     error // the first write's error
}

func (f *writeShardFn) Setup() error {
	if err := json.Unmarshal([]byte(f.ReadJSON), &f.read); err != nil {
		return err
	}
	// The process's shared connection: the export's own checks left it
	// connected when the pipeline runs in this process (prism), and the
	// next export finds it still open.
	c, release, err := beamio.SharedClient(f.read.Table, true)
	if err != nil {
		return err
	}
	f.c, f.release = c, release
	if len(f.Filter) > 0 {
		f.read.Filter = &bigtablepb.RowFilter{}
		return proto.Unmarshal(f.Filter, f.read.Filter)
	}
	return nil
}

func (f *writeShardFn) Teardown() error {
	if f.release != nil {
		f.release()
		f.c, f.release = nil, nil
	}
	return nil
}

func (f *writeShardFn) StartBundle(ctx context.Context, _ func(string)) {
	b := &bundleWrites{slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))}
	b.ctx, b.cancel = context.WithCancel(ctx)
	f.inflight = b
}

func (f *writeShardFn) ProcessElement(specJSON string, _ func(string)) error {
	i := 0
	cols, err := f.columns(func(name *string) bool {
		if i == len(f.Columns) {
			return false
		}
		*name = f.Columns[i]
		i++
		return true
	})
	if err != nil {
		return err
	}
	return f.start(specJSON, cols)
}

// FinishBundle waits for the bundle's writes, then counts and emits the
// files written, or returns the first write's error.
func (f *writeShardFn) FinishBundle(ctx context.Context, emit func(string)) error {
	b := f.inflight
	b.wg.Wait()
	b.cancel()
	if b.err != nil {
		return b.err
	}
	for i, st := range b.written {
		exportRows.Inc(ctx, st.Rows)
		exportCells.Inc(ctx, st.Cells)
		exportBytes.Inc(ctx, st.Bytes)
		exportFiles.Inc(ctx, 1)
		emit(b.names[i])
	}
	return nil
}

// start starts writing the shard specJSON names once a slot is free (a
// write that failed meanwhile returns its error instead).
func (f *writeShardFn) start(specJSON string, cols []rowfile.Column) error {
	var spec shardSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	b := f.inflight
	select {
	case b.slots <- struct{}{}:
	case <-b.ctx.Done():
	}
	b.mu.Lock()
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if err := b.ctx.Err(); err != nil {
		return err
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		released := false
		release := func() {
			if !released {
				released = true
				<-b.slots
				// The write waiting for the slot is now runnable on this
				// goroutine's P: let it start before this goroutine blocks
				// in the commit's fsync (the runtime hands a P whose
				// goroutine sits in a system call to another thread only
				// when its monitor notices, milliseconds later in a busy
				// process).
				runtime.Gosched()
			}
		}
		defer release()
		name, st, err := f.write(b.ctx, spec, cols, release)
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			if b.err == nil {
				b.err = err
				b.cancel()
			}
			return
		}
		b.written = append(b.written, st)
		b.names = append(b.names, name)
	}()
	return nil
}

// columns returns the columns layout's columns, colNames iterating
// their names, in file order; nil for the other formats.
func (f *writeShardFn) columns(colNames func(*string) bool) ([]rowfile.Column, error) {
	if rowfile.Format(f.Format) != rowfile.ParquetColumns {
		return nil, nil
	}
	var cols []rowfile.Column
	var name string
	for colNames(&name) {
		c, err := rowfile.ParseColumn(name)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
		if len(cols) > maxFoundColumns {
			return nil, fmt.Errorf("more than %d columns for --layout columns: choose them with --columns", maxFoundColumns)
		}
	}
	if len(cols) == 0 {
		return nil, errors.New("no cells in the rows and times selected, so no columns for --layout columns")
	}
	sort.Slice(cols, func(i, j int) bool {
		return cell.CompareColumns(cols[i].Family, cols[i].Qualifier, cols[j].Family, cols[j].Qualifier) < 0
	})
	return cols, nil
}

// writeFoundColumnsFn is writeShardFn for the columns layout with the
// columns the pipeline found, a side input; it writes one shard at a
// time (Beam would have the side input in StartBundle and FinishBundle
// too, where the columns are not needed).
type writeFoundColumnsFn struct {
	W writeShardFn
}

func (f *writeFoundColumnsFn) Setup() error    { return f.W.Setup() }
func (f *writeFoundColumnsFn) Teardown() error { return f.W.Teardown() }

func (f *writeFoundColumnsFn) ProcessElement(ctx context.Context, specJSON string, colNames func(*string) bool, emit func(string)) error {
	cols, err := f.W.columns(colNames)
	if err != nil {
		return err
	}
	var spec shardSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	name, st, err := f.W.write(ctx, spec, cols, func() {})
	if err != nil {
		return err
	}
	exportRows.Inc(ctx, st.Rows)
	exportCells.Inc(ctx, st.Cells)
	exportBytes.Inc(ctx, st.Bytes)
	exportFiles.Inc(ctx, 1)
	emit(name)
	return nil
}

// write writes and commits one shard's file, returning its name and
// what it holds. It calls finished once the file's content is written,
// before committing it: a commit mostly waits (for an fsync, an upload),
// so the next shard's reading and encoding can use the core meanwhile.
func (f *writeShardFn) write(ctx context.Context, spec shardSpec, cols []rowfile.Column, finished func()) (string, rowfile.Stats, error) {
	format := rowfile.Format(f.Format)
	loc, err := rowfile.OpenLocation(ctx, f.Out)
	if err != nil {
		return "", rowfile.Stats{}, err
	}
	name := rowfile.ShardName(f.Prefix, spec.Index, f.Shards, format.Ext())
	w, err := loc.CreateShard(ctx, name, shardWriterOptions(format, rowfile.Codec(f.Codec), cols))
	if err != nil {
		return "", rowfile.Stats{}, err
	}
	// Each row is written as it arrives, before the scanner moves on:
	// its client reuses the scan's buffers, which the writer copies from.
	var writeErr error
	for _, r := range spec.Ranges {
		err = f.read.Scan(ctx, f.c, r, func(row cell.Row) bool {
			if err := w.Write(row); err != nil {
				writeErr = fmt.Errorf("%s: row %q: %w", name, row.Key, err)
				return false
			}
			return true
		})
		if err != nil || writeErr != nil {
			break
		}
	}
	if err == nil {
		err = writeErr
	}
	if err != nil {
		w.Abort()
		return "", rowfile.Stats{}, err
	}
	if err := w.Finish(); err != nil {
		return "", rowfile.Stats{}, err
	}
	finished()
	if err := w.Commit(); err != nil {
		return "", rowfile.Stats{}, err
	}
	return name, w.Stats(), nil
}

// shardWriterOptions are the options of an export's shard writers (the
// benchmark's in-memory reference writes with the same).
func shardWriterOptions(format rowfile.Format, codec rowfile.Codec, cols []rowfile.Column) rowfile.WriterOptions {
	return rowfile.WriterOptions{Format: format, Codec: codec, Columns: cols}
}

var exportFiles = beam.NewCounter("pipelines", "export_files")

func init() {
	beam.RegisterType(reflect.TypeOf((*columnsOfFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*writeShardFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*writeFoundColumnsFn)(nil)).Elem())
}
