package jobs

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
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

// benchTable loads the benchmark table (benchRows rows, ~90 MB, in six
// tablets) on the benchmarks' server and returns its rows as a scan
// returns them, for the in-memory reference, and the server.
func benchTable(b *testing.B) ([]cell.Row, *devtest.Server) {
	srv := benchDev.Get(b)
	const tablets = 6
	benchOnce.Do(func() {
		var splits []string
		for i := 1; i < tablets; i++ {
			splits = append(splits, fmt.Sprintf("b%07d", i*benchRows/tablets))
		}
		srv.CreateTable(b, "bench", []string{"f"}, splits...)
		c, err := client.Dial(srv.Addr, client.Options{})
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
	c, err := client.Dial(srv.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if tabs, err := c.Tablets(context.Background(), "bench"); err != nil || len(tabs) != tablets {
		b.Fatalf("the benchmark table has %d tablets (%v), want %d", len(tabs), err, tablets)
	}
	var rows []cell.Row
	sc := c.Scan(context.Background(), "bench", client.ScanOptions{})
	for sc.Next() {
		rows = append(rows, sc.Row())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return rows, srv
}

// cpuTime is the process's user and system CPU time so far (the
// benchmark's, the in-process server's and prism's together).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExport compares the export pipeline on prism (table → six
// snappy Parquet shards in the template layout) with parquet-go writing
// the same rows from memory to as many files, one after the other, with
// the export's own writer: rowfile's template writer built with the
// options the export's shards get (shardWriterOptions: the same schema,
// codec, data page version and row group size). Each iteration runs the
// reference, a plain client scan of the same rows, and the export, back
// to back, so that all three share the machine's load (it is shared and
// noisy); each iteration's ratio is logged, the reported ratio is of the
// summed times, and x-min/x-max are the iterations' extremes. MB/s are
// of the Parquet written. The *-cpu-s/op figures are the whole
// process's CPU (the in-process server included) during each part: on
// a machine with two free cores, the export can approach
// 2 × ref-cpu / export-cpu of the reference's rate.
//
// The scan is not a reference of the target: it shows what reading the
// rows alone costs, which the export pays and the in-memory writer does
// not.
func BenchmarkExport(b *testing.B) {
	rows, srv := benchTable(b)
	const shards = 6
	c, err := client.Dial(srv.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	table := pipe.Conn{Addr: srv.Addr, Project: devtest.Project, Instance: devtest.Instance}.Table("bench")
	opts := shardWriterOptions(rowfile.Parquet, rowfile.Snappy, nil)
	var refBytes, expBytes int64
	var refTime, scanTime, expTime, refCPU, scanCPU, expCPU time.Duration
	xMin, xMax := math.Inf(1), 0.0
	for i := range b.N {
		// The reference: the export's Parquet writer from memory.
		dir := b.TempDir()
		start, cpu := time.Now(), cpuTime(b)
		var iterRef int64
		per := (len(rows) + shards - 1) / shards
		for sh := range shards {
			f, err := os.Create(filepath.Join(dir, rowfile.ShardName("bench", sh, shards, "parquet")))
			if err != nil {
				b.Fatal(err)
			}
			w, err := rowfile.NewWriter(f, opts)
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
			iterRef += w.Stats().Bytes
			f.Close()
		}
		iterRefTime := time.Since(start)
		refTime += iterRefTime
		refCPU += cpuTime(b) - cpu
		refBytes += iterRef

		// Reading the rows alone.
		start, cpu = time.Now(), cpuTime(b)
		n := 0
		sc := c.Scan(context.Background(), "bench", client.ScanOptions{})
		for sc.Next() {
			n++
		}
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
		iterScanTime := time.Since(start)
		scanTime += iterScanTime
		scanCPU += cpuTime(b) - cpu
		if n != len(rows) {
			b.Fatalf("scanned %d rows, want %d", n, len(rows))
		}

		// The export pipeline.
		dir = b.TempDir()
		start, cpu = time.Now(), cpuTime(b)
		sum, err := Export(context.Background(), ExportConfig{Read: beamio.ReadConfig{Table: table}, Out: dir, Shards: shards})
		if err != nil {
			b.Fatal(err)
		}
		iterExpTime := time.Since(start)
		expTime += iterExpTime
		expCPU += cpuTime(b) - cpu
		if sum.Rows != int64(len(rows)) {
			b.Fatalf("exported %d rows, want %d", sum.Rows, len(rows))
		}
		expBytes += sum.Bytes
		x := (float64(sum.Bytes) / iterExpTime.Seconds()) / (float64(iterRef) / iterRefTime.Seconds())
		xMin, xMax = min(xMin, x), max(xMax, x)
		b.Logf("iteration %d: reference %v, scan %v, export %v: %.2f× the reference's MB/s", i, iterRefTime.Round(time.Millisecond), iterScanTime.Round(time.Millisecond), iterExpTime.Round(time.Millisecond), x)
	}
	refRate := float64(refBytes) / refTime.Seconds()
	expRate := float64(expBytes) / expTime.Seconds()
	n := float64(b.N)
	b.ReportMetric(refRate/1e6, "ref-MB/s")
	b.ReportMetric(expRate/1e6, "export-MB/s")
	b.ReportMetric(float64(len(rows)*b.N)/expTime.Seconds(), "export-rows/s")
	b.ReportMetric(expRate/refRate, "x-parquet-go")
	b.ReportMetric(xMin, "x-min")
	b.ReportMetric(xMax, "x-max")
	b.ReportMetric(refTime.Seconds()/n, "ref-s/op")
	b.ReportMetric(scanTime.Seconds()/n, "scan-s/op")
	b.ReportMetric(expTime.Seconds()/n, "export-s/op")
	b.ReportMetric(refCPU.Seconds()/n, "ref-cpu-s/op")
	b.ReportMetric(scanCPU.Seconds()/n, "scan-cpu-s/op")
	b.ReportMetric(expCPU.Seconds()/n, "export-cpu-s/op")
}

// BenchmarkExportAlone runs only the export of BenchmarkExport's table,
// iteration after iteration: its CPU per export (cpu-s/op, the whole
// process's, the in-process server's included) and, with -benchmem, its
// allocations, without the reference's and the scan's garbage collected
// in its time. For profiles of the export (-cpuprofile, -memprofile)
// and for judging a change by its CPU on a shared machine, where the
// ratio of BenchmarkExport moves with the load.
func BenchmarkExportAlone(b *testing.B) {
	rows, srv := benchTable(b)
	table := pipe.Conn{Addr: srv.Addr, Project: devtest.Project, Instance: devtest.Instance}.Table("bench")
	b.ResetTimer()
	var cpu time.Duration
	for range b.N {
		dir := b.TempDir()
		start := cpuTime(b)
		sum, err := Export(context.Background(), ExportConfig{Read: beamio.ReadConfig{Table: table}, Out: dir, Shards: 6})
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime(b) - start
		if sum.Rows != int64(len(rows)) {
			b.Fatalf("exported %d rows, want %d", sum.Rows, len(rows))
		}
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}
