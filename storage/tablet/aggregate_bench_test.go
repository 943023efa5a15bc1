package tablet

import (
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// BenchmarkCounterRead reads one counter written by n AddToCells of one
// cell, while the writes are unfolded entries (in the memtable, and in one
// SSTable after a flush) and after a major compaction has folded them into
// one. The reference, measured in the same run, is a plain family's cell
// overwritten n times at one timestamp — as many entries, of which a read
// keeps the newest and skips the rest — so the ratio is the price of
// folding. Results (2 shared cores) are in the report of issue 13.
func BenchmarkCounterRead(b *testing.B) {
	for _, n := range []int{10, 1000} {
		for _, kind := range []string{"plain", "sum", "hll"} {
			for _, where := range []string{"memtable", "sstable", "compacted"} {
				b.Run(fmt.Sprintf("n=%d/%s/%s", n, kind, where), func(b *testing.B) {
					ctx := context.Background()
					store := blob.NewMemory()
					tb, err := Open(ctx, Options{
						ID: "bench", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
						Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{
							"plain": {}, "sum": {Aggregate: cell.Sum}, "hll": {Aggregate: cell.HLLUniqueCount},
						}},
					})
					if err != nil {
						b.Fatal(err)
					}
					defer tb.Close()
					for i := range n {
						m := cell.Add(kind, []byte("c"), 1000, int64(i))
						if kind == "plain" {
							m = cell.Set(kind, []byte("c"), 1000, m.Value)
						}
						if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{m}}); err != nil {
							b.Fatal(err)
						}
					}
					switch where {
					case "sstable":
						err = tb.Flush(ctx)
					case "compacted":
						err = tb.Compact(ctx, true)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						r, ok, err := tb.ReadRow(ctx, []byte("r"), ReadOptions{})
						if err != nil || !ok || len(r.Cells) != 1 {
							b.Fatalf("read: %v %v %v", r, ok, err)
						}
					}
				})
			}
		}
	}
}
