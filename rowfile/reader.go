package rowfile

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/tabuladb/tabula/storage/cell"
)

// ErrCorrupt is matched (errors.Is) by errors about a file that cannot be
// decoded: truncated, not Parquet, or with damaged pages.
var ErrCorrupt = errors.New("rowfile: corrupt file")

// ReaderOptions configure NewReader and NewJSONLReader.
type ReaderOptions struct {
	// Format of the file; Parquet (the template layout) by default.
	Format Format
	// Limits every row is checked against; zero means cell.DefaultLimits.
	Limits cell.Limits
	// Name names the file in errors.
	Name string
}

// RowReader returns the rows of one file in file order.
type RowReader interface {
	// Next returns the next row, or io.EOF after the last. Every row is
	// validated (ValidateRow) first; an invalid row is a *RowError
	// (ErrInvalidRow). After any error, Next keeps returning it. The
	// returned row's memory is the caller's.
	Next() (cell.Row, error)
	// Close releases the reader; it does not close the underlying file.
	Close() error
}

// NewReader opens a file of opts.Format that r holds (size bytes). For
// Parquet it reads the footer and checks the schema before returning: a
// file that is not Parquet or is truncated is an ErrCorrupt error, one
// whose schema is not the layout's is a *SchemaError (ErrSchema) naming the
// field. JSONL files are read as a stream (NewJSONLReader).
func NewReader(r io.ReaderAt, size int64, opts ReaderOptions) (RowReader, error) {
	if opts.Format == JSONL {
		return NewJSONLReader(io.NewSectionReader(r, 0, size), opts), nil
	}
	f, err := openParquet(r, size, opts.Name)
	if err != nil {
		return nil, err
	}
	pr := &parquetReader{file: f, name: opts.Name, limits: limitsOrDefault(opts.Limits)}
	switch opts.Format {
	case Parquet:
		lay, err := checkTemplate(f.Schema())
		if err != nil {
			return nil, pr.wrap(err)
		}
		pr.template = &lay
	case ParquetColumns:
		lay, err := checkColumns(f.Schema())
		if err != nil {
			return nil, pr.wrap(err)
		}
		pr.columns = &lay
	default:
		return nil, fmt.Errorf("rowfile: unknown format %v", opts.Format)
	}
	return pr, nil
}

// CheckSchema opens the Parquet file r holds and checks its schema against
// the layout of format, reading only the footer. Errors as NewReader's.
func CheckSchema(r io.ReaderAt, size int64, format Format, name string) error {
	rr, err := NewReader(r, size, ReaderOptions{Format: format, Name: name})
	if err != nil {
		return err
	}
	return rr.Close()
}

// openParquet opens a Parquet file, turning parquet-go's failures and
// panics on damaged input into ErrCorrupt errors.
func openParquet(r io.ReaderAt, size int64, name string) (f *parquet.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, corrupt(name, fmt.Errorf("%v", p))
		}
	}()
	f, err = parquet.OpenFile(r, size, parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
	if err != nil {
		return nil, corrupt(name, err)
	}
	return f, nil
}

func corrupt(name string, err error) error {
	if name == "" {
		name = "parquet file"
	}
	return fmt.Errorf("rowfile: %s: %w: %w", name, ErrCorrupt, err)
}

type parquetReader struct {
	file     *parquet.File
	name     string
	limits   cell.Limits
	template *templateLayout
	columns  *columnsLayout

	group int           // next row group
	rows  parquet.Rows  // current row group's rows, nil between groups
	buf   []parquet.Row // rows read ahead
	batch int           // rows the next fill reads
	pos   int           // next row of buf
	n     int64         // rows returned
	err   error         // sticky
	colOf []int         // columns layout: columns sorted for output → position in layout
}

func (r *parquetReader) wrap(err error) error {
	if r.name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", r.name, err)
}

func (r *parquetReader) Next() (row cell.Row, err error) {
	if r.err != nil {
		return cell.Row{}, r.err
	}
	defer func() {
		if p := recover(); p != nil {
			err = corrupt(r.name, fmt.Errorf("row %d: %v", r.n, p))
		}
		if err != nil {
			r.err = err
			row = cell.Row{}
		}
	}()
	for r.pos >= len(r.buf) {
		if err := r.fill(); err != nil {
			return cell.Row{}, err
		}
	}
	pr := r.buf[r.pos]
	r.pos++
	if r.template != nil {
		row, err = r.templateRow(pr)
	} else {
		row, err = r.columnsRow(pr)
	}
	if err != nil {
		return cell.Row{}, err
	}
	if err := ValidateRow(row, r.limits, r.n); err != nil {
		err.(*RowError).File = r.name
		return cell.Row{}, err
	}
	r.n++
	return row, nil
}

// readAhead is how many rows fill reads at once, at most; readAheadBytes
// bounds it for large rows (rows read ahead hold their pages in memory).
const (
	readAhead      = 64
	readAheadBytes = 16 << 20
)

// fill reads the next batch of rows, moving to the next row group when one
// ends; io.EOF after the last.
func (r *parquetReader) fill() error {
	if r.rows == nil {
		groups := r.file.RowGroups()
		if r.group >= len(groups) {
			return io.EOF
		}
		r.rows = groups[r.group].Rows()
		r.group++
	}
	if cap(r.buf) == 0 {
		r.buf = make([]parquet.Row, readAhead)
		r.batch = 1 // until the size of a row is known
	}
	r.buf = r.buf[:r.batch]
	n, err := r.rows.ReadRows(r.buf)
	r.buf, r.pos = r.buf[:n], 0
	if n > 0 {
		// Size the next batch from this one's bytes per row.
		var size int
		for _, row := range r.buf {
			for _, v := range row {
				if v.Kind() == parquet.ByteArray && !v.IsNull() {
					size += len(v.ByteArray())
				}
			}
		}
		r.batch = max(1, min(readAhead, readAheadBytes*n/max(size, 1)))
	}
	if err == io.EOF {
		r.rows.Close()
		r.rows = nil
		return nil
	}
	if err != nil {
		return corrupt(r.name, fmt.Errorf("row %d: %w", r.n+int64(n), err))
	}
	return nil
}

func (r *parquetReader) rowErr(field, format string, args ...any) error {
	return &RowError{File: r.name, Row: r.n, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// templateRow turns one record of the template layout into a row. The
// record's values are grouped by column; the four cell columns have one
// value per list entry (or one below cellDef for an empty list).
func (r *parquetReader) templateRow(pr parquet.Row) (cell.Row, error) {
	lay := r.template
	var perCol [templateColumns][]parquet.Value
	// Values are ordered by column; slice the row into runs.
	for start := 0; start < len(pr); {
		c := pr[start].Column()
		end := start + 1
		for end < len(pr) && pr[end].Column() == c {
			end++
		}
		for k := range templateColumns {
			if lay.col[k] == c {
				perCol[k] = pr[start:end]
			}
		}
		start = end
	}
	keys := perCol[colKey]
	if len(keys) != 1 {
		return cell.Row{}, corrupt(r.name, fmt.Errorf("row %d: %d key values", r.n, len(keys)))
	}
	fam, qual, ts, val := perCol[colFamily], perCol[colQualifier], perCol[colTimestamp], perCol[colValue]
	if len(qual) != len(fam) || len(ts) != len(fam) || len(val) != len(fam) {
		return cell.Row{}, corrupt(r.name, fmt.Errorf("row %d: cell columns disagree on the number of cells (%d, %d, %d, %d)",
			r.n, len(fam), len(qual), len(ts), len(val)))
	}
	// One allocation for all the row's bytes.
	size := len(keys[0].ByteArray())
	cells := 0
	for i := range fam {
		if fam[i].DefinitionLevel() >= lay.cellDef {
			cells++
			size += len(fam[i].ByteArray()) + len(qual[i].ByteArray()) + len(val[i].ByteArray())
		}
	}
	arena := make([]byte, 0, size)
	take := func(b []byte) []byte {
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	if keys[0].DefinitionLevel() < lay.maxDef[colKey] {
		return cell.Row{}, r.rowErr("key", "null")
	}
	row := cell.Row{Key: take(keys[0].ByteArray())}
	if cells > 0 {
		row.Cells = make([]cell.Cell, 0, cells)
	}
	for i := range fam {
		if fam[i].DefinitionLevel() < lay.cellDef {
			continue // an empty (or null) list
		}
		idx := len(row.Cells)
		if fam[i].DefinitionLevel() < lay.elemDef {
			return cell.Row{}, r.rowErr(fmt.Sprintf("cells[%d]", idx), "null cell")
		}
		if fam[i].DefinitionLevel() < lay.maxDef[colFamily] {
			return cell.Row{}, r.rowErr(fmt.Sprintf("cells[%d].family", idx), "null")
		}
		if ts[i].DefinitionLevel() < lay.maxDef[colTimestamp] {
			return cell.Row{}, r.rowErr(fmt.Sprintf("cells[%d].timestamp", idx), "null")
		}
		// A null qualifier or value is an empty one: Bigtable has no
		// distinction.
		row.Cells = append(row.Cells, cell.Cell{
			Family:    string(fam[i].ByteArray()),
			Qualifier: take(qual[i].ByteArray()),
			Timestamp: ts[i].Int64(),
			Value:     take(val[i].ByteArray()),
		})
	}
	return row, nil
}

// columnsRow turns one record of the columns layout into a row with one
// cell (timestamp 0) per non-null column, in column order.
func (r *parquetReader) columnsRow(pr parquet.Row) (cell.Row, error) {
	lay := r.columns
	if r.colOf == nil {
		r.colOf = make([]int, len(lay.columns))
		for i := range r.colOf {
			r.colOf[i] = i
		}
		slices.SortStableFunc(r.colOf, func(a, b int) int { return columnOrder(lay.columns[a], lay.columns[b]) })
	}
	byCol := make(map[int]parquet.Value, len(pr))
	for _, v := range pr {
		byCol[v.Column()] = v
	}
	k, ok := byCol[lay.keyCol]
	if !ok || k.DefinitionLevel() < lay.keyDef {
		return cell.Row{}, r.rowErr("key", "null")
	}
	row := cell.Row{Key: slices.Clone(k.ByteArray())}
	for _, i := range r.colOf {
		v, ok := byCol[lay.colIdx[i]]
		if !ok || v.DefinitionLevel() < lay.maxDef[i] {
			continue
		}
		c := lay.columns[i]
		row.Cells = append(row.Cells, cell.Cell{Family: c.Family, Qualifier: slices.Clone(c.Qualifier), Value: slices.Clone(v.ByteArray())})
	}
	return row, nil
}

func (r *parquetReader) Close() error {
	if r.rows != nil {
		err := r.rows.Close()
		r.rows = nil
		return err
	}
	return nil
}

// Each calls fn with every row r returns, in order, until the end of the
// file (nil), an error of r, or an error of fn, which it returns. It does
// not close r.
func Each(r RowReader, fn func(cell.Row) error) error {
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(row); err != nil {
			return err
		}
	}
}
