package mapreduce_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/jobs"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// benchRows is the size of the benchmarks' table: TABULA_MR_BENCH_ROWS,
// default 100,000 (the 1M-row word count: TABULA_MR_BENCH_ROWS=1000000).
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("TABULA_MR_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// loadBenchTable writes rows row%08d of a Webtable-like shape (a page of
// pageBytes, 0–5 anchors of a few words, a language) into a table of 8
// tablets, through Tabula's client.
func loadBenchTable(b *testing.B, e *env, c *client.Client, table string, rows, pageBytes int) {
	var splits []string
	for i := 1; i < 8; i++ {
		splits = append(splits, fmt.Sprintf("row%08d", i*rows/8))
	}
	e.CreateTable(b, table, []string{"contents", "anchor", "language"}, splits...)
	r := rand.New(rand.NewPCG(1, 1))
	page := []byte(strings.Repeat("x", pageBytes))
	var batch []cell.RowMutation
	for i := range rows {
		rm := cell.RowMutation{Row: fmt.Appendf(nil, "row%08d", i)}
		rm.Mutations = append(rm.Mutations, cell.Set("contents", nil, 1_000_000, page))
		for a := range r.IntN(6) {
			text := words[r.IntN(len(words))] + " " + words[r.IntN(len(words))] + " " + words[r.IntN(len(words))]
			rm.Mutations = append(rm.Mutations, cell.Set("anchor", fmt.Appendf(nil, "site%d.com", a), 1_000_000, []byte(text)))
		}
		rm.Mutations = append(rm.Mutations, cell.Set("language", nil, 1_000_000, []byte("EN")))
		batch = append(batch, rm)
		if len(batch) == 2000 || i == rows-1 {
			if _, err := c.ApplyBulk(e.ctx, table, batch, client.BulkOptions{}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkScan compares, on one table in one run, a plain client scan
// (the reference) with the map-only scan job, rowcounter with a keys-only
// client scan (the filter rowcounter uses), and the script job with
// client.RunScript. Each iteration runs all six in turn, so that the
// machine's load hits them alike; it reports rows/s of each and the
// ratios (job over reference: above 1 is faster).
func BenchmarkScan(b *testing.B) {
	e := startEnv(b)
	c, err := client.Dial(e.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rows := benchRows()
	loadBenchTable(b, e, c, "bench", rows, 1000)
	run := func(job *mapreduce.Job) {
		res, err := mapreduce.Run(context.Background(), job, mapreduce.Config{Addr: e.Addr, LocalWorkers: 4, TempDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		if got := res.Counters[mapreduce.CounterInputRows]; got != int64(rows) {
			b.Fatalf("job read %d rows, want %d", got, rows)
		}
	}
	scan := func(opts client.ScanOptions) {
		s := c.Scan(context.Background(), "bench", opts)
		n := 0
		for s.Next() {
			n++
		}
		if s.Err() != nil || n != rows {
			b.Fatalf("scan: %d rows, %v", n, s.Err())
		}
	}
	rc, err := jobs.RowCounter(jobs.RowCounterConf{Input: jobs.TableSpec{Table: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	keysOnly := rc.Input.(*mapreduce.TableInput).Filter
	src := "pages: table sum[lang: string] of int;\nrefs: table sum[site: string] of int;\n" +
		"for (i: int = 0; i < len(input.cells); i++) { if (input.cells[i].family == \"anchor\") emit refs[string(input.cells[i].qualifier)] <- 1; }\n" +
		"emit pages[\"all\"] <- 1;\n"
	variants := []struct {
		name string
		fn   func()
	}{
		{"client-scan", func() { scan(client.ScanOptions{}) }},
		{"maponly-job", func() {
			run(&mapreduce.Job{Input: &mapreduce.TableInput{Table: "bench"}, Map: func(context.Context, cell.Row, mapreduce.MapContext) error { return nil }})
		}},
		{"client-scan-keys-only", func() { scan(client.ScanOptions{Filter: keysOnly}) }},
		{"rowcounter", func() {
			job, err := jobs.RowCounter(jobs.RowCounterConf{Input: jobs.TableSpec{Table: "bench"}})
			if err != nil {
				b.Fatal(err)
			}
			run(job)
		}},
		{"script-run", func() {
			if _, err := c.RunScript(context.Background(), "bench", src, client.ScriptOptions{}); err != nil {
				b.Fatal(err)
			}
		}},
		{"mr-script", func() {
			job, err := jobs.Script(jobs.ScriptConf{Input: jobs.TableSpec{Table: "bench"}, Source: src})
			if err != nil {
				b.Fatal(err)
			}
			run(job)
		}},
	}
	spent := make([]time.Duration, len(variants))
	for b.Loop() {
		for i, v := range variants {
			t0 := time.Now()
			v.fn()
			spent[i] += time.Since(t0)
		}
	}
	rate := func(i int) float64 { return float64(rows) * float64(b.N) / spent[i].Seconds() }
	for i, v := range variants {
		b.ReportMetric(rate(i), v.name+"-rows/s")
	}
	b.ReportMetric(rate(1)/rate(0), "maponly/scan")
	b.ReportMetric(rate(3)/rate(2), "rowcounter/keys-only-scan")
	b.ReportMetric(rate(5)/rate(4), "mr-script/script-run")
}

// BenchmarkWordCount runs the word count of the anchors, with a shuffle
// through a sort buffer small enough to spill, and reports rows/s and the
// spilled and shuffled bytes.
func BenchmarkWordCount(b *testing.B) {
	e := startEnv(b)
	c, err := client.Dial(e.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rows := benchRows()
	loadBenchTable(b, e, c, "bench", rows, 100)
	// Each iteration runs both, alternating which goes first, so that the
	// server's background work after the load hits them alike.
	var spent [2]time.Duration
	var spilled, shuffled [2]int64
	for b.Loop() {
		for k := range 2 {
			i := (k + b.N) % 2 // 0: with the combiner, 1: without
			job, err := jobs.WordCount(jobs.WordCountConf{Input: jobs.TableSpec{Table: "bench"}, Reducers: 4})
			if err != nil {
				b.Fatal(err)
			}
			if i == 1 {
				job.Combine = nil
			}
			t0 := time.Now()
			res, err := mapreduce.Run(context.Background(), job, mapreduce.Config{Addr: e.Addr, LocalWorkers: 4,
				SortMemory: 1 << 20, TempDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(t0)
			spilled[i] += res.Counters[mapreduce.CounterSpilledBytes]
			shuffled[i] += res.Counters[mapreduce.CounterShuffleBytes]
		}
	}
	for i, name := range []string{"combiner", "no-combiner"} {
		b.ReportMetric(float64(rows)*float64(b.N)/spent[i].Seconds(), name+"-rows/s")
		b.ReportMetric(float64(spilled[i])/float64(b.N), name+"-spilled-B")
		b.ReportMetric(float64(shuffled[i])/float64(b.N), name+"-shuffle-B")
	}
}
