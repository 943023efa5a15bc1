package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

const benchRows = 60_000

var benchOnce sync.Once

func benchRow(i int) cell.RowMutation {
	v := make([]byte, 1000)
	for j := range v {
		v[j] = byte(i * j)
	}
	return cell.RowMutation{Row: []byte(fmt.Sprintf("b%07d", i)), Mutations: []cell.Mutation{
		cell.Set("f", []byte("v"), 1_000_000, v), cell.Set("f", []byte("v"), 2_000_000, v[:500]), cell.Set("f", []byte("n"), 1_000_000, []byte(fmt.Sprint(i)))}}
}

// benchTable loads the benchmark table and returns its rows as a read
// returns them, for the in-memory reference.
func benchTable(b *testing.B) []cell.Row {
	benchOnce.Do(func() {
		var splits []string
		for i := 1; i < 6; i++ {
			splits = append(splits, fmt.Sprintf("b%07d", i*benchRows/6))
		}
		dev.CreateTable(b, "bench", []string{"f"}, splits...)
		c, err := client.Dial(dev.Addr, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for start := 0; start < benchRows; start += 2000 {
			var rms []cell.RowMutation
			for i := start; i < start+2000; i++ {
				rms = append(rms, benchRow(i))
			}
			if _, err := c.ApplyBulk(context.Background(), "bench", rms, client.BulkOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	c, err := client.Dial(dev.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var rows []cell.Row
	sc := c.Scan(context.Background(), "bench", client.ScanOptions{})
	for sc.Next() {
		rows = append(rows, sc.Row())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return rows
}

// BenchmarkExport compares the export pipeline on prism (table →
// Parquet shards) with parquet-go (through rowfile's writer, the same
// mapping) writing the same rows from memory to as many files, one
// after the other. Each iteration runs both, and a plain scan of the
// same rows, back to back, so that all three share the machine's load
// (it is shared and noisy); the ratio is of their summed times. MB/s
// are of the Parquet written.
//
// The scan is not a reference of the target: it shows what reading the
// rows alone costs, which the export pays and the in-memory writer does
// not.
func BenchmarkExport(b *testing.B) {
	rows := benchTable(b)
	const shards = 6
	c, err := client.Dial(dev.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var refBytes, expBytes int64
	var refTime, scanTime, expTime time.Duration
	for range b.N {
		// The reference: rowfile's Parquet writer from memory.
		dir := b.TempDir()
		start := time.Now()
		per := (len(rows) + shards - 1) / shards
		for sh := range shards {
			f, err := os.Create(filepath.Join(dir, rowfile.ShardName("bench", sh, shards, "parquet")))
			if err != nil {
				b.Fatal(err)
			}
			w, err := rowfile.NewWriter(f, rowfile.WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range rows[sh*per : min((sh+1)*per, len(rows))] {
				if err := w.Write(r); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			refBytes += w.Stats().Bytes
			f.Close()
		}
		refTime += time.Since(start)

		// Reading the rows alone.
		start = time.Now()
		n := 0
		sc := c.Scan(context.Background(), "bench", client.ScanOptions{})
		for sc.Next() {
			n++
		}
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
		scanTime += time.Since(start)
		if n != len(rows) {
			b.Fatalf("scanned %d rows, want %d", n, len(rows))
		}

		// The export pipeline.
		dir = b.TempDir()
		start = time.Now()
		sum, err := Export(context.Background(), ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("bench")}, Out: dir, Shards: shards})
		if err != nil {
			b.Fatal(err)
		}
		expTime += time.Since(start)
		if sum.Rows != int64(len(rows)) {
			b.Fatalf("exported %d rows, want %d", sum.Rows, len(rows))
		}
		expBytes += sum.Bytes
	}
	refRate := float64(refBytes) / refTime.Seconds()
	expRate := float64(expBytes) / expTime.Seconds()
	b.ReportMetric(refRate/1e6, "ref-MB/s")
	b.ReportMetric(expRate/1e6, "export-MB/s")
	b.ReportMetric(float64(len(rows)*b.N)/expTime.Seconds(), "export-rows/s")
	b.ReportMetric(expRate/refRate, "x-parquet-go")
	b.ReportMetric(refTime.Seconds()/float64(b.N), "ref-s/op")
	b.ReportMetric(scanTime.Seconds()/float64(b.N), "scan-s/op")
	b.ReportMetric(expTime.Seconds()/float64(b.N), "export-s/op")
}
