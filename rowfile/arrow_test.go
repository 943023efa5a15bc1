package rowfile

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/tabuladb/tabula/storage/cell"
)

// The template's schema as parquet-avro writes it (and Arrow prints it).
const wantTemplateSchema = `required group field_id=-1 com.google.cloud.teleport.bigtable.BigtableRow {
  required byte_array field_id=-1 key;
  required group field_id=-1 cells (List) {
    repeated group field_id=-1 array {
      required byte_array field_id=-1 family (String);
      required byte_array field_id=-1 qualifier;
      required int64 field_id=-1 timestamp;
      required byte_array field_id=-1 value;
    }
  }
}
`

// TestArrowReadsTemplate reads files the template writer made with Arrow's
// pqarrow, a Parquet implementation Tabula did not write, and checks the
// schema it sees and every value of every row.
func TestArrowReadsTemplate(t *testing.T) {
	rows := testRows(300)
	for _, codec := range []Codec{Snappy, Zstd, Gzip, Uncompressed} {
		t.Run(codec.String(), func(t *testing.T) {
			data := writeAll(t, rows, WriterOptions{Format: Parquet, Codec: codec, RowGroupBytes: 32 << 10})
			pf, err := file.NewParquetReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			schema.PrintSchema(pf.MetaData().Schema.Root(), &sb, 2)
			if sb.String() != wantTemplateSchema {
				t.Errorf("Arrow sees the schema\n%s\nwant\n%s", sb.String(), wantTemplateSchema)
			}
			if pf.NumRowGroups() < 2 {
				t.Errorf("%d row groups, want several (RowGroupBytes 32 KiB)", pf.NumRowGroups())
			}
			// Every data page is a V1 page, for the widest readers.
			for g := range pf.NumRowGroups() {
				for c := range templateColumns {
					pr, err := pf.RowGroup(g).GetColumnPageReader(c)
					if err != nil {
						t.Fatal(err)
					}
					pages := 0
					for pr.Next() {
						switch typ := fmt.Sprint(pr.Page().Type()); typ {
						case "DATA_PAGE":
							pages++
						case "DICTIONARY_PAGE":
						default:
							t.Fatalf("row group %d column %d: a %s page, want DATA_PAGE (V1)", g, c, typ)
						}
					}
					if err := pr.Err(); err != nil || pages == 0 {
						t.Fatalf("row group %d column %d: %d data pages, %v", g, c, pages, err)
					}
				}
			}
			if v := pf.MetaData().KeyValueMetadata().FindValue("parquet.avro.schema"); v == nil || *v != TemplateAvroSchema {
				t.Errorf("parquet.avro.schema metadata = %v", v)
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 10}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer tbl.Release()
			got := arrowTemplateRows(t, tbl)
			if len(got) != len(rows) {
				t.Fatalf("Arrow read %d rows, wrote %d", len(got), len(rows))
			}
			wantCells, gotCells := 0, 0
			for i := range rows {
				wantCells += len(rows[i].Cells)
				gotCells += len(got[i].Cells)
				if !rowsEqual(got[i], rows[i]) {
					t.Fatalf("row %d: Arrow read %s, wrote %s", i, describeRow(got[i]), describeRow(rows[i]))
				}
			}
			if gotCells != wantCells {
				t.Fatalf("Arrow read %d cells, wrote %d", gotCells, wantCells)
			}
		})
	}
}

// arrowTemplateRows converts an Arrow table of the template layout back
// to rows, field by field by name.
func arrowTemplateRows(t *testing.T, tbl arrow.Table) []cell.Row {
	t.Helper()
	sc := tbl.Schema()
	ki, ci := sc.FieldIndices("key"), sc.FieldIndices("cells")
	if len(ki) != 1 || len(ci) != 1 {
		t.Fatalf("Arrow schema %s: want fields key and cells", sc)
	}
	if typ := sc.Field(ki[0]).Type; typ.ID() != arrow.BINARY {
		t.Fatalf("key is %s in Arrow, want binary", typ)
	}
	lt, ok := sc.Field(ci[0]).Type.(*arrow.ListType)
	if !ok {
		t.Fatalf("cells is %s in Arrow, want a list", sc.Field(ci[0]).Type)
	}
	st, ok := lt.Elem().(*arrow.StructType)
	if !ok || st.NumFields() != 4 {
		t.Fatalf("cells' element is %s in Arrow, want a struct of four fields", lt.Elem())
	}
	want := map[string]arrow.Type{"family": arrow.STRING, "qualifier": arrow.BINARY, "timestamp": arrow.INT64, "value": arrow.BINARY}
	idx := map[string]int{}
	for name, id := range want {
		i, ok := st.FieldIdx(name)
		if !ok || st.Field(i).Type.ID() != id {
			t.Fatalf("cells' element %s: field %s missing or not %s", st, name, id)
		}
		idx[name] = i
	}
	var rows []cell.Row
	keys, cells := tbl.Column(ki[0]).Data(), tbl.Column(ci[0]).Data()
	if len(keys.Chunks()) != len(cells.Chunks()) {
		t.Fatalf("key and cells chunked differently")
	}
	for c := range keys.Chunks() {
		kc := keys.Chunk(c).(*array.Binary)
		lc := cells.Chunk(c).(*array.List)
		sv := lc.ListValues().(*array.Struct)
		fam := sv.Field(idx["family"]).(*array.String)
		qual := sv.Field(idx["qualifier"]).(*array.Binary)
		ts := sv.Field(idx["timestamp"]).(*array.Int64)
		val := sv.Field(idx["value"]).(*array.Binary)
		for i := 0; i < kc.Len(); i++ {
			row := cell.Row{Key: bytes.Clone(kc.Value(i))}
			start, end := lc.ValueOffsets(i)
			for j := start; j < end; j++ {
				row.Cells = append(row.Cells, cell.Cell{
					Family:    fam.Value(int(j)),
					Qualifier: bytes.Clone(qual.Value(int(j))),
					Timestamp: ts.Value(int(j)),
					Value:     bytes.Clone(val.Value(int(j))),
				})
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// TestArrowReadsColumns reads a columns-layout file with Arrow: one
// nullable binary column per chosen column, holding the newest value.
func TestArrowReadsColumns(t *testing.T) {
	rows := testRows(100)
	cols := []Column{{Family: "contents", Qualifier: []byte("\x01\xfeq")}, {Family: "a", Qualifier: []byte("\x00\xfeq")}, {Family: "nope", Qualifier: []byte("x")}}
	// Qualifiers must be UTF-8 to name a column; these are not.
	if _, err := ColumnsSchema(cols); err == nil {
		t.Fatal("ColumnsSchema accepted a non-UTF-8 qualifier")
	}
	utf := make([]cell.Row, len(rows))
	for i, r := range rows {
		utf[i].Key = r.Key
		for _, c := range r.Cells {
			c.Qualifier = []byte(strings.ToValidUTF8(string(c.Qualifier), "?"))
			utf[i].Cells = append(utf[i].Cells, c)
		}
	}
	cols = []Column{{Family: "contents", Qualifier: []byte("\x01?q")}, {Family: "a", Qualifier: []byte("\x00?q")}, {Family: "nope", Qualifier: []byte("x")}}
	data := writeAll(t, utf, WriterOptions{Format: ParquetColumns, Columns: cols})
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(data), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != int64(len(rows)) || tbl.NumCols() != 4 {
		t.Fatalf("Arrow read %d rows × %d columns, want %d × 4", tbl.NumRows(), tbl.NumCols(), len(rows))
	}
	for ci, c := range cols {
		f := tbl.Schema().Field(ci + 1)
		if f.Name != c.Name() || !f.Nullable || f.Type.ID() != arrow.BINARY {
			t.Fatalf("column %d is %s, want nullable binary %q", ci+1, f, c.Name())
		}
		chunks := tbl.Column(ci + 1).Data().Chunks()
		r := 0
		for _, ch := range chunks {
			b := ch.(*array.Binary)
			for i := 0; i < b.Len(); i, r = i+1, r+1 {
				want, ok := newestValue(utf[r], c)
				if b.IsNull(i) == ok {
					t.Fatalf("row %d column %s: null=%v, want a value=%v", r, c.Name(), b.IsNull(i), ok)
				}
				if ok && !bytes.Equal(b.Value(i), want) {
					t.Fatalf("row %d column %s: %q, want %q", r, c.Name(), b.Value(i), want)
				}
			}
		}
	}
}

// newestValue returns the value of the newest version of column c in row.
func newestValue(row cell.Row, c Column) ([]byte, bool) {
	var best *cell.Cell
	for i := range row.Cells {
		x := &row.Cells[i]
		if x.Family == c.Family && bytes.Equal(x.Qualifier, c.Qualifier) && (best == nil || x.Timestamp > best.Timestamp) {
			best = x
		}
	}
	if best == nil {
		return nil, false
	}
	return best.Value, true
}

// TestReadArrowWritten reads a file Arrow's pqarrow wrote — the layout
// pyarrow and other Arrow-based tools give the template's record: a
// three-level list, nullable fields, timestamp[us] — back to the rows.
func TestReadArrowWritten(t *testing.T) {
	rows := smallRows(120)
	cellType := arrow.StructOf(
		arrow.Field{Name: "family", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "qualifier", Type: arrow.BinaryTypes.Binary, Nullable: true},
		arrow.Field{Name: "timestamp", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		arrow.Field{Name: "value", Type: arrow.BinaryTypes.Binary, Nullable: true},
	)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "key", Type: arrow.BinaryTypes.Binary},
		{Name: "cells", Type: arrow.ListOf(cellType), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	kb := b.Field(0).(*array.BinaryBuilder)
	lb := b.Field(1).(*array.ListBuilder)
	sb := lb.ValueBuilder().(*array.StructBuilder)
	for _, r := range rows {
		kb.Append(r.Key)
		lb.Append(true)
		for _, c := range r.Cells {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(c.Family)
			sb.FieldBuilder(1).(*array.BinaryBuilder).Append(c.Qualifier)
			sb.FieldBuilder(2).(*array.TimestampBuilder).Append(arrow.Timestamp(c.Timestamp))
			sb.FieldBuilder(3).(*array.BinaryBuilder).Append(c.Value)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, buf.Bytes(), ReaderOptions{Name: "arrow.parquet"})
	if len(got) != len(rows) {
		t.Fatalf("read %d rows of Arrow's file, wrote %d", len(got), len(rows))
	}
	for i := range rows {
		if !rowsEqual(normalize(got)[i], normalize(rows)[i]) {
			t.Fatalf("row %d: read %s, Arrow wrote %s", i, describeRow(got[i]), describeRow(rows[i]))
		}
	}
}
