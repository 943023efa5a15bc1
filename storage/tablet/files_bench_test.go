package tablet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// BenchmarkReadRowFiles reads random rows, the newest version only, from
// a tablet whose every row has one version in each of its SSTables — what
// `tabula bench`'s point reads meet after several rounds of writes —
// with a block cache that holds a quarter of the data or all of it, and
// 16 or 64 KiB blocks. It shows what a point read pays per SSTable holding
// its row, and what a block cache miss adds to that.
//
//	go test -run '^$' -bench BenchmarkReadRowFiles -benchtime 100000x ./storage/tablet/
func BenchmarkReadRowFiles(b *testing.B) {
	const rows = 20_000 // of 1000 B: 20 MB per SSTable
	for _, files := range []int{1, 3, 6} {
		for _, cache := range []struct {
			name  string
			bytes int64
		}{{"quarter", int64(files * rows * 1000 / 4)}, {"all", 1 << 30}} {
			for _, block := range []int{16 << 10, 64 << 10} {
				b.Run(fmt.Sprintf("files%d/cache-%s/block%dK", files, cache.name, block>>10), func(b *testing.B) {
					ctx := context.Background()
					blocks := sstable.NewCache(cache.bytes)
					t := openFilesTablet(b, rows, files, blocks, block)
					ro := tablet.ReadOptions{Families: []string{"f"}, MaxVersions: 1}
					r := rand.New(rand.NewPCG(2, 2))
					for i := range rows { // the cache as a long-running server has it
						if _, _, err := t.ReadRow(ctx, filesKey(i), ro); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					before := blocks.Stats()
					b.ResetTimer()
					for range b.N {
						row, ok, err := t.ReadRow(ctx, filesKey(r.IntN(rows)), ro)
						if err != nil || !ok || len(row.Cells) != 1 || row.Cells[0].Timestamp != int64(files) {
							b.Fatalf("read: ok=%v err=%v", ok, err)
						}
					}
					after := blocks.Stats()
					b.ReportMetric(float64(after.Misses-before.Misses)/float64(b.N), "block-misses/op")
				})
			}
		}
	}
}

func filesKey(i int) []byte { return fmt.Appendf(nil, "user%010d", i) }

// openFilesTablet returns a tablet (no commit log) of rows rows, each
// with one 1000-byte version (timestamps 1 to files) in each of files
// SSTables.
func openFilesTablet(b *testing.B, rows, files int, cache *sstable.Cache, blockSize int) *tablet.Tablet {
	b.Helper()
	ctx := context.Background()
	store, err := blob.NewLocal(filepath.Join(b.TempDir(), "store"))
	if err != nil {
		b.Fatal(err)
	}
	t, err := tablet.Open(ctx, tablet.Options{ID: "files",
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}},
			LocalityGroups: map[string]tabletdesc.LocalityGroup{tabletdesc.DefaultLocalityGroup: {BlockSize: blockSize}}},
		Store: store, Dir: "tablets/files", Cache: cache,
		StateStore: tablet.NewBlobStateStore(store, "state"), MaxSSTables: 100, MemtableBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { t.Close() })
	r := rand.New(rand.NewPCG(1, 1))
	val := make([]byte, 1000)
	for v := 1; v <= files; v++ {
		for i := range rows {
			for j := range val {
				val[j] = byte(r.Uint32())
			}
			if err := t.Apply(ctx, cell.RowMutation{Row: filesKey(i), Mutations: []cell.Mutation{cell.Set("f", nil, int64(v), val)}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := t.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return t
}
