package tablet

import (
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// BenchmarkOverwriteMerges: a tablet of 20,000 rows compacted into one
// file, whose first 2,000 rows are then rewritten again and again (the
// family keeps one version), with a flush after each rewrite and merges as
// the background makes them (MaxSSTables 8: the newest files, the big old
// one left out while it is bigger than they are together). An op is one
// rewrite. written-MB/op is what its flush and its share of the merges
// wrote (the store keeps every file: tablets never delete any), live-MB
// the tablet's files at the end, files their number.
func BenchmarkOverwriteMerges(b *testing.B) {
	ctx := context.Background()
	tb, store := openOneVersion(b, Options{})
	value := make([]byte, 256)
	rms := make([]cell.RowMutation, 20000)
	write := func(rms []cell.RowMutation, ts int64) {
		for i := range rms {
			rms[i] = cell.RowMutation{Row: fmt.Appendf(nil, "row%06d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), ts, value)}}
		}
		for i, err := range tb.ApplyBatch(ctx, rms) {
			if err != nil {
				b.Fatalf("row %d: %v", i, err)
			}
		}
	}
	write(rms, 1)
	if err := tb.Compact(ctx, true); err != nil {
		b.Fatal(err)
	}
	start, err := store.List(ctx, "sst/")
	if err != nil {
		b.Fatal(err)
	}
	rms = rms[:2000]
	b.ResetTimer()
	for round := range b.N {
		write(rms, int64(round+2)*1000)
		if err := tb.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := tb.maintain(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	objs, err := store.List(ctx, "sst/")
	if err != nil {
		b.Fatal(err)
	}
	before := map[string]bool{}
	for _, o := range start {
		before[o.Name] = true
	}
	var written int64
	for _, o := range objs {
		if !before[o.Name] {
			written += o.Size
		}
	}
	st := tb.Stats()
	var live int64
	files := 0
	for _, g := range st.Groups {
		live += g.Bytes
		files += g.SSTables
	}
	b.ReportMetric(float64(written)/1e6/float64(b.N), "written-MB/op")
	b.ReportMetric(float64(live)/1e6, "live-MB")
	b.ReportMetric(float64(files), "files")
}
