package rowfile

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

func TestParseFormatAndCodec(t *testing.T) {
	for in, want := range map[string]Format{"parquet": Parquet, "Template": Parquet, "columns": ParquetColumns, "parquet-columns": ParquetColumns, "jsonl": JSONL, "json": JSONL} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("csv"); err == nil {
		t.Error("ParseFormat(csv) succeeded")
	}
	for _, f := range []Format{Parquet, ParquetColumns, JSONL} {
		if got, _ := ParseFormat(f.String()); got != f {
			t.Errorf("ParseFormat(%s) = %v", f, got)
		}
	}
	for _, c := range []Codec{Snappy, Uncompressed, Zstd, Gzip} {
		if got, err := ParseCodec(c.String()); err != nil || got != c {
			t.Errorf("ParseCodec(%s) = %v, %v", c, got, err)
		}
	}
	if _, err := ParseCodec("lz4"); err == nil {
		t.Error("ParseCodec(lz4) succeeded")
	}
}

// TestWriterRefusesInvalidRows: an invalid row is an ErrInvalidRow that
// writes nothing; the writer goes on, and the file reads back.
func TestWriterRefusesInvalidRows(t *testing.T) {
	for _, f := range []Format{Parquet, ParquetColumns, JSONL} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, WriterOptions{Format: f, Columns: []Column{{Family: "f", Qualifier: []byte("q")}}})
		if err != nil {
			t.Fatal(err)
		}
		good := cell.Row{Key: []byte("k"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Timestamp: 3, Value: []byte("v")}}}
		for _, bad := range []cell.Row{
			{},
			{Key: []byte("k"), Cells: []cell.Cell{{Family: "bad family"}}},
			{Key: []byte("k"), Cells: []cell.Cell{{Family: "f", Timestamp: -1}}},
		} {
			if err := w.Write(bad); !errors.Is(err, ErrInvalidRow) {
				t.Errorf("%s: Write(%v) = %v, want ErrInvalidRow", f, bad, err)
			}
		}
		if err := w.Write(good); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(good); err == nil {
			t.Errorf("%s: Write after Close succeeded", f)
		}
		if st := w.Stats(); st.Rows != 1 || st.Cells != 1 || st.Bytes != int64(buf.Len()) {
			t.Errorf("%s: stats %+v", f, st)
		}
		got := readAll(t, buf.Bytes(), ReaderOptions{Format: f})
		if len(got) != 1 || !bytes.Equal(got[0].Key, good.Key) {
			t.Errorf("%s: read back %v", f, got)
		}
	}
}

// TestColumnsRoundTrip: the columns layout keeps, per chosen column, the
// newest value; other columns and older versions are skipped and counted.
func TestColumnsRoundTrip(t *testing.T) {
	rows := []cell.Row{
		{Key: []byte("a"), Cells: []cell.Cell{
			{Family: "f", Qualifier: []byte("q"), Timestamp: 1, Value: []byte("old")},
			{Family: "f", Qualifier: []byte("q"), Timestamp: 9, Value: []byte("new")},
			{Family: "g", Qualifier: []byte(""), Timestamp: 2, Value: []byte{}},
			{Family: "h", Qualifier: []byte("x"), Timestamp: 2, Value: []byte("dropped")},
		}},
		{Key: []byte("b")},
		{Key: []byte("c"), Cells: []cell.Cell{{Family: "g", Timestamp: 2, Value: []byte("only g")}}},
	}
	cols := []Column{{Family: "g"}, {Family: "f", Qualifier: []byte("q")}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriterOptions{Format: ParquetColumns, Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Rows != 3 || st.Cells != 3 || st.SkippedCells != 2 {
		t.Errorf("stats %+v, want 3 rows, 3 cells, 2 skipped", st)
	}
	got := readAll(t, buf.Bytes(), ReaderOptions{Format: ParquetColumns})
	want := []cell.Row{
		{Key: []byte("a"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Value: []byte("new")}, {Family: "g", Qualifier: []byte{}, Value: []byte{}}}},
		{Key: []byte("b")},
		{Key: []byte("c"), Cells: []cell.Cell{{Family: "g", Qualifier: []byte{}, Value: []byte("only g")}}},
	}
	if len(got) != len(want) {
		t.Fatalf("read %d rows", len(got))
	}
	for i := range want {
		if !rowsEqual(normalize(got)[i], normalize(want)[i]) {
			t.Errorf("row %d = %s, want %s", i, describeRow(got[i]), describeRow(want[i]))
		}
	}
	for _, bad := range [][]Column{nil, {{Family: "f"}, {Family: "f"}}, {{Family: "bad fam"}}, {{Family: "f", Qualifier: []byte{0xff}}}} {
		if _, err := ColumnsSchema(bad); err == nil {
			t.Errorf("ColumnsSchema(%v) succeeded", bad)
		}
	}
	if _, err := ParseColumn("nocolon"); err == nil {
		t.Error("ParseColumn(nocolon) succeeded")
	}
	if c, err := ParseColumn("f:a:b"); err != nil || c.Family != "f" || string(c.Qualifier) != "a:b" {
		t.Errorf("ParseColumn(f:a:b) = %v, %v", c, err)
	}
}

// TestEmptyFiles: a file of no rows, in every format, reads as no rows.
func TestEmptyFiles(t *testing.T) {
	for _, f := range []Format{Parquet, ParquetColumns, JSONL} {
		data := writeAll(t, nil, WriterOptions{Format: f, Columns: []Column{{Family: "f"}}})
		if got := readAll(t, data, ReaderOptions{Format: f}); len(got) != 0 {
			t.Errorf("%s: %d rows from an empty file", f, len(got))
		}
	}
}

func TestJSONLFormat(t *testing.T) {
	row := cell.Row{Key: []byte{0, 'k', 0xff}, Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Timestamp: 1700000000000000, Value: []byte("hi")}}}
	data := writeAll(t, []cell.Row{row, {Key: []byte("e")}}, WriterOptions{Format: JSONL})
	want := `{"key":"AGv/","cells":[{"family":"f","qualifier":"cQ==","timestamp":1700000000000000,"value":"aGk="}]}` + "\n" + `{"key":"ZQ==","cells":[]}` + "\n"
	if string(data) != want {
		t.Errorf("JSONL\n%s\nwant\n%s", data, want)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"key":"aw==","cells":[{"family":"f","timestamp":1}]}`, ""},
		{`{"key":"aw==","cells":[{"family":"f"}]}`, "cells[0].timestamp: missing"},
		{`{"key":"aw==","cells":[{"family":"f","timestamp":1,"labels":[]}]}`, `unknown field "labels"`},
		{`{"key":"not base64!"}`, "illegal base64"},
		{`{"key":""}`, "row key must not be empty"},
		{`{"key":"aw==","cells":[{"family":"","timestamp":1}]}`, "cells[0].family"},
		{`{"key":"aw==","cells":[{"family":"f","timestamp":1.5}]}`, "timestamp"},
		{`{"key":"aw==","cel`, "unexpected EOF"},
		{`[1,2]`, "cannot unmarshal array"},
	} {
		r := NewJSONLReader(strings.NewReader(`{"key":"b2s="}`+"\n"+tc.in+"\n"), ReaderOptions{Name: "x.jsonl"})
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		_, err := r.Next()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "x.jsonl") || !strings.Contains(err.Error(), "row 1") {
			t.Errorf("%s: err = %v, want one with %q, the file name and row 1", tc.in, err, tc.want)
		}
		if _, err2 := r.Next(); err2 == io.EOF || err2 == nil {
			t.Errorf("%s: Next after an error = %v", tc.in, err2)
		}
	}
}

// TestJSONLForms: the same rows in the writer's form and in other valid
// JSON forms (field order, whitespace, escapes, blank lines, CRLF) read the
// same.
func TestJSONLForms(t *testing.T) {
	rows := smallRows(30)
	canonical := writeAll(t, rows, WriterOptions{Format: JSONL})
	other := `
{ "cells" : [ {"value":"aGk=", "timestamp": 5, "qualifier":"cQ==", "family":"\u0066"} ], "key": "azE=" }` + "\r\n" + `
{"key":"azI="}
`
	want := []cell.Row{
		{Key: []byte("k1"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Timestamp: 5, Value: []byte("hi")}}},
		{Key: []byte("k2")},
	}
	got := readAll(t, append(append([]byte{}, canonical...), other...), ReaderOptions{Format: JSONL})
	if len(got) != len(rows)+2 {
		t.Fatalf("read %d rows, want %d", len(got), len(rows)+2)
	}
	for i, w := range append(slices.Clone(rows), want...) {
		if !rowsEqual(normalize(got)[i], normalize([]cell.Row{w})[0]) {
			t.Errorf("row %d = %s, want %s", i, describeRow(got[i]), describeRow(w))
		}
	}
}

// FuzzJSONLFastPath: whenever the fast path accepts a line, encoding/json
// decodes it to the same row.
func FuzzJSONLFastPath(f *testing.F) {
	for _, r := range smallRows(5) {
		f.Add(bytes.TrimSuffix(writeAll(f, []cell.Row{r}, WriterOptions{Format: JSONL}), []byte("\n")))
	}
	f.Add([]byte(`{"key":"azE=","cells":[]}`))
	f.Add([]byte(`{"key":"azE=","cells":[{"family":"f","qualifier":"","timestamp":-1,"value":""}]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := decodeCanonical(line)
		if !ok {
			return
		}
		r := &jsonlReader{}
		slow, err := r.decodeJSON(line)
		if err != nil {
			t.Fatalf("fast path accepted %q, encoding/json says %v", line, err)
		}
		if !rowsEqual(normalize([]cell.Row{fast})[0], normalize([]cell.Row{slow})[0]) {
			t.Fatalf("%q: fast path %s, encoding/json %s", line, describeRow(fast), describeRow(slow))
		}
	})
}
