package tablet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// The paper's Figure 6 workloads on one tablet: 1000-byte values, rows
// written to and read from a tablet whose SSTables and commit log live in a
// local directory, every write durable (fsync) before it is acknowledged.
//
//	go test -run '^$' -bench BenchmarkPaper -benchtime 20000x ./storage/tablet/
//
// Writes run 32 concurrent writers (b.SetParallelism) so that commits share
// log flushes, as a tablet server's clients do. Figures and the machine they
// ran on are in BENCHMARKS.md.

const (
	paperValueBytes = 1000
	paperReadRows   = 50_000 // rows preloaded for the read workloads (~50 MB)
)

func paperKey(i int) []byte { return fmt.Appendf(nil, "%010d", i) }

func paperValue(r *rand.Rand) []byte {
	v := make([]byte, paperValueBytes)
	for i := range v {
		v[i] = byte('a' + r.IntN(26))
	}
	return v
}

type paperEngine struct {
	t   *tablet.Tablet
	log *commitlog.Log
}

func openPaperEngine(b testing.TB, dir string) *paperEngine {
	b.Helper()
	ctx := context.Background()
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	logOpts := commitlog.Options{Dir: filepath.Join(dir, "log")}
	log, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		b.Fatal(err)
	}
	t, err := tablet.Open(ctx, tablet.Options{
		ID: "bench",
		Schema: tabletdesc.Schema{
			Families: map[string]tabletdesc.Family{"f": {}, "mem": {LocalityGroup: "mem"}},
			LocalityGroups: map[string]tabletdesc.LocalityGroup{
				"mem": {InMemory: true},
			},
		},
		Store:      store,
		Dir:        "tablets/bench",
		Log:        log,
		LogOptions: logOpts,
		// A block cache smaller than the data and no scan cache: random
		// reads of the default group fetch blocks from the files, as the
		// paper's did from GFS.
		Cache:      sstable.NewCache(16 << 20),
		StateStore: tablet.NewBlobStateStore(store, "state"),
	})
	if err != nil {
		b.Fatal(err)
	}
	e := &paperEngine{t: t, log: log}
	b.Cleanup(func() {
		t.Close()
		log.Close()
	})
	return e
}

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPaper runs the six workloads as sub-benchmarks.
func BenchmarkPaper(b *testing.B) {
	ctx := context.Background()
	write := func(b *testing.B, key func(r *rand.Rand, i int) []byte) {
		e := openPaperEngine(b, b.TempDir())
		var n atomic.Int64
		var seed atomic.Uint64
		b.SetBytes(paperValueBytes)
		b.SetParallelism(16) // 32 writers on 2 cores
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 0))
			v := paperValue(r)
			for pb.Next() {
				i := int(n.Add(1))
				rm := cell.RowMutation{Row: key(r, i), Mutations: []cell.Mutation{cell.Set("f", nil, cell.ServerTimestamp, v)}}
				if err := e.t.Apply(ctx, rm); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportOps(b)
	}
	b.Run("sequential-write", func(b *testing.B) {
		write(b, func(_ *rand.Rand, i int) []byte { return paperKey(i) })
	})
	b.Run("random-write", func(b *testing.B) {
		write(b, func(r *rand.Rand, _ int) []byte { return paperKey(r.IntN(1 << 30)) })
	})

	// The read workloads share one preloaded tablet whose data is in
	// SSTables (flushed and major-compacted), as in the paper, where reads
	// go to GFS-resident SSTables.
	e := openPaperEngine(b, b.TempDir())
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < paperReadRows; i++ {
		v := paperValue(r)
		rm := cell.RowMutation{Row: paperKey(i), Mutations: []cell.Mutation{
			cell.Set("f", nil, 1, v), cell.Set("mem", nil, 1, v)}}
		if err := e.t.Apply(ctx, rm); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.t.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := e.t.Compact(ctx, true); err != nil {
		b.Fatal(err)
	}
	read := func(b *testing.B, family string, key func(r *rand.Rand, i int) []byte) {
		var seed atomic.Uint64
		var n atomic.Int64
		b.SetBytes(paperValueBytes)
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 2))
			ro := tablet.ReadOptions{Families: []string{family}}
			for pb.Next() {
				i := int(n.Add(1))
				row, ok, err := e.t.ReadRow(ctx, key(r, i), ro)
				if err != nil || !ok || len(row.Cells) != 1 || len(row.Cells[0].Value) != paperValueBytes {
					b.Errorf("read %s: ok=%v err=%v", key(r, i), ok, err)
					return
				}
			}
		})
		reportOps(b)
	}
	b.Run("sequential-read", func(b *testing.B) {
		read(b, "f", func(_ *rand.Rand, i int) []byte { return paperKey(i % paperReadRows) })
	})
	b.Run("random-read", func(b *testing.B) {
		read(b, "f", func(r *rand.Rand, _ int) []byte { return paperKey(r.IntN(paperReadRows)) })
	})
	b.Run("random-read-mem", func(b *testing.B) {
		read(b, "mem", func(r *rand.Rand, _ int) []byte { return paperKey(r.IntN(paperReadRows)) })
	})
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(paperValueBytes)
		b.ResetTimer()
		rows := 0
		for rows < b.N {
			err := e.t.Scan(ctx, tablet.ScanOptions{Limit: b.N - rows, ReadOptions: tablet.ReadOptions{Families: []string{"f"}}},
				func(r cell.Row) error {
					rows++
					return nil
				})
			if err != nil {
				b.Fatal(err)
			}
		}
		reportOps(b)
	})
}

// BenchmarkPaperReference runs the same workloads on a plain Go reference
// in the same process, for ratios in BENCHMARKS.md: a map under a RWMutex
// with a sorted key slice for scans, and writes made durable the naive way,
// one write and one fsync of an append-only file per operation under the
// lock (no group commit).
func BenchmarkPaperReference(b *testing.B) {
	type ref struct {
		mu   sync.RWMutex
		rows map[string][]byte
		keys []string
		f    *os.File
	}
	open := func(b *testing.B) *ref {
		f, err := os.Create(filepath.Join(b.TempDir(), "log"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return &ref{rows: map[string][]byte{}, f: f}
	}
	write := func(b *testing.B, key func(r *rand.Rand, i int) []byte) {
		s := open(b)
		var n atomic.Int64
		var seed atomic.Uint64
		b.SetBytes(paperValueBytes)
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 0))
			v := paperValue(r)
			for pb.Next() {
				k := key(r, int(n.Add(1)))
				s.mu.Lock()
				_, err := s.f.Write(append(k, v...))
				if err == nil {
					err = s.f.Sync()
				}
				s.rows[string(k)] = v
				s.mu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportOps(b)
	}
	b.Run("sequential-write", func(b *testing.B) {
		write(b, func(_ *rand.Rand, i int) []byte { return paperKey(i) })
	})
	b.Run("random-write", func(b *testing.B) {
		write(b, func(r *rand.Rand, _ int) []byte { return paperKey(r.IntN(1 << 30)) })
	})
	s := open(b)
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < paperReadRows; i++ {
		k := string(paperKey(i))
		s.rows[k] = paperValue(r)
		s.keys = append(s.keys, k)
	}
	read := func(b *testing.B, key func(r *rand.Rand, i int) []byte) {
		var seed atomic.Uint64
		var n atomic.Int64
		b.SetBytes(paperValueBytes)
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seed.Add(1), 2))
			for pb.Next() {
				s.mu.RLock()
				v := s.rows[string(key(r, int(n.Add(1))))]
				s.mu.RUnlock()
				if len(v) != paperValueBytes {
					b.Error("missing row")
					return
				}
			}
		})
		reportOps(b)
	}
	b.Run("sequential-read", func(b *testing.B) {
		read(b, func(_ *rand.Rand, i int) []byte { return paperKey(i % paperReadRows) })
	})
	b.Run("random-read", func(b *testing.B) {
		read(b, func(r *rand.Rand, _ int) []byte { return paperKey(r.IntN(paperReadRows)) })
	})
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(paperValueBytes)
		b.ResetTimer()
		total := 0
		for rows := 0; rows < b.N; {
			s.mu.RLock()
			for _, k := range s.keys {
				total += len(s.rows[k])
				if rows++; rows == b.N {
					break
				}
			}
			s.mu.RUnlock()
		}
		if total == 0 {
			b.Fatal("scanned nothing")
		}
		reportOps(b)
	})
}
