package rowfile

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/tabuladb/tabula/storage/cell"
)

// jsonlWriter writes JSON Lines by hand: encoding/json would reflect over
// every row, and the format is fixed.
type jsonlWriter struct {
	out    *countingWriter
	bw     *bufio.Writer
	limits cell.Limits
	buf    []byte
	stats  Stats
	failed error
	closed bool
}

func newJSONLWriter(out *countingWriter, opts WriterOptions) *jsonlWriter {
	return &jsonlWriter{out: out, bw: bufio.NewWriterSize(out, 256<<10), limits: limitsOrDefault(opts.Limits)}
}

func appendBase64(b, data []byte) []byte {
	return base64.StdEncoding.AppendEncode(b, data)
}

func (w *jsonlWriter) Write(row cell.Row) error {
	if w.closed {
		return errors.New("rowfile: write after Close")
	}
	if w.failed != nil {
		return w.failed
	}
	if err := ValidateRow(row, w.limits, w.stats.Rows); err != nil {
		return err
	}
	b := append(w.buf[:0], `{"key":"`...)
	b = appendBase64(b, row.Key)
	b = append(b, `","cells":[`...)
	for i, c := range row.Cells {
		if i > 0 {
			b = append(b, ',')
		}
		// Family names are validated ([-_.a-zA-Z0-9]): no escaping needed.
		b = append(b, `{"family":"`...)
		b = append(b, c.Family...)
		b = append(b, `","qualifier":"`...)
		b = appendBase64(b, c.Qualifier)
		b = append(b, `","timestamp":`...)
		b = strconv.AppendInt(b, c.Timestamp, 10)
		b = append(b, `,"value":"`...)
		b = appendBase64(b, c.Value)
		b = append(b, `"}`...)
	}
	b = append(b, "]}\n"...)
	w.buf = b
	if _, err := w.bw.Write(b); err != nil {
		w.failed = fmt.Errorf("rowfile: write jsonl: %w", err)
		return w.failed
	}
	w.stats.Rows++
	w.stats.Cells += int64(len(row.Cells))
	return nil
}

func (w *jsonlWriter) Close() error {
	if w.closed {
		return errors.New("rowfile: Close called twice")
	}
	w.closed = true
	if w.failed != nil {
		return w.failed
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("rowfile: write jsonl: %w", err)
	}
	return nil
}

func (w *jsonlWriter) Stats() Stats {
	s := w.stats
	s.Bytes = w.out.n
	return s
}

// jsonRow is the JSON shape of a row; []byte fields are base64.
type jsonRow struct {
	Key   []byte     `json:"key"`
	Cells []jsonCell `json:"cells"`
}

type jsonCell struct {
	Family    string `json:"family"`
	Qualifier []byte `json:"qualifier"`
	Timestamp *int64 `json:"timestamp"`
	Value     []byte `json:"value"`
}

// jsonlReader reads JSON Lines.
type jsonlReader struct {
	dec    *json.Decoder
	name   string
	limits cell.Limits
	n      int64
	err    error
}

// NewJSONLReader returns a RowReader of the JSON Lines in r (see the
// package documentation for the encoding). Each object must have a "key"
// and may have "cells"; every cell must have family and timestamp, its
// qualifier and value default to empty. Unknown fields are errors, so a
// misspelt field is not silently dropped. Errors name the row (zero-based)
// and the byte offset.
func NewJSONLReader(r io.Reader, opts ReaderOptions) RowReader {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 256<<10))
	dec.DisallowUnknownFields()
	return &jsonlReader{dec: dec, name: opts.Name, limits: limitsOrDefault(opts.Limits)}
}

func (r *jsonlReader) Next() (cell.Row, error) {
	if r.err != nil {
		return cell.Row{}, r.err
	}
	var jr jsonRow
	off := r.dec.InputOffset()
	if err := r.dec.Decode(&jr); err != nil {
		if err == io.EOF {
			r.err = io.EOF
		} else {
			r.err = fmt.Errorf("rowfile: %s row %d (byte %d): %w", r.displayName(), r.n, off, err)
		}
		return cell.Row{}, r.err
	}
	row := cell.Row{Key: jr.Key}
	if len(jr.Cells) > 0 {
		row.Cells = make([]cell.Cell, len(jr.Cells))
	}
	for i, c := range jr.Cells {
		if c.Timestamp == nil {
			r.err = &RowError{File: r.name, Row: r.n, Field: fmt.Sprintf("cells[%d].timestamp", i), Reason: "missing"}
			return cell.Row{}, r.err
		}
		row.Cells[i] = cell.Cell{Family: c.Family, Qualifier: c.Qualifier, Timestamp: *c.Timestamp, Value: c.Value}
	}
	if err := ValidateRow(row, r.limits, r.n); err != nil {
		err.(*RowError).File = r.name
		r.err = err
		return cell.Row{}, err
	}
	r.n++
	return row, nil
}

func (r *jsonlReader) displayName() string {
	if r.name == "" {
		return "jsonl"
	}
	return r.name
}

func (r *jsonlReader) Close() error { return nil }
