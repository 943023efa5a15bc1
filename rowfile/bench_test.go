package rowfile

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tabuladb/tabula/storage/cell"
)

// benchRows is a Webtable-like table: 10,000 rows, four columns of one to
// three versions, values of 50 to 500 bytes of text.
func benchRows() ([]cell.Row, int64) {
	rng := rand.New(rand.NewPCG(7, 7))
	words := []string{"the ", "table ", "row ", "<html>", "cell ", "tablet ", "server ", "log "}
	rows := make([]cell.Row, 10_000)
	var size int64
	for i := range rows {
		r := cell.Row{Key: fmt.Appendf(nil, "com.example.%05d/page/%d", i/7, i)}
		for _, col := range []struct{ fam, qual string }{{"anchor", "cnnsi.com"}, {"anchor", "my.look.ca"}, {"contents", ""}, {"language", ""}} {
			for v := range 1 + rng.IntN(3) {
				var val []byte
				for len(val) < 50+rng.IntN(450) {
					val = append(val, words[rng.IntN(len(words))]...)
				}
				r.Cells = append(r.Cells, cell.Cell{Family: col.fam, Qualifier: []byte(col.qual), Timestamp: 1_700_000_000_000_000 - int64(v), Value: val})
			}
		}
		rows[i] = r
		size += rowBytes(r)
	}
	return rows, size
}

// toSpecRows converts rows to the Go structs parquet-go's generic writer
// maps itself (the three-level list of the spec).
func toSpecRows(rows []cell.Row) []specRow {
	out := make([]specRow, len(rows))
	for i, r := range rows {
		out[i].Key = r.Key
		out[i].Cells = make([]specCell, len(r.Cells))
		for j, c := range r.Cells {
			out[i].Cells[j] = specCell{Family: c.Family, Qualifier: c.Qualifier, Timestamp: c.Timestamp, Value: c.Value}
		}
	}
	return out
}

// BenchmarkWrite writes the same rows through rowfile's writer (template
// layout, snappy, V1 pages) and, as the reference, through parquet-go's
// plain GenericWriter from Go structs already in memory (snappy). Compare
// the MB/s of the two (payload bytes: keys, families, qualifiers, values,
// timestamps).
func BenchmarkWrite(b *testing.B) {
	rows, size := benchRows()
	b.Run("rowfile-template", func(b *testing.B) {
		b.SetBytes(size)
		var n int64
		for b.Loop() {
			cw := &countingWriter{w: io.Discard}
			w, err := NewWriter(cw, WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rows {
				if err := w.Write(r); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			n = w.Stats().Bytes
		}
		b.ReportMetric(float64(n), "file-bytes")
	})
	b.Run("rowfile-jsonl", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			w, _ := NewWriter(io.Discard, WriterOptions{Format: JSONL})
			for _, r := range rows {
				if err := w.Write(r); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference-parquet-go-generic", func(b *testing.B) {
		spec := toSpecRows(rows)
		b.SetBytes(size)
		var n int64
		for b.Loop() {
			cw := &countingWriter{w: io.Discard}
			w := parquet.NewGenericWriter[specRow](cw, parquet.Compression(&parquet.Snappy))
			if _, err := w.Write(spec); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			n = cw.n
		}
		b.ReportMetric(float64(n), "file-bytes")
	})
}

// BenchmarkRead reads the rows back: rowfile's reader (which validates
// every row) against parquet-go's GenericReader into Go structs.
func BenchmarkRead(b *testing.B) {
	rows, size := benchRows()
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WriterOptions{})
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.Run("rowfile-template", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				_, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != len(rows) {
				b.Fatalf("read %d rows", n)
			}
		}
	})
	var jbuf bytes.Buffer
	jw, _ := NewWriter(&jbuf, WriterOptions{Format: JSONL})
	for _, r := range rows {
		if err := jw.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := jw.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("rowfile-jsonl", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r := NewJSONLReader(bytes.NewReader(jbuf.Bytes()), ReaderOptions{})
			n := 0
			for {
				_, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != len(rows) {
				b.Fatalf("read %d rows", n)
			}
		}
	})
	b.Run("reference-parquet-go-generic", func(b *testing.B) {
		var sb bytes.Buffer
		gw := parquet.NewGenericWriter[specRow](&sb, parquet.Compression(&parquet.Snappy))
		if _, err := gw.Write(toSpecRows(rows)); err != nil {
			b.Fatal(err)
		}
		if err := gw.Close(); err != nil {
			b.Fatal(err)
		}
		sdata := sb.Bytes()
		b.SetBytes(size)
		out := make([]specRow, 256)
		for b.Loop() {
			r := parquet.NewGenericReader[specRow](bytes.NewReader(sdata))
			n := 0
			for {
				k, err := r.Read(out)
				n += k
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			r.Close()
			if n != len(rows) {
				b.Fatalf("read %d rows", n)
			}
		}
	})
}

// BenchmarkWriteRatio alternates the two writers of BenchmarkWrite within
// each iteration, so both run under the same machine load, and reports
// each one's time and rowfile's time over the reference's.
func BenchmarkWriteRatio(b *testing.B) {
	rows, _ := benchRows()
	spec := toSpecRows(rows)
	var own, ref time.Duration
	for b.Loop() {
		start := time.Now()
		w, _ := NewWriter(io.Discard, WriterOptions{})
		for _, r := range rows {
			if err := w.Write(r); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		own += time.Since(start)
		start = time.Now()
		gw := parquet.NewGenericWriter[specRow](io.Discard, parquet.Compression(&parquet.Snappy))
		if _, err := gw.Write(spec); err != nil {
			b.Fatal(err)
		}
		if err := gw.Close(); err != nil {
			b.Fatal(err)
		}
		ref += time.Since(start)
	}
	b.ReportMetric(float64(own.Milliseconds())/float64(b.N), "rowfile-ms/op")
	b.ReportMetric(float64(ref.Milliseconds())/float64(b.N), "reference-ms/op")
	b.ReportMetric(float64(own)/float64(ref), "time-ratio")
}

// BenchmarkReadRatio does the same for the readers of BenchmarkRead.
func BenchmarkReadRatio(b *testing.B) {
	rows, _ := benchRows()
	var buf, sb bytes.Buffer
	w, _ := NewWriter(&buf, WriterOptions{})
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	gw := parquet.NewGenericWriter[specRow](&sb, parquet.Compression(&parquet.Snappy))
	if _, err := gw.Write(toSpecRows(rows)); err != nil {
		b.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		b.Fatal(err)
	}
	data, sdata := buf.Bytes(), sb.Bytes()
	out := make([]specRow, 256)
	var own, ref time.Duration
	for b.Loop() {
		start := time.Now()
		r, err := NewReader(bytes.NewReader(data), int64(len(data)), ReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := r.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		own += time.Since(start)
		start = time.Now()
		gr := parquet.NewGenericReader[specRow](bytes.NewReader(sdata))
		for {
			if _, err := gr.Read(out); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		gr.Close()
		ref += time.Since(start)
	}
	b.ReportMetric(float64(own.Milliseconds())/float64(b.N), "rowfile-ms/op")
	b.ReportMetric(float64(ref.Milliseconds())/float64(b.N), "reference-ms/op")
	b.ReportMetric(float64(own)/float64(ref), "time-ratio")
}
