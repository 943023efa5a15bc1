package jobs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/filter"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
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
	// Shards is the number of files; default one per tablet. Rows are
	// spread over them by a hash of the row key (as the Dataflow template
	// spreads them), in no particular order within a file.
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
	tabs, err := pipe.CheckTable(ctx, t)
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

	p, s := beam.NewPipelineWithRoot()
	rows, err := beamio.TryRead(s, cfg.Read)
	if err != nil {
		return ExportSummary{}, pipe.UsageError{Err: err}
	}
	keyed := beam.ParDo(s, &shardOfFn{Shards: cfg.Shards}, rows)
	marks := beam.ParDo(s, &allShardsFn{Shards: cfg.Shards}, beam.Impulse(s))
	grouped := beam.CoGroupByKey(s, marks, keyed)
	var cols beam.PCollection
	if cfg.Format == rowfile.ParquetColumns && len(cfg.Columns) == 0 {
		cols = filter.Distinct(s, beam.ParDo(s, columnsOf, rows))
	} else {
		var given []string
		for _, c := range cfg.Columns {
			given = append(given, c.Name())
		}
		cols = beam.CreateList(s, given)
	}
	beam.ParDo0(s, &writeShardFn{Out: cfg.Out, Prefix: cfg.Prefix, Shards: cfg.Shards, Format: int(cfg.Format), Codec: int(cfg.Codec)},
		grouped, beam.SideInput{Input: cols})

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
	return ExportSummary{Files: all, Rows: counter(pr, "export_rows"), Cells: counter(pr, "export_cells"), Bytes: counter(pr, "export_bytes")}, nil
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

// shardOfFn keys each row by its shard: a hash of the key.
type shardOfFn struct{ Shards int }

func (f *shardOfFn) ProcessElement(r beamio.Row) (int, beamio.Row) {
	h := fnv.New32a()
	h.Write(r.Key)
	return int(h.Sum32() % uint32(f.Shards)), r
}

// allShardsFn names every shard once, so that a shard no row hashes to
// is still written (an empty file: the set stays complete).
type allShardsFn struct{ Shards int }

func (f *allShardsFn) ProcessElement(_ []byte, emit func(int, int)) {
	for i := range f.Shards {
		emit(i, i)
	}
}

// columnsOf emits the family:qualifier of each cell of a row (the
// columns layout's columns, deduplicated afterwards).
func columnsOf(r beamio.Row, emit func(string)) {
	var last string
	for _, c := range r.Cells {
		name := c.Family + ":" + string(c.Qualifier)
		if name != last {
			emit(name)
			last = name
		}
	}
}

// writeShardFn writes one shard's rows to its file and commits it.
type writeShardFn struct {
	Out, Prefix   string
	Shards        int
	Format, Codec int
}

func (f *writeShardFn) ProcessElement(ctx context.Context, shard int, _ func(*int) bool, rows func(*beamio.Row) bool, colNames func(*string) bool) error {
	format := rowfile.Format(f.Format)
	var cols []rowfile.Column
	if format == rowfile.ParquetColumns {
		var name string
		for colNames(&name) {
			c, err := rowfile.ParseColumn(name)
			if err != nil {
				return err
			}
			cols = append(cols, c)
			if len(cols) > maxFoundColumns {
				return fmt.Errorf("more than %d columns for --layout columns: choose them with --columns", maxFoundColumns)
			}
		}
		if len(cols) == 0 {
			return errors.New("no cells in the rows and times selected, so no columns for --layout columns")
		}
		sort.Slice(cols, func(i, j int) bool {
			return cell.CompareColumns(cols[i].Family, cols[i].Qualifier, cols[j].Family, cols[j].Qualifier) < 0
		})
	}
	loc, err := rowfile.OpenLocation(ctx, f.Out)
	if err != nil {
		return err
	}
	name := rowfile.ShardName(f.Prefix, shard, f.Shards, format.Ext())
	w, err := loc.CreateShard(ctx, name, rowfile.WriterOptions{Format: format, Codec: rowfile.Codec(f.Codec), Columns: cols})
	if err != nil {
		return err
	}
	var r beamio.Row
	for rows(&r) {
		if err := w.Write(cell.Row(r)); err != nil {
			w.Abort()
			return fmt.Errorf("%s: row %q: %w", name, r.Key, err)
		}
	}
	if err := w.Commit(); err != nil {
		return err
	}
	st := w.Stats()
	exportRows.Inc(ctx, st.Rows)
	exportCells.Inc(ctx, st.Cells)
	exportBytes.Inc(ctx, st.Bytes)
	return nil
}

func init() {
	beam.RegisterType(reflect.TypeOf((*shardOfFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*allShardsFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*writeShardFn)(nil)).Elem())
	beam.RegisterFunction(columnsOf)
}
