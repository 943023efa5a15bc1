package mapreduce_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
// ~1 KB, 0–5 anchors of a few words, a language) into a table of 8
// tablets, through Tabula's client.
func loadBenchTable(b *testing.B, e *env, c *client.Client, table string, rows int) {
	var splits []string
	for i := 1; i < 8; i++ {
		splits = append(splits, fmt.Sprintf("row%08d", i*rows/8))
	}
	e.createTable(b, table, []string{"contents", "anchor", "language"}, splits...)
	r := rand.New(rand.NewPCG(1, 1))
	page := []byte(strings.Repeat("<p>lorem ipsum</p>", 60))
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
// (the reference) with the map-only scan job and rowcounter (against a
// keys-only client scan, the same filter rowcounter uses); rows/s each.
func BenchmarkScan(b *testing.B) {
	e := startEnv(b)
	c, err := client.Dial(e.addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rows := benchRows()
	loadBenchTable(b, e, c, "bench", rows)
	run := func(b *testing.B, job *mapreduce.Job) {
		res, err := mapreduce.Run(context.Background(), job, mapreduce.Config{Addr: e.addr, LocalWorkers: 4, TempDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		if got := res.Counters[mapreduce.CounterInputRows]; got != int64(rows) {
			b.Fatalf("job read %d rows, want %d", got, rows)
		}
	}
	scan := func(b *testing.B, opts client.ScanOptions) {
		s := c.Scan(context.Background(), "bench", opts)
		n := 0
		for s.Next() {
			n++
		}
		if s.Err() != nil || n != rows {
			b.Fatalf("scan: %d rows, %v", n, s.Err())
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("client-scan", func(b *testing.B) {
		for b.Loop() {
			scan(b, client.ScanOptions{})
		}
		report(b)
	})
	b.Run("maponly-job", func(b *testing.B) {
		for b.Loop() {
			run(b, &mapreduce.Job{Input: &mapreduce.TableInput{Table: "bench"}, Map: func(context.Context, cell.Row, mapreduce.MapContext) error { return nil }})
		}
		report(b)
	})
	b.Run("client-scan-keys-only", func(b *testing.B) {
		rc, err := jobs.RowCounter(jobs.RowCounterConf{Input: jobs.TableSpec{Table: "bench"}})
		if err != nil {
			b.Fatal(err)
		}
		filter := rc.Input.(*mapreduce.TableInput).Filter
		for b.Loop() {
			scan(b, client.ScanOptions{Filter: filter})
		}
		report(b)
	})
	b.Run("rowcounter", func(b *testing.B) {
		for b.Loop() {
			job, err := jobs.RowCounter(jobs.RowCounterConf{Input: jobs.TableSpec{Table: "bench"}})
			if err != nil {
				b.Fatal(err)
			}
			run(b, job)
		}
		report(b)
	})
	src := "pages: table sum[lang: string] of int;\nrefs: table sum[site: string] of int;\n" +
		"for (i: int = 0; i < len(input.cells); i++) { if (input.cells[i].family == \"anchor\") emit refs[string(input.cells[i].qualifier)] <- 1; }\n" +
		"emit pages[\"all\"] <- 1;\n"
	b.Run("script-run", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.RunScript(context.Background(), "bench", src, client.ScriptOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("mr-script", func(b *testing.B) {
		for b.Loop() {
			job, err := jobs.Script(jobs.ScriptConf{Input: jobs.TableSpec{Table: "bench"}, Source: src})
			if err != nil {
				b.Fatal(err)
			}
			run(b, job)
		}
		report(b)
	})
}

// BenchmarkWordCount runs the word count of the anchors, with a shuffle
// through a sort buffer small enough to spill, and reports rows/s and the
// spilled and shuffled bytes.
func BenchmarkWordCount(b *testing.B) {
	e := startEnv(b)
	c, err := client.Dial(e.addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rows := benchRows()
	loadBenchTable(b, e, c, "bench", rows)
	for _, combine := range []bool{true, false} {
		b.Run(fmt.Sprintf("combiner=%v", combine), func(b *testing.B) {
			var spilled, shuffled int64
			for b.Loop() {
				job, err := jobs.WordCount(jobs.WordCountConf{Input: jobs.TableSpec{Table: "bench"}, Reducers: 4})
				if err != nil {
					b.Fatal(err)
				}
				if !combine {
					job.Combine = nil
				}
				res, err := mapreduce.Run(context.Background(), job, mapreduce.Config{Addr: e.addr, LocalWorkers: 4,
					SortMemory: 1 << 20, TempDir: filepath.Join(b.TempDir())})
				if err != nil {
					b.Fatal(err)
				}
				spilled += res.Counters[mapreduce.CounterSpilledBytes]
				shuffled += res.Counters[mapreduce.CounterShuffleBytes]
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(spilled)/float64(b.N), "spilled-B/op")
			b.ReportMetric(float64(shuffled)/float64(b.N), "shuffle-B/op")
		})
	}
}
