package rowfile

import (
	"bufio"
	"bytes"
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

// jsonlReader reads JSON Lines, one object per line. Lines in the exact
// form the writer produces take a fast path (decodeCanonical); any other
// valid JSON object — other field order, whitespace, escapes — is decoded
// by encoding/json, so the fast path changes no result, only the speed.
type jsonlReader struct {
	br     *bufio.Reader
	buf    []byte // a line longer than br's buffer, assembled
	name   string
	limits cell.Limits
	line   int64 // lines read
	n      int64 // rows returned
	err    error
}

// NewJSONLReader returns a RowReader of the JSON Lines in r (see the
// package documentation for the encoding): one object per line, blank
// lines skipped. Each object must have a "key" and may have "cells";
// every cell must have family and timestamp, its qualifier and value
// default to empty. Unknown fields are errors, so a misspelt field is not
// silently dropped. Errors name the row (zero-based) and the line
// (one-based).
func NewJSONLReader(r io.Reader, opts ReaderOptions) RowReader {
	return &jsonlReader{br: bufio.NewReaderSize(r, 256<<10), name: opts.Name, limits: limitsOrDefault(opts.Limits)}
}

// readLine returns the next non-blank line without its line end; the
// slice is valid until the next call.
func (r *jsonlReader) readLine() ([]byte, error) {
	for {
		line, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			r.buf = append(r.buf[:0], line...)
			for err == bufio.ErrBufferFull {
				line, err = r.br.ReadSlice('\n')
				r.buf = append(r.buf, line...)
			}
			line = r.buf
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(line) == 0 && err == io.EOF {
			return nil, io.EOF
		}
		r.line++
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
		if err == io.EOF {
			return nil, io.EOF
		}
	}
}

func (r *jsonlReader) Next() (cell.Row, error) {
	if r.err != nil {
		return cell.Row{}, r.err
	}
	line, err := r.readLine()
	if err != nil {
		if err != io.EOF {
			err = fmt.Errorf("rowfile: %s row %d (line %d): %w", r.displayName(), r.n, r.line+1, err)
		}
		r.err = err
		return cell.Row{}, err
	}
	row, ok := decodeCanonical(line)
	if !ok {
		if row, err = r.decodeJSON(line); err != nil {
			r.err = err
			return cell.Row{}, err
		}
	}
	if err := ValidateRow(row, r.limits, r.n); err != nil {
		err.(*RowError).File = r.name
		r.err = err
		return cell.Row{}, err
	}
	r.n++
	return row, nil
}

// decodeJSON decodes one line with encoding/json.
func (r *jsonlReader) decodeJSON(line []byte) (cell.Row, error) {
	var jr jsonRow
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	err := dec.Decode(&jr)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value on the line")
	}
	if err != nil {
		return cell.Row{}, fmt.Errorf("rowfile: %s row %d (line %d): %w", r.displayName(), r.n, r.line, err)
	}
	row := cell.Row{Key: jr.Key}
	if len(jr.Cells) > 0 {
		row.Cells = make([]cell.Cell, len(jr.Cells))
	}
	for i, c := range jr.Cells {
		if c.Timestamp == nil {
			return cell.Row{}, &RowError{File: r.name, Row: r.n, Field: fmt.Sprintf("cells[%d].timestamp", i), Reason: "missing"}
		}
		row.Cells[i] = cell.Cell{Family: c.Family, Qualifier: c.Qualifier, Timestamp: *c.Timestamp, Value: c.Value}
	}
	return row, nil
}

// decodeCanonical decodes a line in exactly the writer's form,
//
//	{"key":"B64","cells":[{"family":"F","qualifier":"B64","timestamp":N,"value":"B64"},...]}
//
// with family free of escapes; ok is false for anything else (the caller
// then decodes it with encoding/json, which also reports errors).
func decodeCanonical(line []byte) (row cell.Row, ok bool) {
	// One allocation holds every decoded byte of the row.
	arena := make([]byte, 0, base64.StdEncoding.DecodedLen(len(line)))
	p := line
	lit := func(s string) bool {
		if !bytes.HasPrefix(p, []byte(s)) {
			return false
		}
		p = p[len(s):]
		return true
	}
	// str returns the bytes up to the next quote (which it consumes); no
	// backslash may occur.
	str := func() ([]byte, bool) {
		i := bytes.IndexByte(p, '"')
		if i < 0 || bytes.IndexByte(p[:i], '\\') >= 0 {
			return nil, false
		}
		s := p[:i]
		p = p[i+1:]
		return s, true
	}
	b64 := func() ([]byte, bool) {
		s, ok := str()
		if !ok {
			return nil, false
		}
		start := len(arena)
		out := arena[start : start+base64.StdEncoding.DecodedLen(len(s))]
		n, err := base64.StdEncoding.Decode(out, s)
		if err != nil {
			return nil, false
		}
		arena = arena[:start+n]
		return arena[start : start+n : start+n], true
	}
	if !lit(`{"key":"`) {
		return row, false
	}
	if row.Key, ok = b64(); !ok || !lit(`,"cells":[`) {
		return row, false
	}
	if lit(`]}`) {
		return row, len(p) == 0
	}
	for {
		var c cell.Cell
		if !lit(`{"family":"`) {
			return row, false
		}
		fam, ok := str()
		if !ok || !lit(`,"qualifier":"`) {
			return row, false
		}
		c.Family = string(fam)
		if c.Qualifier, ok = b64(); !ok || !lit(`,"timestamp":`) {
			return row, false
		}
		end := bytes.IndexByte(p, ',')
		if end < 0 {
			return row, false
		}
		ts, err := strconv.ParseInt(string(p[:end]), 10, 64)
		if err != nil {
			return row, false
		}
		c.Timestamp = ts
		p = p[end:]
		if !lit(`,"value":"`) {
			return row, false
		}
		if c.Value, ok = b64(); !ok || !lit(`}`) {
			return row, false
		}
		row.Cells = append(row.Cells, c)
		if lit(`]}`) {
			return row, len(p) == 0
		}
		if !lit(`,`) {
			return row, false
		}
	}
}

func (r *jsonlReader) displayName() string {
	if r.name == "" {
		return "jsonl"
	}
	return r.name
}

func (r *jsonlReader) Close() error { return nil }
