package rowfile

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/tabuladb/tabula/storage/cell"
)

// writeStructs writes rows of Go type T with parquet-go's own struct
// mapping: files laid out as other tools lay them out.
func writeStructs[T any](t *testing.T, rows []T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The three-level list of the Parquet spec (pyarrow, parquet-avro with
// write-old-list-structure=false), optional fields, timestamp annotated.
type specCell struct {
	Family    string `parquet:"family"`
	Qualifier []byte `parquet:"qualifier,optional"`
	Timestamp int64  `parquet:"timestamp,timestamp(microsecond)"`
	Value     []byte `parquet:"value,optional"`
}

type specRow struct {
	Cells []specCell `parquet:"cells,list"`
	Key   []byte     `parquet:"key"`
}

// The oldest form: a bare repeated group.
type bareRow struct {
	Key   []byte `parquet:"key"`
	Cells []struct {
		Family    string `parquet:"family"`
		Qualifier []byte `parquet:"qualifier"`
		Timestamp int64  `parquet:"timestamp"`
		Value     []byte `parquet:"value"`
	} `parquet:"cells"`
}

// TestReadOtherListForms reads files in the list forms other writers use.
func TestReadOtherListForms(t *testing.T) {
	want := []cell.Row{
		{Key: []byte("a"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte("q"), Timestamp: 5, Value: []byte("v")}, {Family: "g", Qualifier: []byte{}, Timestamp: 7, Value: []byte{}}}},
		{Key: []byte("b")},
		{Key: []byte("c"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte{0}, Timestamp: 1, Value: []byte{0xff}}}},
	}
	spec := writeStructs(t, []specRow{
		{Key: []byte("a"), Cells: []specCell{{Family: "f", Qualifier: []byte("q"), Timestamp: 5, Value: []byte("v")}, {Family: "g", Timestamp: 7}}},
		{Key: []byte("b")},
		{Key: []byte("c"), Cells: []specCell{{Family: "f", Qualifier: []byte{0}, Timestamp: 1, Value: []byte{0xff}}}},
	})
	bare := make([]bareRow, len(want))
	for i, r := range want {
		bare[i].Key = r.Key
		for _, c := range r.Cells {
			bare[i].Cells = append(bare[i].Cells, struct {
				Family    string `parquet:"family"`
				Qualifier []byte `parquet:"qualifier"`
				Timestamp int64  `parquet:"timestamp"`
				Value     []byte `parquet:"value"`
			}{c.Family, c.Qualifier, c.Timestamp, c.Value})
		}
	}
	for name, data := range map[string][]byte{"three-level": spec, "bare repeated": writeStructs(t, bare)} {
		got := readAll(t, data, ReaderOptions{})
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", name, len(got), len(want))
		}
		for i := range want {
			if !rowsEqual(got[i], want[i]) {
				t.Errorf("%s: row %d = %s, want %s", name, i, describeRow(got[i]), describeRow(want[i]))
			}
		}
	}
}

// TestWrongSchemas: files whose schema is not the template's fail at open
// time with an ErrSchema naming the field.
func TestWrongSchemas(t *testing.T) {
	type cellNoTS struct {
		Family    string `parquet:"family"`
		Qualifier []byte `parquet:"qualifier"`
		Value     []byte `parquet:"value"`
	}
	type cellStringTS struct {
		Family    string `parquet:"family"`
		Qualifier []byte `parquet:"qualifier"`
		Timestamp string `parquet:"timestamp"`
		Value     []byte `parquet:"value"`
	}
	type cellMillis struct {
		Family    string `parquet:"family"`
		Qualifier []byte `parquet:"qualifier"`
		Timestamp int64  `parquet:"timestamp,timestamp(millisecond)"`
		Value     []byte `parquet:"value"`
	}
	type cellExtra struct {
		Family    string   `parquet:"family"`
		Qualifier []byte   `parquet:"qualifier"`
		Timestamp int64    `parquet:"timestamp"`
		Value     []byte   `parquet:"value"`
		Labels    []string `parquet:"labels,list"`
	}
	for _, tc := range []struct {
		name, field string
		data        []byte
	}{
		{"no key", "key", writeStructs(t, []struct {
			Cells []specCell `parquet:"cells,list"`
		}{{}})},
		{"no cells", "cells", writeStructs(t, []struct {
			Key []byte `parquet:"key"`
		}{{Key: []byte("k")}})},
		{"int key", "key", writeStructs(t, []struct {
			Key   int64      `parquet:"key"`
			Cells []specCell `parquet:"cells,list"`
		}{{Key: 1}})},
		{"extra field", "labels", writeStructs(t, []struct {
			Key    []byte     `parquet:"key"`
			Cells  []specCell `parquet:"cells,list"`
			Labels string     `parquet:"labels"`
		}{{Key: []byte("k")}})},
		{"cells not a list", "cells", writeStructs(t, []struct {
			Key   []byte   `parquet:"key"`
			Cells specCell `parquet:"cells"`
		}{{Key: []byte("k")}})},
		{"list of strings", "cells", writeStructs(t, []struct {
			Key   []byte   `parquet:"key"`
			Cells []string `parquet:"cells"`
		}{{Key: []byte("k")}})},
		{"no timestamp", "cells.list.element.timestamp", writeStructs(t, []struct {
			Key   []byte     `parquet:"key"`
			Cells []cellNoTS `parquet:"cells,list"`
		}{{Key: []byte("k")}})},
		{"string timestamp", "cells.list.element.timestamp", writeStructs(t, []struct {
			Key   []byte         `parquet:"key"`
			Cells []cellStringTS `parquet:"cells,list"`
		}{{Key: []byte("k")}})},
		{"millisecond timestamp", "cells.list.element.timestamp", writeStructs(t, []struct {
			Key   []byte       `parquet:"key"`
			Cells []cellMillis `parquet:"cells,list"`
		}{{Key: []byte("k")}})},
		{"extra cell field", "cells.list.element.labels", writeStructs(t, []struct {
			Key   []byte      `parquet:"key"`
			Cells []cellExtra `parquet:"cells,list"`
		}{{Key: []byte("k")}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.data), int64(len(tc.data)), ReaderOptions{Name: "x.parquet"})
			var se *SchemaError
			if !errors.Is(err, ErrSchema) || !errors.As(err, &se) {
				t.Fatalf("err = %v, want a SchemaError", err)
			}
			if se.Field != tc.field || !strings.HasPrefix(err.Error(), "x.parquet: ") {
				t.Errorf("err = %v (field %q), want field %q, prefixed by the file name", err, se.Field, tc.field)
			}
		})
	}
	// The columns layout refuses the template and vice versa.
	tmpl := writeAll(t, testRows(2), WriterOptions{})
	if _, err := NewReader(bytes.NewReader(tmpl), int64(len(tmpl)), ReaderOptions{Format: ParquetColumns}); !errors.Is(err, ErrSchema) {
		t.Errorf("columns reader on a template file: %v", err)
	}
}

// TestInvalidRowsInFile: rows that break the data model, in files other
// tools wrote, are RowErrors at their row; the rows before them read.
func TestInvalidRowsInFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bad   specRow
		field string
	}{
		{"empty key", specRow{Key: []byte{}}, "key"},
		{"bad family", specRow{Key: []byte("k"), Cells: []specCell{{Family: "a b"}}}, "cells[0].family"},
		{"empty family", specRow{Key: []byte("k"), Cells: []specCell{{Family: "f"}, {Family: ""}}}, "cells[1].family"},
		{"negative timestamp", specRow{Key: []byte("k"), Cells: []specCell{{Family: "f", Timestamp: -1}}}, "cells[0].timestamp"},
		{"long key", specRow{Key: bytes.Repeat([]byte("k"), 64<<10+1)}, "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := writeStructs(t, []specRow{{Key: []byte("ok")}, tc.bad, {Key: []byte("after")}})
			r, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{Name: "f"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			_, err = r.Next()
			var re *RowError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRow) || re.Row != 1 || re.Field != tc.field || re.File != "f" {
				t.Fatalf("err = %v (%+v), want a RowError at row 1 field %s", err, re, tc.field)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Errorf("after an error Next returned %v, want the same error", err2)
			}
		})
	}
}

// TestCorruptFiles: truncated and damaged files are errors, never panics,
// and never rows that break the data model.
func TestCorruptFiles(t *testing.T) {
	data := writeAll(t, smallRows(40), WriterOptions{Codec: Uncompressed, RowGroupBytes: 8 << 10})
	for _, n := range []int{0, 3, 4, 8, 100, len(data) / 2, len(data) - 9, len(data) - 1} {
		_, err := NewReader(bytes.NewReader(data[:n]), int64(n), ReaderOptions{})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("file truncated to %d of %d bytes: err = %v, want ErrCorrupt", n, len(data), err)
		}
	}
	// Damage bytes all over the file (the footer is read whole by
	// NewReader; pages are decoded by Next).
	for off := 0; off < len(data); off += 97 {
		bad := bytes.Clone(data)
		bad[off] ^= 0x5a
		readDamaged(t, bad)
	}
	for _, codec := range []Codec{Snappy, Zstd, Gzip} {
		data := writeAll(t, smallRows(20), WriterOptions{Codec: codec})
		for off := 0; off < len(data)-8; off += 211 {
			bad := bytes.Clone(data)
			bad[off] ^= 0xff
			readDamaged(t, bad)
		}
	}
}

// readDamaged reads a damaged file to the end or the first error; it must
// not panic, and every row it returns is valid.
func readDamaged(t *testing.T, data []byte) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{})
	if err != nil {
		return
	}
	defer r.Close()
	for n := int64(0); ; n++ {
		row, err := r.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("damaged file: row %d: error %v is neither ErrCorrupt nor ErrInvalidRow", n, err)
			}
			return
		}
		if err := ValidateRow(row, cell.DefaultLimits(), n); err != nil {
			t.Fatalf("damaged file returned an invalid row: %v", err)
		}
	}
}

// FuzzReader feeds arbitrary bytes to the Parquet reader: errors, never
// panics, never invalid rows.
func FuzzReader(f *testing.F) {
	f.Add(writeAll(f, smallRows(3), WriterOptions{}))
	f.Add(writeAll(f, smallRows(2), WriterOptions{Codec: Uncompressed}))
	f.Fuzz(func(t *testing.T, data []byte) {
		readDamaged(t, data)
	})
}

// smallRows is testRows without its large value.
func smallRows(n int) []cell.Row {
	rows := testRows(n)
	for i := range rows {
		rows[i].Cells = slices.DeleteFunc(rows[i].Cells, func(c cell.Cell) bool { return len(c.Value) > 1<<10 })
	}
	return rows
}
