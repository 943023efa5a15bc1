package beamio

import (
	"context"
	"fmt"
	"math"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// The read benchmark's table: benchRows rows of ~1 KiB in eight tablets.
const (
	benchRows      = 120_000
	benchValueSize = 1000
)

var benchOnce sync.Once

func benchRow(i int) cell.RowMutation {
	v := make([]byte, benchValueSize)
	for j := range v {
		v[j] = byte(i + j)
	}
	return cell.RowMutation{Row: []byte(fmt.Sprintf("b%07d", i)), Mutations: []cell.Mutation{
		cell.Set("f", []byte("v"), 1_000_000, v), cell.Set("f", []byte("n"), 1_000_000, []byte(fmt.Sprint(i)))}}
}

// benchTable loads the benchmark table on the benchmarks' server and
// returns its name and the server.
func benchTable(b *testing.B) (string, *devtest.Server) {
	const table, tablets = "bench", 8
	srv := benchDev.Get(b)
	benchOnce.Do(func() {
		var splits []string
		for i := 1; i < tablets; i++ {
			splits = append(splits, fmt.Sprintf("b%07d", i*benchRows/tablets))
		}
		srv.CreateTable(b, table, []string{"f"}, splits...)
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
			if _, err := c.ApplyBulk(context.Background(), table, rms, client.BulkOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	c, err := client.Dial(srv.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if tabs, err := c.Tablets(context.Background(), table); err != nil || len(tabs) != tablets {
		b.Fatalf("the benchmark table has %d tablets (%v), want %d", len(tabs), err, tablets)
	}
	return table, srv
}

func rowBytes(r cell.Row) int64 {
	n := int64(len(r.Key))
	for _, c := range r.Cells {
		n += int64(len(c.Family) + len(c.Qualifier) + len(c.Value) + 8)
	}
	return n
}

var (
	benchRowsSeen  = beam.NewCounter("bench", "rows")
	benchBytesSeen = beam.NewCounter("bench", "bytes")
)

// tallyRowsFn counts rows and bytes per bundle (a counter's Inc per row
// would cost more than the rows).
type tallyRowsFn struct {
	rows, bytes int64
}

func (f *tallyRowsFn) StartBundle(_ func(int64)) {
	f.rows, f.bytes = 0, 0
	readStage.start()
}

func (f *tallyRowsFn) ProcessElement(r Row, _ func(int64)) {
	f.rows++
	f.bytes += rowBytes(cell.Row(r))
}

// FinishBundle also emits the bundle's row count: a stage with no
// output makes prism v2.77.0's bundle loop spin on its closed data
// channel while the bundle runs (stage.Execute selects on a closed
// dataReady), which would take a core from the read.
func (f *tallyRowsFn) FinishBundle(ctx context.Context, emit func(int64)) {
	benchRowsSeen.Inc(ctx, f.rows)
	benchBytesSeen.Inc(ctx, f.bytes)
	emit(f.rows)
	readStage.finish()
}

// readStage times the read's stage (the Read's restrictions read and
// tallied, fused in one stage): from the first of its bundles' starts to
// the last of their finishes. The worker runs in the benchmark's process
// (prism's loopback mode), so the tally's bundles note it here.
var readStage stageClock

type stageClock struct {
	mu          sync.Mutex
	first, last time.Time
}

func (c *stageClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.first, c.last = time.Time{}, time.Time{}
}

func (c *stageClock) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first = time.Now()
	}
}

func (c *stageClock) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = time.Now()
}

func (c *stageClock) elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first)
}

func init() {
	register.DoFn2x0[Row, func(int64)](&tallyRowsFn{})
	register.Emitter1[int64]()
}

// BenchmarkRead compares beamio.Read on prism (one worker process, the
// runner's own parallelism) with a plain client scan of the same rows:
// the whole table (~120 MB, eight tablets) and its first third (~40 MB,
// where the pipeline's fixed costs weigh more), read as users read by
// default (DefaultBundleBytes: one restriction per tablet of this table);
// and the whole table again in restrictions of 8 MiB (two per tablet),
// which shows what each restriction costs. Each iteration runs the
// scan and the read of each size back to back, so that they share the
// machine's load (it is shared and noisy); each iteration's ratios are
// logged, the reported rates and ratios are of the summed times, and
// x-min is the iterations' lowest. The *-cpu-s/op figures are the whole
// process's CPU (the in-process server included) during each part.
// *-x-scan (the whole pipeline, submission to completion, against the
// scan) is the measure of the target; *-stage-x-scan, the read's
// stage alone against the scan, is an additional figure that leaves out
// the pipeline's fixed cost.
func BenchmarkRead(b *testing.B) {
	table, srv := benchTable(b)
	c, err := client.Dial(srv.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	third := []byte(fmt.Sprintf("b%07d", benchRows/3))
	sizes := []struct {
		name   string
		end    []byte // nil: the whole table
		rows   int64
		bundle int64 // ReadConfig.BundleBytes (0: the default, one restriction per tablet here)
	}{{"40MB", third, benchRows / 3, 0}, {"120MB", nil, benchRows, 0}, {"120MB-8MiB", nil, benchRows, 8 << 20}}
	type tally struct {
		rows, bytes  int64
		elapsed, cpu time.Duration
		stage        time.Duration // the read's stage alone (readStage)
	}
	scans := make([]tally, len(sizes))
	reads := make([]tally, len(sizes))
	xMin := make([]float64, len(sizes))
	for i := range xMin {
		xMin[i] = math.Inf(1)
	}
	for it := range b.N {
		for i, sz := range sizes {
			start, cpu := time.Now(), cpuTime(b)
			var bytes int64
			sc := c.Scan(context.Background(), table, client.ScanOptions{End: sz.end})
			for sc.Next() {
				scans[i].rows++
				bytes += rowBytes(sc.Row())
			}
			if err := sc.Err(); err != nil {
				b.Fatal(err)
			}
			scanTime := time.Since(start)
			scans[i].elapsed += scanTime
			scans[i].cpu += cpuTime(b) - cpu
			scans[i].bytes += bytes

			cfg := ReadConfig{Table: Table{Addr: srv.Addr, Table: table}, BundleBytes: sz.bundle}
			if sz.end != nil {
				cfg.Ranges = []RowRange{{End: sz.end}}
			}
			readStage.reset()
			start, cpu = time.Now(), cpuTime(b)
			p, s := beam.NewPipelineWithRoot()
			// The tallies' counts end in a GroupByKey: it gives the
			// read's stage an output (prism v2.77.0 spins a core for
			// the whole bundle of a stage without one) and is a
			// runner-side stage, so that no worker stage follows the
			// read (a Sum's final combine is one, without outputs:
			// prism spun on it for 4–50 ms per pipeline in traces).
			beam.GroupByKey(s, beam.AddFixedKey(s, beam.ParDo(s, &tallyRowsFn{}, Read(s, cfg))))
			pr, err := ptest.RunWithMetrics(p)
			if err != nil {
				b.Fatal(err)
			}
			readTime := time.Since(start)
			reads[i].elapsed += readTime
			reads[i].cpu += cpuTime(b) - cpu
			reads[i].stage += readStage.elapsed()
			var readBytes int64
			for _, m := range pr.Metrics().AllMetrics().Counters() {
				switch {
				case m.Namespace() == "bench" && m.Name() == "rows":
					reads[i].rows += m.Result()
				case m.Namespace() == "bench" && m.Name() == "bytes":
					readBytes += m.Result()
				}
			}
			reads[i].bytes += readBytes
			x := (float64(readBytes) / readTime.Seconds()) / (float64(bytes) / scanTime.Seconds())
			xMin[i] = min(xMin[i], x)
			b.Logf("iteration %d, %s: scan %v, read %v (its stage %v): %.2f× the scan's MB/s", it, sz.name, scanTime.Round(time.Millisecond), readTime.Round(time.Millisecond), readStage.elapsed().Round(time.Millisecond), x)
		}
	}
	for i, sz := range sizes {
		if want := sz.rows * int64(b.N); scans[i].rows != want || reads[i].rows != want {
			b.Fatalf("%s: scanned %d rows and read %d, want %d", sz.name, scans[i].rows, reads[i].rows, want)
		}
		scanRate := float64(scans[i].bytes) / scans[i].elapsed.Seconds()
		readRate := float64(reads[i].bytes) / reads[i].elapsed.Seconds()
		b.ReportMetric(scanRate/1e6, sz.name+"-scan-MB/s")
		b.ReportMetric(float64(scans[i].rows)/scans[i].elapsed.Seconds(), sz.name+"-scan-rows/s")
		b.ReportMetric(readRate/1e6, sz.name+"-read-MB/s")
		b.ReportMetric(float64(reads[i].rows)/reads[i].elapsed.Seconds(), sz.name+"-read-rows/s")
		b.ReportMetric(readRate/scanRate, sz.name+"-x-scan")
		b.ReportMetric(xMin[i], sz.name+"-x-min")
		b.ReportMetric(scans[i].cpu.Seconds()/float64(b.N), sz.name+"-scan-cpu-s/op")
		b.ReportMetric(reads[i].cpu.Seconds()/float64(b.N), sz.name+"-read-cpu-s/op")
		// Additional, not the target's measure: the read's stage
		// alone, without the pipeline's fixed cost (job submission,
		// the splitting stage and its planning, what follows).
		stageRate := float64(reads[i].bytes) / reads[i].stage.Seconds()
		b.ReportMetric(stageRate/1e6, sz.name+"-stage-MB/s")
		b.ReportMetric(stageRate/scanRate, sz.name+"-stage-x-scan")
	}
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

// genMutationsFn makes the benchmark's rows inside the pipeline (a
// Create of 40 MB would travel in the pipeline's definition).
type genMutationsFn struct{ From, To int }

func (f *genMutationsFn) ProcessElement(_ []byte, emit func(RowMutation)) {
	for i := f.From; i < f.To; i++ {
		emit(RowMutation(benchRow(i)))
	}
}

func init() {
	register.DoFn2x0[[]byte, func(RowMutation)](&genMutationsFn{})
	register.Emitter1[RowMutation]()
}

// writeBenchRound numbers BenchmarkWrite's fresh tables (the testing
// package calls a benchmark more than once).
var writeBenchRound int

// BenchmarkWrite compares beamio.Write on prism with `tabula load`'s way
// of writing (client.ApplyBulk, batches of 100 rows, 8 concurrent
// writers) of the same rows into fresh tables. Each iteration runs both
// back to back, so that they share the machine's load (it is shared and
// noisy, and each round's writes leave the server flushing and
// compacting); rates and the ratio are of their summed times.
func BenchmarkWrite(b *testing.B) {
	const n = 20_000
	var size int64
	for i := range n {
		rm := benchRow(i)
		size += int64(rm.Size())
	}
	fresh := func(b *testing.B) string {
		writeBenchRound++
		name := fmt.Sprintf("wbench%d", writeBenchRound)
		dev.CreateTable(b, name, []string{"f"}, "b0005000", "b0010000", "b0015000")
		return name
	}
	c, err := client.Dial(dev.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var bulkTime, beamTime time.Duration
	for range b.N {
		table := fresh(b)
		start := time.Now()
		batches := make(chan int)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for from := range batches {
					var rms []cell.RowMutation
					for i := from; i < min(from+100, n); i++ {
						rms = append(rms, benchRow(i))
					}
					if _, err := c.ApplyBulk(context.Background(), table, rms, client.BulkOptions{}); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for from := 0; from < n; from += 100 {
			batches <- from
		}
		close(batches)
		wg.Wait()
		bulkTime += time.Since(start)

		table = fresh(b)
		p, s := beam.NewPipelineWithRoot()
		// Generated in the Write's own stage: mutations crossing a
		// stage boundary go through prism's element manager, which
		// costs more than the writes (measured: a 20,000-element
		// Reshuffle alone takes ~3 s here).
		muts := beam.ParDo(s, &genMutationsFn{From: 0, To: n}, beam.Impulse(s))
		results, _ := Write(s, WriteConfig{Table: Table{Addr: dev.Addr, Table: table}}, muts)
		// An output leaving the writers' stage: a stage without one
		// makes prism v2.77.0 spin a core while its bundle runs.
		stats.Count(s, results)
		start = time.Now()
		pr, err := ptest.RunWithMetrics(p)
		if err != nil {
			b.Fatal(err)
		}
		beamTime += time.Since(start)
		if w := counter(pr, "write_entries"); w != n {
			b.Fatalf("wrote %d entries, want %d", w, n)
		}
	}
	bulkRate := float64(size) * float64(b.N) / bulkTime.Seconds()
	beamRate := float64(size) * float64(b.N) / beamTime.Seconds()
	b.ReportMetric(float64(n*b.N)/bulkTime.Seconds(), "applybulk-rows/s")
	b.ReportMetric(bulkRate/1e6, "applybulk-MB/s")
	b.ReportMetric(float64(n*b.N)/beamTime.Seconds(), "write-rows/s")
	b.ReportMetric(beamRate/1e6, "write-MB/s")
	b.ReportMetric(beamRate/bulkRate, "x-applybulk")
}
