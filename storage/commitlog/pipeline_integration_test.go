//go:build integration

package commitlog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestS3Pipelined runs the several-PUTs-in-flight tests against MinIO.
func TestS3Pipelined(t *testing.T) {
	ctx := context.Background()
	store := blobtest.NewS3(t)
	opts := Options{Store: store, Prefix: "logs", FlushConcurrency: 4, MaxBatchBytes: 4000, SegmentBytes: 60_000}
	l := openLog(t, opts)
	recs := records(31, 400)
	commits := make([]*Commit, len(recs))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(recs); i += 8 {
				// Appends of one writer in order; their positions
				// interleave with the others'.
				c := l.Append(recs[i])
				commits[i] = c
				if err := c.Wait(ctx); err != nil {
					t.Errorf("record %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var got []replayed
	res, err := Replay(ctx, Options{Store: store, Prefix: "logs"}, tabletdesc.LogPosition{}, func(p tabletdesc.LogPosition, rec Record) error {
		got = append(got, replayed{p, rec})
		return nil
	})
	if err != nil || res.TornTail || len(got) != len(recs) {
		t.Fatalf("replay: %d records, %+v, %v", len(got), res, err)
	}
	// Every record at the position its Commit reported.
	byPos := map[tabletdesc.LogPosition]int{}
	for i, c := range commits {
		byPos[c.Pos] = i
	}
	for _, g := range got {
		i, ok := byPos[g.pos]
		if !ok || g.rec.Tablet != recs[i].Tablet || g.rec.FirstSeq != recs[i].FirstSeq {
			t.Fatalf("replayed record at %v is not the one appended there", g.pos)
		}
	}
}

// BenchmarkS3FlushConcurrency measures group commit into MinIO with 32
// writers of 1000-byte single-cell records, as a tablet server's writers:
// "single" writers wait for each record (single-row writes), "bulk" ones
// append 100 and wait for the last (a MutateRows of 100 rows). Flush
// concurrency 1, 2 and 4 (ConcurrentFlushBytes at its default) and batch
// caps of 1 and 4 MiB take turns in rounds (TABULA_BENCH_ROUNDS, default
// 3) of 2 s each, the order reversed every other round; it logs each
// configuration's median records/s, PUTs and its ratio to concurrency 1
// (same mode and cap) in the same round.
func BenchmarkS3FlushConcurrency(b *testing.B) {
	store := blobtest.NewS3(b)
	type config struct {
		mode     string
		conc     int
		batchMiB int
	}
	var configs []config
	for _, mode := range []string{"single", "bulk"} {
		for _, mib := range []int{1, 4} {
			for _, c := range []int{1, 2, 4} {
				if mode == "single" && mib == 1 {
					continue
				}
				configs = append(configs, config{mode, c, mib})
			}
		}
	}
	rounds := 3
	if v := os.Getenv("TABULA_BENCH_ROUNDS"); v != "" {
		fmt.Sscan(v, &rounds)
	}
	rate := map[config][]float64{}
	ratio := map[config][]float64{}
	puts := map[config][]float64{}
	value := make([]byte, 1000)
	for i := range value {
		value[i] = byte(rand.Uint32())
	}
	run := 0
	for b.Loop() {
		for r := range rounds {
			order := slices.Clone(configs)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			type key struct {
				mode string
				mib  int
			}
			base := map[key]float64{}
			got := map[config]float64{}
			for _, c := range order {
				run++
				opts := Options{Store: store, Prefix: fmt.Sprintf("bench/%d", run), FlushConcurrency: c.conc, MaxBatchBytes: c.batchMiB << 20}
				var flushes int64
				got[c], flushes = measureLog(b, opts, value, c.mode == "bulk", 2*time.Second)
				puts[c] = append(puts[c], float64(flushes))
				if c.conc == 1 {
					base[key{c.mode, c.batchMiB}] = got[c]
				}
			}
			for c, v := range got {
				rate[c] = append(rate[c], v)
				ratio[c] = append(ratio[c], v/base[key{c.mode, c.batchMiB}])
			}
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	for _, c := range configs {
		b.Logf("%s, concurrency %d, batch ≤ %d MiB: %.0f records/s (rounds %v), %.0f PUTs/run, %.2f× concurrency 1 (range %.2f–%.2f)",
			c.mode, c.conc, c.batchMiB, med(rate[c]), roundAll(rate[c]), med(puts[c]), med(ratio[c]), slices.Min(ratio[c]), slices.Max(ratio[c]))
	}
}

func roundAll(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// measureLog runs 32 writers against a fresh log for d and returns the
// acknowledged records per second and the flushes (PUTs) made.
func measureLog(b *testing.B, opts Options, value []byte, bulk bool, d time.Duration) (float64, int64) {
	ctx := context.Background()
	l, err := Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	per := 1
	if bulk {
		per = 100
	}
	var mu sync.Mutex
	total := 0
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := 0; time.Now().Before(stop); {
				var last *Commit
				for range per {
					i++
					last = l.Append(Record{Tablet: "bench", FirstSeq: uint64(i), Mutation: cell.RowMutation{
						Row:       fmt.Appendf(nil, "row%04d%08d", w, i),
						Mutations: []cell.Mutation{cell.Set("f", []byte("c"), int64(i), value)},
					}})
				}
				if err := last.Wait(ctx); err != nil {
					b.Error(err)
					return
				}
				n += per
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	flushes := l.Stats().Flushes
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	// Leave the store as it was for the next configuration.
	if objs, err := opts.Store.List(ctx, opts.Prefix+"/"); err == nil {
		for _, o := range objs {
			_ = opts.Store.Delete(ctx, o.Name)
		}
	}
	return float64(total) / el.Seconds(), flushes
}

// BenchmarkS3ReplayPrefetch measures how fast a recovery reads a log of
// small objects from MinIO — one object per group commit, as a server
// taking a trickle of writes leaves — with 8, 16, 32 and 64 objects
// fetched ahead (replayPrefetch), in rounds (TABULA_BENCH_ROUNDS, default
// 3) whose order is reversed every other round. It logs each setting's
// median objects/s and its ratio to 8 in the same round.
func BenchmarkS3ReplayPrefetch(b *testing.B) {
	ctx := context.Background()
	store := blobtest.NewS3(b)
	const objects = 2000
	opts := Options{Store: store, Prefix: "replaybench", SegmentObjects: objects}
	l := openLog(b, opts)
	for _, rec := range records(41, objects) {
		if _, err := l.Write(ctx, rec); err != nil { // one object each
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	rounds := 3
	if v := os.Getenv("TABULA_BENCH_ROUNDS"); v != "" {
		fmt.Sscan(v, &rounds)
	}
	settings := []int{8, 16, 32, 64}
	defer func(v int) { replayPrefetch = v }(replayPrefetch)
	rate := map[int][]float64{}
	ratio := map[int][]float64{}
	for b.Loop() {
		for r := range rounds {
			order := slices.Clone(settings)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			got := map[int]float64{}
			for _, k := range order {
				replayPrefetch = k
				start := time.Now()
				res, err := Replay(ctx, opts, tabletdesc.LogPosition{}, func(tabletdesc.LogPosition, Record) error { return nil })
				if err != nil || res.Records != objects {
					b.Fatalf("replay: %+v, %v", res, err)
				}
				got[k] = objects / time.Since(start).Seconds()
			}
			for k, v := range got {
				rate[k] = append(rate[k], v)
				ratio[k] = append(ratio[k], v/got[8])
			}
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	for _, k := range settings {
		b.Logf("prefetch %d: %.0f objects/s (rounds %v), %.2f× prefetch 8 (range %.2f–%.2f)",
			k, med(rate[k]), roundAll(rate[k]), med(ratio[k]), slices.Min(ratio[k]), slices.Max(ratio[k]))
	}
}
