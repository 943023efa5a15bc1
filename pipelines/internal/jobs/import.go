package jobs

import (
	"context"
	"fmt"
	"reflect"
	"sort"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/filter"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
)

// ImportConfig is an import of a shard set in the template layout (or
// JSON Lines) into a table.
type ImportConfig struct {
	// In is the directory or s3:// location of the shards. Required.
	In string
	// Prefix of the shard names; default: the only prefix of shards in In.
	Prefix string
	// Format is rowfile.Parquet (the template layout) or rowfile.JSONL.
	Format rowfile.Format
	// Conn and Table are the target; Create creates the table when it is
	// missing. Families the files use and the table lacks are created.
	Conn   pipe.Conn
	Table  string
	Create bool
	// Write tunes the writes (its Table is set from Conn and Table).
	Write beamio.WriteConfig
}

// ImportSummary is what an import wrote.
type ImportSummary struct {
	Files              []string
	Rows, Cells, Bytes int64
}

// Import checks every file of the shard set before anything is written —
// first their schemas (in this process, footers only), then in the
// pipeline every row of every file — creates the missing families, and
// only then writes the rows, each cell at its own timestamp. A file with
// a wrong schema or an invalid row fails the import with nothing
// written. Entries the server refuses are dead letters: they fail the
// import (with the others written) and are printed.
func Import(ctx context.Context, cfg ImportConfig) (ImportSummary, error) {
	if cfg.In == "" {
		return ImportSummary{}, pipe.Usagef("--in is required: a directory or s3://bucket/path?endpoint=host:port")
	}
	if cfg.Table == "" {
		return ImportSummary{}, pipe.Usagef("--table is required")
	}
	if cfg.Format == rowfile.ParquetColumns {
		return ImportSummary{}, pipe.Usagef("the columns layout does not import (it keeps no timestamps or versions): import template-layout files")
	}
	loc, err := rowfile.OpenLocation(ctx, cfg.In)
	if err != nil {
		return ImportSummary{}, err
	}
	ext := cfg.Format.Ext()
	if cfg.Prefix == "" {
		names, err := loc.List(ctx)
		if err != nil {
			return ImportSummary{}, err
		}
		prefixes := rowfile.ShardPrefixes(names, ext)
		if len(prefixes) != 1 {
			return ImportSummary{}, pipe.Usagef("%s holds shards of %d prefixes %v: choose one with --prefix", cfg.In, len(prefixes), prefixes)
		}
		cfg.Prefix = prefixes[0]
	}
	// Every file's schema, before anything else.
	readers, err := loc.OpenShards(ctx, cfg.Prefix, rowfile.ReaderOptions{Format: cfg.Format})
	if err != nil {
		return ImportSummary{}, fmt.Errorf("import %s: %w", cfg.In, err)
	}
	for _, r := range readers {
		r.Close()
	}
	names, err := loc.Shards(ctx, cfg.Prefix, ext)
	if err != nil {
		return ImportSummary{}, err
	}
	t := cfg.Conn.Table(cfg.Table)
	if _, err := pipe.CheckTable(ctx, t); err != nil && !cfg.Create {
		return ImportSummary{}, fmt.Errorf("%w (use --create to create it)", err)
	}
	wcfg := cfg.Write
	wcfg.Table = t
	spec := fileSpec{In: cfg.In, Format: int(cfg.Format)}

	p, s := beam.NewPipelineWithRoot()
	files := beam.CreateList(s, names)
	// Pass 1: read every row of every file (the readers validate each),
	// collecting the families.
	fams := filter.Distinct(s, beam.ParDo(s, &checkFileFn{Spec: spec}, files))
	ready := beam.ParDo(s, &ensureFamiliesFn{Conn: cfg.Conn, Table: cfg.Table, Create: cfg.Create}, beam.Impulse(s), beam.SideInput{Input: fams})
	// Pass 2, only once pass 1 and the families are done: write.
	toWrite := beam.Reshuffle(s, beamio.Wait(s, ready, files))
	muts := beam.ParDo(s, &readFileFn{Spec: spec}, toWrite)
	_, dead, err := beamio.TryWrite(s, wcfg, muts)
	if err != nil {
		return ImportSummary{}, pipe.UsageError{Err: err}
	}
	beam.ParDo0(s, logDeadLetter, beam.Reshuffle(s, dead)) // a shuffle: see prismSpin
	pr, err := beamx.RunWithMetrics(ctx, p)
	if err != nil {
		return ImportSummary{}, fmt.Errorf("import into %s: %w", cfg.Table, err)
	}
	sum := ImportSummary{Files: names, Rows: counter(pr, "import_rows"), Cells: counter(pr, "import_cells"), Bytes: pipe.Counter(pr, "write_bytes")}
	if n := counter(pr, "dead_letters"); n > 0 {
		return sum, fmt.Errorf("import into %s: the server refused %d entries (printed above as dead letters); the others are written", cfg.Table, n)
	}
	return sum, nil
}

// fileSpec says where a file is and how to read it.
type fileSpec struct {
	In     string
	Format int
}

func (s fileSpec) open(ctx context.Context, name string) (rowfile.RowReader, error) {
	loc, err := rowfile.OpenLocation(ctx, s.In)
	if err != nil {
		return nil, err
	}
	return loc.OpenShard(ctx, name, rowfile.ReaderOptions{Format: rowfile.Format(s.Format), Name: name})
}

// each calls fn with every row of file name.
func (s fileSpec) each(ctx context.Context, name string, fn func(cell.Row) error) error {
	r, err := s.open(ctx, name)
	if err != nil {
		return err
	}
	defer r.Close()
	return rowfile.Each(r, fn)
}

var (
	importRows  = beam.NewCounter("pipelines", "import_rows")
	importCells = beam.NewCounter("pipelines", "import_cells")
)

// checkFileFn reads a whole file, every row validated by the reader, and
// emits the families it uses.
type checkFileFn struct{ Spec fileSpec }

func (f *checkFileFn) ProcessElement(ctx context.Context, name string, emit func(string)) error {
	seen := map[string]bool{}
	err := f.Spec.each(ctx, name, func(r cell.Row) error {
		for _, c := range r.Cells {
			if !seen[c.Family] {
				seen[c.Family] = true
				emit(c.Family)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", name, err)
	}
	return nil
}

// ensureFamiliesFn creates the table's missing families once every file
// has been checked, and signals that writes may start.
type ensureFamiliesFn struct {
	Conn   pipe.Conn
	Table  string
	Create bool
}

func (f *ensureFamiliesFn) ProcessElement(ctx context.Context, _ []byte, fams func(*string) bool, emit func(int)) error {
	var all []string
	var fam string
	for fams(&fam) {
		all = append(all, fam)
	}
	sort.Strings(all)
	if err := pipe.EnsureFamilies(ctx, f.Conn, f.Table, all, f.Create); err != nil {
		return err
	}
	emit(len(all))
	return nil
}

// readFileFn turns each row of a file into the mutations that write it.
type readFileFn struct{ Spec fileSpec }

func (f *readFileFn) ProcessElement(ctx context.Context, name string, emit func(beamio.RowMutation)) error {
	var rows, cells int64
	err := f.Spec.each(ctx, name, func(r cell.Row) error {
		rows++
		cells += int64(len(r.Cells))
		for _, m := range rowMutations(r) {
			emit(m)
		}
		return nil
	})
	importRows.Inc(ctx, rows)
	importCells.Inc(ctx, cells)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

func init() {
	beam.RegisterType(reflect.TypeOf((*checkFileFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*ensureFamiliesFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*readFileFn)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*fileSpec)(nil)).Elem())
}
