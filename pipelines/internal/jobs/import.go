package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

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
	// missing, or the families the files use that it lacks. Without
	// Create a missing table or family fails the import with nothing
	// written.
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
// pipeline every row of every file — checks that the table has the
// families the files use (with Create, creates the table or the families
// it lacks; without, a missing one fails the import), and only then
// writes the rows, each cell at its own timestamp. A file with
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
	loc, err := openInput(ctx, cfg.In)
	if err != nil {
		return ImportSummary{}, err
	}
	ext := cfg.Format.Ext()
	if cfg.Prefix == "" {
		names, err := loc.List(ctx)
		if err != nil {
			return ImportSummary{}, inputError(cfg.In, err)
		}
		prefixes := rowfile.ShardPrefixes(names, ext)
		switch len(prefixes) {
		case 0:
			return ImportSummary{}, fmt.Errorf("--in %s holds no shards: no files named PREFIX-SSSSS-of-NNNNN.%s", cfg.In, ext)
		case 1:
			cfg.Prefix = prefixes[0]
		default:
			return ImportSummary{}, pipe.Usagef("--in %s holds shard sets of several prefixes (%s): choose one with --prefix", cfg.In, strings.Join(prefixes, ", "))
		}
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
		if refusal := refusedFamilies.FindString(err.Error()); refusal != "" {
			// The runner's error buries the reason in its plan.
			return ImportSummary{}, fmt.Errorf("%s (nothing written)", refusal)
		}
		return ImportSummary{}, fmt.Errorf("import into %s: %w", cfg.Table, err)
	}
	sum := ImportSummary{Files: names, Rows: counter(pr, "import_rows"), Cells: counter(pr, "import_cells"), Bytes: pipe.Counter(pr, "write_bytes")}
	if n := counter(pr, "dead_letters"); n > 0 {
		return sum, fmt.Errorf("import into %s: the server refused %d entries (printed above as dead letters); the others are written", cfg.Table, n)
	}
	return sum, nil
}

// openInput opens the import's input location. A local directory or an
// S3 bucket must exist (rowfile.OpenSource; OpenLocation would create
// it): a missing or unreadable one is an error naming --in and the
// reason.
func openInput(ctx context.Context, in string) (*rowfile.Location, error) {
	if dir, ok := localDir(in); ok {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, inputError(in, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("--in %s: not a directory", in)
		}
	}
	loc, err := rowfile.OpenSource(ctx, in)
	if err != nil {
		return nil, inputError(in, err)
	}
	return loc, nil
}

// localDir returns the directory of a local input (a path or file://
// URL), false for a remote one.
func localDir(in string) (string, bool) {
	if u, err := url.Parse(in); err == nil && u.Scheme == "file" {
		return u.Path, true
	}
	return in, !strings.Contains(in, "://")
}

// inputError is err, from reading the import's input in, as "--in IN:
// REASON", without rowfile's repeat of the location or, for the input
// directory itself, the OS's repeat of the path: "--in /x: no such file
// or directory".
func inputError(in string, err error) error {
	if msg := err.Error(); strings.HasPrefix(msg, "rowfile: list ") || strings.HasPrefix(msg, "rowfile: location ") {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
	}
	var pe *fs.PathError
	if dir, ok := localDir(in); ok && errors.As(err, &pe) && samePath(pe.Path, dir) {
		err = pe.Err
	}
	return fmt.Errorf("--in %s: %w", in, err)
}

func samePath(a, b string) bool {
	a, errA := filepath.Abs(a)
	b, errB := filepath.Abs(b)
	return errA == nil && errB == nil && a == b
}

// refusedFamilies finds ensureFamiliesFn's error (a
// pipe.MissingFamiliesError) in the text of a failed run's error, which
// the runner returns as text.
var refusedFamilies = regexp.MustCompile(`table \S+ lacks families [^\n]*?\(use --create to add them\)`)

// fileSpec says where a file is and how to read it.
type fileSpec struct {
	In     string
	Format int
}

func (s fileSpec) open(ctx context.Context, name string) (rowfile.RowReader, error) {
	loc, err := openInput(ctx, s.In)
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
	if err := pipe.EnsureFamilies(ctx, f.Conn, f.Table, all, f.Create, "that the files use"); err != nil {
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
