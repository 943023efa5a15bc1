package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
)

// The workloads of tabula bench (the paper's Figure 6): the runner that
// fills a table and drives requests against it, and the latency statistics.

// benchKey is row i's key: fixed width so keys sort as numbers.
func benchKey(i int) string { return fmt.Sprintf("row%010d", i) }

// benchSplits returns the tablets-1 increasing keys that cut rows
// 0..rows-1 into that many ranges of nearly equal row counts (none for
// one tablet).
func benchSplits(rows, tablets int) []string {
	var keys []string
	for k := 1; k < tablets; k++ {
		keys = append(keys, benchKey(k*rows/tablets))
	}
	return keys
}

// valuePool is random bytes that values are cut from at random offsets,
// so values are distinct and incompressible without generating each.
func valuePool(size int) []byte {
	pool := make([]byte, 1<<20+size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(r.Uint32())
	}
	return pool
}

// benchRunner runs workloads against one table.
type benchRunner struct {
	cfg      benchConfig
	tbl      *bigtable.Table
	ping     func(context.Context) error // one PingAndWarm call
	progress io.Writer
	target   string
	pool     []byte
	filled   map[string]bool
}

func (r *benchRunner) value(rng *rand.Rand) []byte {
	off := rng.IntN(len(r.pool) - r.cfg.valueSize)
	return r.pool[off : off+r.cfg.valueSize]
}

// write applies rows keys[] to family with one request: Apply for a
// single row, ApplyBulk otherwise.
func (r *benchRunner) write(ctx context.Context, rng *rand.Rand, family string, rows []int) (int64, error) {
	// Millisecond timestamps: the emulator's (and Cloud Bigtable's)
	// default granularity.
	ts := bigtable.Time(time.Now().Truncate(time.Millisecond))
	if len(rows) == 1 {
		m := bigtable.NewMutation()
		v := r.value(rng)
		m.Set(family, "c", ts, v)
		return int64(len(v)), r.tbl.Apply(ctx, benchKey(rows[0]), m)
	}
	keys := make([]string, len(rows))
	muts := make([]*bigtable.Mutation, len(rows))
	var n int64
	for i, row := range rows {
		keys[i] = benchKey(row)
		m := bigtable.NewMutation()
		v := r.value(rng)
		m.Set(family, "c", ts, v)
		muts[i] = m
		n += int64(len(v))
	}
	return n, bulkWriter{tbl: r.tbl}.apply(ctx, keys, muts)
}

// awaitTablets reads the row at each key, untimed, so that the first
// workload times neither the wait for a new table's tablets nor the
// client's first lookup of each: Tabula's CreateTable returns once every
// tablet is served, but a server that assigns them later (an older
// Tabula, another Bigtable server) would have its first requests retried.
// keys are the tablets' start keys.
func (r *benchRunner) awaitTablets(ctx context.Context, keys []string) error {
	start := time.Now()
	for _, k := range keys {
		if _, err := r.tbl.ReadRow(ctx, k); err != nil {
			return fmt.Errorf("waiting for the tablet of %s: %w", k, describe(err))
		}
	}
	fmt.Fprintf(r.progress, "%s: %d tablet(s) served after %v\n", r.target, len(keys), time.Since(start).Round(time.Millisecond))
	return nil
}

// fill writes every row of family, untimed, so read workloads have data.
func (r *benchRunner) fill(ctx context.Context, family string) error {
	const batch = 100
	requests := (r.cfg.rows + batch - 1) / batch
	_, err := r.drive(ctx, "fill "+family, requests, func(ctx context.Context, rng *rand.Rand, req int) (int64, int64, error) {
		rows := make([]int, 0, batch)
		for i := req * batch; i < min((req+1)*batch, r.cfg.rows); i++ {
			rows = append(rows, i)
		}
		n, err := r.write(ctx, rng, family, rows)
		return int64(len(rows)), n, err
	})
	if err != nil {
		return fmt.Errorf("fill %s: %w", family, describe(err))
	}
	if r.filled == nil {
		r.filled = map[string]bool{}
	}
	r.filled[family] = true
	return nil
}

// run runs one workload and measures it.
func (r *benchRunner) run(ctx context.Context, w string) (workloadResult, error) {
	n, batch := r.cfg.rows, r.cfg.batch
	filter := func(fam string) bigtable.ReadOption {
		// The latest version only: randwrite leaves older versions that
		// GC may not have collected yet.
		return bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^"+fam+"$"), bigtable.LatestNFilter(1)))
	}
	readOne := func(ctx context.Context, key, fam string) (int64, int64, error) {
		row, err := r.tbl.ReadRow(ctx, key, filter(fam))
		if err != nil {
			return 0, 0, err
		}
		var b int64
		for _, items := range row {
			for _, it := range items {
				b += int64(len(it.Value))
			}
		}
		if b == 0 {
			return 0, 0, fmt.Errorf("row %s has no %s cell", key, fam)
		}
		return 1, b, nil
	}
	var op benchOp
	requests := n
	switch w {
	case wlSeqWrite, wlRandWrite:
		requests = (n + batch - 1) / batch
		seq := w == wlSeqWrite
		op = func(ctx context.Context, rng *rand.Rand, req int) (int64, int64, error) {
			rows := make([]int, 0, batch)
			for i := req * batch; i < min((req+1)*batch, n); i++ {
				if seq {
					rows = append(rows, i)
				} else {
					rows = append(rows, rng.IntN(n))
				}
			}
			b, err := r.write(ctx, rng, benchFamily, rows)
			return int64(len(rows)), b, err
		}
	case wlSeqRead:
		op = func(ctx context.Context, _ *rand.Rand, req int) (int64, int64, error) {
			return readOne(ctx, benchKey(req), benchFamily)
		}
	case wlRandRead:
		op = func(ctx context.Context, rng *rand.Rand, _ int) (int64, int64, error) {
			return readOne(ctx, benchKey(rng.IntN(n)), benchFamily)
		}
	case wlRandReadMem:
		op = func(ctx context.Context, rng *rand.Rand, _ int) (int64, int64, error) {
			return readOne(ctx, benchKey(rng.IntN(n)), benchMemFamily)
		}
	case wlEmpty:
		op = func(ctx context.Context, _ *rand.Rand, _ int) (int64, int64, error) {
			return 1, 0, r.ping(ctx)
		}
	case wlScan:
		requests = (n + scanChunk - 1) / scanChunk
		op = func(ctx context.Context, _ *rand.Rand, req int) (int64, int64, error) {
			rng := bigtable.NewRange(benchKey(req*scanChunk), benchKey(min((req+1)*scanChunk, n)))
			var rows, b int64
			err := r.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
				rows++
				for _, it := range row[benchFamily] {
					b += int64(len(it.Value))
				}
				return true
			}, filter(benchFamily))
			return rows, b, err
		}
	}
	res, err := r.drive(ctx, r.target+" "+w, requests, op)
	res.Workload = w
	if err == nil && w == wlSeqWrite {
		if r.filled == nil {
			r.filled = map[string]bool{}
		}
		r.filled[benchFamily] = true
	}
	return res, err
}

// benchOp performs request req and returns the rows and value bytes it
// moved.
type benchOp func(ctx context.Context, rng *rand.Rand, req int) (rows, bytes int64, err error)

// drive runs requests [0, n) on cfg.concurrency workers that take the
// next request number from a shared counter — so sequential workloads
// stay nearly in order — timing each request.
func (r *benchRunner) drive(ctx context.Context, what string, n int, op benchOp) (workloadResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bar := newProgress(r.progress, int64(n), what, "req")
	var next atomic.Int64
	var ops, bytes atomic.Int64
	first := newErrFirst()
	lat := make([][]time.Duration, r.cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range r.cfg.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				req := int(next.Add(1) - 1)
				if req >= n {
					return
				}
				t0 := time.Now()
				o, b, err := op(ctx, rng, req)
				d := time.Since(t0)
				if err != nil {
					first.set(err)
					cancel()
					return
				}
				lat[w] = append(lat[w], d)
				ops.Add(o)
				bytes.Add(b)
				_ = bar.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	_ = bar.Finish()
	if err := first.get(); err != nil {
		return workloadResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return workloadResult{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := workloadResult{
		Ops:      ops.Load(),
		Requests: int64(len(all)),
		Bytes:    bytes.Load(),
		Seconds:  elapsed.Seconds(),
	}
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.MBPerSec = float64(res.Bytes) / 1e6 / res.Seconds
	res.P50Micros = float64(percentile(all, 0.50).Nanoseconds()) / 1e3
	res.P99Micros = float64(percentile(all, 0.99).Nanoseconds()) / 1e3
	return res, nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
