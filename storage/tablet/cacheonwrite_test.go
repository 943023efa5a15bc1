package tablet

import (
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestFlushCachesItsBlocks: the rows a flush just wrote are read from the
// block cache, every data block of the new files already there, while a
// merge's output is read from its file (the merge offers the cache
// nothing).
func TestFlushCachesItsBlocks(t *testing.T) {
	ctx := context.Background()
	store, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache := sstable.NewCache(64 << 20)
	defer cache.Close()
	tb, err := Open(ctx, Options{ID: "t", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Cache: cache, Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	const rows = 300
	value := make([]byte, 1000)
	write := func(version int64) {
		t.Helper()
		for i := range rows {
			m := cell.RowMutation{Row: fmt.Appendf(nil, "r%04d", i), Mutations: []cell.Mutation{cell.Set("f", nil, version, value)}}
			if err := tb.Apply(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() sstable.CacheStats {
		t.Helper()
		cache.Wait()
		before := cache.Stats()
		for i := range rows {
			row := fmt.Appendf(nil, "r%04d", i)
			got, ok, err := tb.ReadRow(ctx, row, ReadOptions{MaxVersions: 1})
			if err != nil || !ok || len(got.Cells) != 1 {
				t.Fatalf("row %s: %v, %v, %d cells", row, ok, err, len(got.Cells))
			}
		}
		after := cache.Stats()
		return sstable.CacheStats{Hits: after.Hits - before.Hits, Misses: after.Misses - before.Misses}
	}

	write(1)
	write(2)
	if s := readAll(); s.Misses != 0 || s.Hits == 0 {
		t.Fatalf("reads of two flushed files: %+v, want every block from the cache", s)
	}
	if err := tb.Compact(ctx, false); err != nil {
		t.Fatal(err)
	}
	if n := tb.Stats().Groups["default"].SSTables; n != 1 {
		t.Fatalf("%d SSTables after the merge, want 1", n)
	}
	if s := readAll(); s.Misses == 0 {
		t.Fatalf("reads of a merge's output: %+v, want its blocks read from the file", s)
	}
}
