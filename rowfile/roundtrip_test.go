package rowfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// testRows returns n rows with several versions per column, binary keys
// and qualifiers, an empty row every seventh and a large value in row 3.
func testRows(n int) []cell.Row {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([]cell.Row, n)
	for i := range rows {
		key := fmt.Appendf(nil, "row\x00%05d\xff", i)
		var cells []cell.Cell
		if i%7 != 6 {
			for _, fam := range []string{"a", "contents"} {
				for q := range 2 {
					qual := []byte{byte(q), 0xfe, 'q'}
					for v := range 1 + i%3 {
						val := make([]byte, rng.IntN(40))
						for j := range val {
							val[j] = byte(rng.Uint32())
						}
						cells = append(cells, cell.Cell{Family: fam, Qualifier: qual, Timestamp: int64(1_700_000_000_000_000 - v*1000 - i), Value: val})
					}
				}
			}
		}
		if i == 3 {
			cells = append(cells, cell.Cell{Family: "z", Qualifier: nil, Timestamp: 0, Value: bytes.Repeat([]byte("large"), 1<<19)})
		}
		rows[i] = cell.Row{Key: key, Cells: cells}
	}
	return rows
}

func writeAll(t testing.TB, rows []cell.Row, opts WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, opts)
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
	st := w.Stats()
	if st.Rows != int64(len(rows)) || st.Bytes != int64(buf.Len()) {
		t.Fatalf("stats %+v; wrote %d rows, %d bytes", st, len(rows), buf.Len())
	}
	return buf.Bytes()
}

func readAll(t testing.TB, data []byte, opts ReaderOptions) []cell.Row {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var rows []cell.Row
	for {
		row, err := r.Next()
		if err == io.EOF {
			return rows
		}
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
}

func normalize(rows []cell.Row) []cell.Row {
	out := make([]cell.Row, len(rows))
	for i, r := range rows {
		out[i].Key = r.Key
		for _, c := range r.Cells {
			if c.Qualifier == nil {
				c.Qualifier = []byte{}
			}
			if c.Value == nil {
				c.Value = []byte{}
			}
			out[i].Cells = append(out[i].Cells, c)
		}
	}
	return out
}

func TestRoundTripEveryVersion(t *testing.T) {
	rows := testRows(200)
	for _, f := range []Format{Parquet, JSONL} {
		for _, codec := range []Codec{Snappy, Uncompressed, Zstd, Gzip} {
			if f == JSONL && codec != Snappy {
				continue
			}
			t.Run(f.String()+"/"+codec.String(), func(t *testing.T) {
				data := writeAll(t, rows, WriterOptions{Format: f, Codec: codec, RowGroupBytes: 64 << 10})
				got := readAll(t, data, ReaderOptions{Format: f})
				if !reflect.DeepEqual(normalize(got), normalize(rows)) {
					t.Fatalf("read back %d rows, differ from the %d written", len(got), len(rows))
				}
			})
		}
	}
}

func TestWrongSchema(t *testing.T) {
	data := writeAll(t, testRows(3), WriterOptions{Format: ParquetColumns, Columns: []Column{{Family: "a", Qualifier: []byte("x")}}})
	_, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{Format: Parquet, Name: "f.parquet"})
	if !errors.Is(err, ErrSchema) {
		t.Fatalf("err = %v, want ErrSchema", err)
	}
	t.Log(err)
}

func rowsEqual(a, b cell.Row) bool {
	if !bytes.Equal(a.Key, b.Key) || len(a.Cells) != len(b.Cells) {
		return false
	}
	for i := range a.Cells {
		x, y := a.Cells[i], b.Cells[i]
		if x.Family != y.Family || !bytes.Equal(x.Qualifier, y.Qualifier) || x.Timestamp != y.Timestamp || !bytes.Equal(x.Value, y.Value) {
			return false
		}
	}
	return true
}

func describeRow(r cell.Row) string {
	s := fmt.Sprintf("key %q, %d cells", r.Key, len(r.Cells))
	for i, c := range r.Cells {
		if i == 3 {
			s += " ..."
			break
		}
		s += fmt.Sprintf(" [%s:%q@%d %d bytes]", c.Family, c.Qualifier, c.Timestamp, len(c.Value))
	}
	return s
}
