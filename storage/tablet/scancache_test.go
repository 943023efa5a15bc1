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

func TestDoorkeeperAdmitsOnTheSecondMiss(t *testing.T) {
	var d doorkeeper
	d.init(1 << 20)
	for h := range uint64(100) {
		h *= 0x9e3779b97f4a7c15
		if d.seen(h) {
			t.Fatalf("hash %x: seen before it was recorded", h)
		}
		if !d.seen(h) {
			t.Fatalf("hash %x: not seen after it was recorded", h)
		}
	}
}

func TestDoorkeeperForgetsAfterItsWindow(t *testing.T) {
	var d doorkeeper
	d.init(1 << 20) // 1024 rows of 1 KiB until sizes are known
	window := d.window.Load()
	if window != 1024 {
		t.Fatalf("window %d, want 1024 (1 MiB of 1 KiB rows)", window)
	}
	const first = 0xdeadbeef12345678
	d.seen(first)
	for i := range uint64(window - 2) {
		d.seen((i + 1) * 0x9e3779b97f4a7c15)
	}
	if !d.seen(first) { // the window's last miss but one
		t.Fatal("forgotten inside the window")
	}
	d.seen(0x1234) // the window's last miss: the filter is cleared
	if d.seen(first) {
		t.Fatal("still seen after the window ended")
	}
}

func TestDoorkeeperWindowFollowsRowSize(t *testing.T) {
	var d doorkeeper
	d.init(64 << 20)
	for range 10 {
		d.givenRow(64 << 10)
	}
	d.clear()
	if got := d.window.Load(); got != 1024 {
		t.Fatalf("window %d after rows of 64 KiB, want 1024 (64 MiB / 64 KiB)", got)
	}
	for range 10_000 {
		d.givenRow(16) // tiny rows: the window stops at its longest
	}
	d.clear()
	if got, want := d.window.Load(), int64(64<<20/doorkeeperRowBytes); got != want {
		t.Fatalf("window %d after tiny rows, want the longest, %d", got, want)
	}
}

// TestScanCacheTakesRowsReadAgain: a point read's first miss leaves the
// row out of the scan cache, its second puts it in, and the third is a
// hit — with the same cells each time.
func TestScanCacheTakesRowsReadAgain(t *testing.T) {
	ctx := context.Background()
	store, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScanCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	tb, err := Open(ctx, Options{ID: "sc", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Cache: sstable.NewCache(1 << 20), ScanCache: sc,
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for v := range 3 { // three files, a version of every row in each
		for i := range 20 {
			m := cell.RowMutation{Row: fmt.Appendf(nil, "r%02d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), int64(v+1), fmt.Appendf(nil, "v%d-%d", i, v))}}
			if err := tb.Apply(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		row, ok, err := tb.ReadRow(ctx, []byte("r07"), ReadOptions{})
		if err != nil || !ok {
			t.Fatalf("read: ok=%v err=%v", ok, err)
		}
		sc.c.Wait() // ristretto admits asynchronously
		return cellsString(row.Cells)
	}
	want := "f:q@3=v7-2 f:q@2=v7-1 f:q@1=v7-0 "
	for i, st := range []ScanCacheStats{{Misses: 1}, {Misses: 2}, {Hits: 1, Misses: 2}} {
		if got := read(); got != want {
			t.Fatalf("read %d: %s, want %s", i+1, got, want)
		}
		if got := sc.Stats(); got != st {
			t.Fatalf("after read %d: %+v, want %+v", i+1, got, st)
		}
	}
}
