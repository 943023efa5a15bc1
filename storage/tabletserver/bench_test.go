package tabletserver

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/bigtable"
)

// The benchmarks drive the server through the official client over
// loopback, as users do: they measure the whole path (gRPC, routing, the
// commit log's group commit, the tablet). Run them with -cpu and
// -benchtime of your choice; they assert nothing about speed.

const benchRows = 10000

func benchTable(b *testing.B, load bool) (*testEnv, *bigtable.Table) {
	e := newTestEnv(b, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "b", families: []string{"f"}})
	if load {
		val := bytes.Repeat([]byte("x"), 1000)
		for start := 0; start < benchRows; start += 500 {
			var keys []string
			var muts []*bigtable.Mutation
			for i := start; i < start+500; i++ {
				m := bigtable.NewMutation()
				m.Set("f", "q", 0, val)
				keys = append(keys, fmt.Sprintf("row%08d", i))
				muts = append(muts, m)
			}
			if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
				b.Fatal(err, errs)
			}
		}
	}
	return e, tbl
}

// BenchmarkMutateRow is the paper's random write: one 1000-byte cell per
// request, durable before the answer, with concurrent clients sharing
// group commits.
func BenchmarkMutateRow(b *testing.B) {
	e, tbl := benchTable(b, false)
	val := bytes.Repeat([]byte("x"), 1000)
	var n atomic.Int64
	b.SetBytes(1000)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := bigtable.NewMutation()
			m.Set("f", "q", 0, val)
			if err := tbl.Apply(e.ctx, fmt.Sprintf("row%08d", n.Add(1)*7919%1000003), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReadRowRandom is the paper's random read.
func BenchmarkReadRowRandom(b *testing.B) {
	e, tbl := benchTable(b, true)
	b.SetBytes(1000)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			row, err := tbl.ReadRow(e.ctx, fmt.Sprintf("row%08d", r.IntN(benchRows)))
			if err != nil || len(row) == 0 {
				b.Error(err, row)
				return
			}
		}
	})
}

// BenchmarkScan reads the whole table per iteration; rows/s is the figure.
func BenchmarkScan(b *testing.B) {
	e, tbl := benchTable(b, true)
	b.SetBytes(benchRows * 1000)
	b.ResetTimer()
	for range b.N {
		n := 0
		if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != benchRows {
			b.Fatalf("scanned %d rows", n)
		}
	}
	b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkMutateRows is the paper's random write in bulk: MutateRows of
// 100 random rows of one 1000-byte cell each, with concurrent clients
// (Host.applyBatch: one tablet batch per request here).
func BenchmarkMutateRows(b *testing.B) {
	e, tbl := benchTable(b, false)
	val := bytes.Repeat([]byte("x"), 1000)
	const batch = 100
	var n atomic.Int64
	b.SetBytes(batch * 1000)
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := make([]string, batch)
		muts := make([]*bigtable.Mutation, batch)
		for pb.Next() {
			for i := range keys {
				m := bigtable.NewMutation()
				m.Set("f", "q", 0, val)
				keys[i], muts[i] = fmt.Sprintf("row%08d", n.Add(1)*7919%1000003), m
			}
			if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
				b.Error(err, errs)
				return
			}
		}
	})
}
