package rowfile

import (
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/tabuladb/tabula/storage/cell"
)

// WriterOptions configure NewWriter.
type WriterOptions struct {
	// Format is the file format; Parquet (the template layout) by default.
	Format Format
	// Codec compresses Parquet pages; Snappy by default. JSONL ignores it.
	Codec Codec
	// Columns are the columns of the ParquetColumns layout, in file order
	// (required for that format, ignored by the others). Cells of other
	// columns are not written; Stats.SkippedCells counts them.
	Columns []Column
	// RowGroupBytes ends a Parquet row group once this many payload bytes
	// were written to it, bounding the writer's memory (a row group is
	// buffered until it ends). 0 means DefaultRowGroupBytes.
	RowGroupBytes int64
	// Limits bound what Write accepts (the same checks as the readers, so
	// that every file written reads back); zero means cell.DefaultLimits.
	Limits cell.Limits
}

// DefaultRowGroupBytes is the default row group size, parquet-mr's.
const DefaultRowGroupBytes = 128 << 20

// Stats count what a writer wrote.
type Stats struct {
	Rows         int64
	Cells        int64 // cells written
	SkippedCells int64 // cells not written: columns layout, column not chosen or older version
	Bytes        int64 // bytes written to the output so far; the file size after Close
}

// RowWriter writes rows to one file. It is not safe for concurrent use.
type RowWriter interface {
	// Write adds a row. An invalid row (ValidateRow) is an error wrapping
	// ErrInvalidRow and writes nothing; the writer stays usable. Other
	// errors (the output failed) are final.
	Write(row cell.Row) error
	// Close flushes everything and writes the file's footer. It does not
	// close the underlying io.Writer. The writer must not be used after.
	Close() error
	// Stats returns the counters so far.
	Stats() Stats
}

// NewWriter returns a RowWriter that writes one file of opts.Format to w.
func NewWriter(w io.Writer, opts WriterOptions) (RowWriter, error) {
	cw := &countingWriter{w: w}
	switch opts.Format {
	case Parquet:
		return newTemplateWriter(cw, opts)
	case ParquetColumns:
		return newColumnsWriter(cw, opts)
	case JSONL:
		return newJSONLWriter(cw, opts), nil
	}
	return nil, fmt.Errorf("rowfile: unknown format %v", opts.Format)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// parquetOptions are the writer options every Parquet file gets.
func parquetOptions(schema *parquet.Schema, opts WriterOptions, bigColumns [][]string) ([]parquet.WriterOption, error) {
	codec, err := opts.Codec.parquetCodec()
	if err != nil {
		return nil, err
	}
	o := []parquet.WriterOption{
		schema,
		parquet.Compression(codec),
		parquet.DataPageVersion(1),
		parquet.CreatedBy("tabula rowfile", "1", ""),
	}
	// Min/max statistics of values would copy whole values (up to 100 MiB)
	// into page headers and the footer; they serve no query either.
	for _, p := range bigColumns {
		o = append(o, parquet.SkipPageStatistics(p...), parquet.SkipPageBounds(p...))
	}
	return o, nil
}

// parquetFile is what both Parquet layouts share: the parquet-go writer,
// batching, row group sizing, counters.
//
// Rows are handed to parquet-go in batches: each WriteRows call costs a
// dispatch to the column writers, which dominates when made per row. The
// batched rows' bytes are copied into an arena, so the caller may reuse
// its row as soon as Write returns.
type parquetFile struct {
	out          *countingWriter
	pw           *parquet.Writer
	limits       cell.Limits
	groupBytes   int64
	inGroup      int64 // payload bytes in the current row group
	pendingBytes int64
	pending      []parquet.Row
	vals         []parquet.Value // backing of the pending rows
	arena        []byte          // their bytes
	stats        Stats
	failed       error
	closed       bool
}

// Batches end at batchRows rows or batchBytes bytes of values.
const (
	batchRows  = 256
	batchBytes = 1 << 20
)

func newParquetFile(out *countingWriter, opts WriterOptions, schema *parquet.Schema, big [][]string) (*parquetFile, error) {
	po, err := parquetOptions(schema, opts, big)
	if err != nil {
		return nil, err
	}
	if opts.Format == Parquet {
		po = append(po, parquet.KeyValueMetadata("parquet.avro.schema", TemplateAvroSchema),
			parquet.KeyValueMetadata("writer.model.name", "avro"))
	}
	f := &parquetFile{
		out: out,
		// parquet.Writer writes prebuilt rows (values with their levels)
		// and nothing else. GenericWriter would build reflection-based
		// write functions for the schema up front, and parquet-go's
		// reflection code does not handle the template's two-level list.
		pw:         parquet.NewWriter(out, po...), //nolint:staticcheck // see above
		limits:     limitsOrDefault(opts.Limits),
		groupBytes: opts.RowGroupBytes,
	}
	if f.groupBytes <= 0 {
		f.groupBytes = DefaultRowGroupBytes
	}
	return f, nil
}

// copied returns b copied into the arena. A full arena is replaced, not
// grown: the pending rows still point into the old one.
func (f *parquetFile) copied(b []byte) []byte {
	if len(f.arena)+len(b) > cap(f.arena) {
		f.arena = make([]byte, 0, max(batchBytes, len(b)))
	}
	start := len(f.arena)
	f.arena = append(f.arena, b...)
	return f.arena[start:len(f.arena):len(f.arena)]
}

func (f *parquetFile) bytesValue(b []byte, rep, def, col int) parquet.Value {
	return parquet.ByteArrayValue(f.copied(b)).Level(rep, def, col)
}

func (f *parquetFile) stringValue(s string, rep, def, col int) parquet.Value {
	if len(f.arena)+len(s) > cap(f.arena) {
		f.arena = make([]byte, 0, max(batchBytes, len(s)))
	}
	start := len(f.arena)
	f.arena = append(f.arena, s...)
	return parquet.ByteArrayValue(f.arena[start:len(f.arena):len(f.arena)]).Level(rep, def, col)
}

// endRow ends the row whose values were appended to f.vals from start on,
// of payload size size, writing the batch or ending the row group when
// they are full.
func (f *parquetFile) endRow(start int, size int64) error {
	f.pending = append(f.pending, f.vals[start:len(f.vals):len(f.vals)])
	f.inGroup += size
	f.pendingBytes += size
	if len(f.pending) >= batchRows || f.pendingBytes >= batchBytes || f.inGroup >= f.groupBytes {
		if err := f.flushPending(); err != nil {
			return err
		}
	}
	if f.inGroup >= f.groupBytes {
		if err := f.pw.Flush(); err != nil {
			f.failed = fmt.Errorf("rowfile: flush parquet row group: %w", err)
			return f.failed
		}
		f.inGroup = 0
	}
	return nil
}

func (f *parquetFile) flushPending() error {
	if len(f.pending) == 0 {
		return nil
	}
	if _, err := f.pw.WriteRows(f.pending); err != nil {
		f.failed = fmt.Errorf("rowfile: write parquet rows: %w", err)
		return f.failed
	}
	clear(f.pending)
	f.pending, f.vals, f.arena, f.pendingBytes = f.pending[:0], f.vals[:0], f.arena[:0], 0
	return nil
}

func (f *parquetFile) check(row cell.Row) error {
	if f.closed {
		return errors.New("rowfile: write after Close")
	}
	if f.failed != nil {
		return f.failed
	}
	if err := ValidateRow(row, f.limits, f.stats.Rows); err != nil {
		return err
	}
	return nil
}

func (f *parquetFile) Close() error {
	if f.closed {
		return errors.New("rowfile: Close called twice")
	}
	f.closed = true
	if f.failed != nil {
		return f.failed
	}
	if err := f.flushPending(); err != nil {
		return err
	}
	if err := f.pw.Close(); err != nil {
		return fmt.Errorf("rowfile: finish parquet file: %w", err)
	}
	return nil
}

func (f *parquetFile) Stats() Stats {
	s := f.stats
	s.Bytes = f.out.n
	return s
}

// templateWriter writes the template layout.
type templateWriter struct {
	*parquetFile
}

func newTemplateWriter(out *countingWriter, opts WriterOptions) (*templateWriter, error) {
	big := [][]string{{"cells", "array", "qualifier"}, {"cells", "array", "value"}}
	f, err := newParquetFile(out, opts, TemplateSchema(), big)
	if err != nil {
		return nil, err
	}
	return &templateWriter{parquetFile: f}, nil
}

func (w *templateWriter) Write(row cell.Row) error {
	if err := w.check(row); err != nil {
		return err
	}
	start := len(w.vals)
	w.vals = append(w.vals, w.bytesValue(row.Key, 0, 0, colKey))
	if len(row.Cells) == 0 {
		// An empty list: one null per cell column, below the list's
		// definition level.
		for c := colFamily; c <= colValue; c++ {
			w.vals = append(w.vals, parquet.NullValue().Level(0, 0, c))
		}
	} else {
		// Values go column by column, as the file stores them; the first
		// value of each column starts the row (repetition level 0), the
		// others repeat the list (level 1).
		for i, c := range row.Cells {
			w.vals = append(w.vals, w.stringValue(c.Family, min(i, 1), 1, colFamily))
		}
		for i, c := range row.Cells {
			w.vals = append(w.vals, w.bytesValue(c.Qualifier, min(i, 1), 1, colQualifier))
		}
		for i, c := range row.Cells {
			w.vals = append(w.vals, parquet.Int64Value(c.Timestamp).Level(min(i, 1), 1, colTimestamp))
		}
		for i, c := range row.Cells {
			w.vals = append(w.vals, w.bytesValue(c.Value, min(i, 1), 1, colValue))
		}
	}
	w.stats.Rows++
	w.stats.Cells += int64(len(row.Cells))
	return w.endRow(start, rowBytes(row))
}

// columnsWriter writes the columns layout.
type columnsWriter struct {
	*parquetFile
	index  map[string]int // family + "\x00" + qualifier → column position
	newest []int          // per column: index in the row's cells of its newest version, -1 none
}

func newColumnsWriter(out *countingWriter, opts WriterOptions) (*columnsWriter, error) {
	schema, err := ColumnsSchema(opts.Columns)
	if err != nil {
		return nil, err
	}
	big := make([][]string, len(opts.Columns))
	index := make(map[string]int, len(opts.Columns))
	for i, c := range opts.Columns {
		big[i] = []string{c.Name()}
		index[columnKey(c.Family, c.Qualifier)] = i
	}
	f, err := newParquetFile(out, opts, schema, big)
	if err != nil {
		return nil, err
	}
	return &columnsWriter{parquetFile: f, index: index, newest: make([]int, len(opts.Columns))}, nil
}

func columnKey(family string, qualifier []byte) string {
	return family + "\x00" + string(qualifier)
}

func (w *columnsWriter) Write(row cell.Row) error {
	if err := w.check(row); err != nil {
		return err
	}
	for i := range w.newest {
		w.newest[i] = -1
	}
	written := int64(0)
	for i, c := range row.Cells {
		col, ok := w.index[columnKey(c.Family, c.Qualifier)]
		if !ok {
			continue
		}
		if j := w.newest[col]; j < 0 || c.Timestamp > row.Cells[j].Timestamp {
			if j < 0 {
				written++
			}
			w.newest[col] = i
		}
	}
	start := len(w.vals)
	w.vals = append(w.vals, w.bytesValue(row.Key, 0, 0, 0))
	size := int64(len(row.Key))
	for col, j := range w.newest {
		if j < 0 {
			w.vals = append(w.vals, parquet.NullValue().Level(0, 0, col+1))
			continue
		}
		w.vals = append(w.vals, w.bytesValue(row.Cells[j].Value, 0, 1, col+1))
		size += int64(len(row.Cells[j].Value))
	}
	w.stats.Rows++
	w.stats.Cells += written
	w.stats.SkippedCells += int64(len(row.Cells)) - written
	return w.endRow(start, size)
}
