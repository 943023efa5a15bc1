package tablet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestIdleMergeCount(t *testing.T) {
	files := func(sizes ...int64) []*tableFile {
		var fs []*tableFile
		for _, s := range sizes {
			fs = append(fs, &tableFile{meta: tabletdesc.FileMeta{Size: s}})
		}
		return fs
	}
	for _, tc := range []struct {
		sizes []int64 // newest first
		want  int
	}{
		{nil, 0},
		{[]int64{64}, 1},
		{[]int64{64, 64, 64}, 3},
		// A big old file stays until enough piles up in front of it.
		{[]int64{64, 1024}, 1},
		{[]int64{64, 64, 1024}, 2},
		{[]int64{64, 64, 64, 64, 1024}, 5},
		{[]int64{64, 256}, 2},
		{[]int64{64, 257}, 1},
		// A small newest file takes in small ones behind it, not what
		// follows them.
		{[]int64{1, 2, 100}, 2},
	} {
		if got := idleMergeCountOf(files(tc.sizes...)); got != tc.want {
			t.Errorf("sizes %v: %d, want %d", tc.sizes, got, tc.want)
		}
	}
}

// TestMergeWhileIdle: a tablet asked for an idle-time merge merges the
// files size-tiering lets go together — three of a kind, not the big old
// one behind them — and reads the same rows after; asked again with one
// file left, it does nothing.
func TestMergeWhileIdle(t *testing.T) {
	ctx := context.Background()
	tb, _ := openOneVersion(t, Options{MaxSSTables: 100})
	write := func(round int64, rows int) {
		for i := range rows {
			rm := cell.RowMutation{Row: fmt.Appendf(nil, "r%04d", i), Mutations: []cell.Mutation{
				cell.Set("f", []byte("q"), round*1000, fmt.Appendf(nil, "v%d.%d", i, round))}}
			if err := tb.Apply(ctx, rm); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(1, 2000) // the big old file
	for round := int64(2); round <= 4; round++ {
		write(round, 100)
	}
	want := scanString(t, tb)
	if n, _ := fileEntries(t, tb); n != 4 {
		t.Fatalf("%d files before, want 4", n)
	}
	waitFiles := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, _ := fileEntries(t, tb)
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d files, want %d", n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	tb.MergeWhileIdle()
	waitFiles(2)
	if got := scanString(t, tb); got != want {
		t.Fatalf("reads changed by the idle-time merge:\n got  %s\n want %s", got, want)
	}
	merges := tb.merges.Load()
	if merges != 1 {
		t.Fatalf("%d merges, want 1", merges)
	}
	// Two files left: the merged 300 rows' worth and the 2,000-row one,
	// more than idleMergeRatio times bigger. Nothing to do.
	tb.MergeWhileIdle()
	time.Sleep(50 * time.Millisecond)
	tb.maintMu.Lock() // the background loop is done with the request
	tb.maintMu.Unlock()
	if n, _ := fileEntries(t, tb); n != 2 || tb.merges.Load() != merges {
		t.Fatalf("%d files and %d merges after a second request, want 2 and %d", n, tb.merges.Load(), merges)
	}
	// Without a request, a flush leaves the files as they are (MaxSSTables
	// is far).
	write(5, 100)
	time.Sleep(50 * time.Millisecond)
	if n, _ := fileEntries(t, tb); n != 3 {
		t.Fatalf("%d files after a flush without an idle request, want 3", n)
	}
}
