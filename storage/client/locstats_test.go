package client

import (
	"context"
	"testing"

	"github.com/tabuladb/tabula/storage/meta"
)

// TestLocateStats: Stats counts what each lookup read and how far up the
// hierarchy it went — three levels for a cold lookup of a user row, one
// for a moved user tablet, two for a METADATA row; nothing for a hit;
// more reads (not levels) when a lookup key falls after the last row of
// the METADATA tablet holding it.
func TestLocateStats(t *testing.T) {
	ctx := context.Background()
	h := newTestHierarchy()
	c := NewLocationCache(LocationCacheOptions{Prefetch: 2})
	want := LocateStats{}
	check := func(what string) {
		t.Helper()
		if got := c.Stats(); got != want {
			t.Fatalf("%s: stats %+v, want %+v", what, got, want)
		}
	}
	check("new cache")

	// Cold: the lock service, the root tablet, METADATA tablet M1.
	if _, err := c.Locate(ctx, h, tabA, []byte("a")); err != nil {
		t.Fatal(err)
	}
	want = LocateStats{Lookups: 1, Reads: 3, ByLevels: [4]uint64{3: 1}, MaxLevels: 3, MaxReads: 3}
	check("cold lookup")

	// A prefetched neighbour: a hit, no read.
	if _, err := c.Locate(ctx, h, tabA, []byte("f")); err != nil {
		t.Fatal(err)
	}
	check("hit")

	// The user tablet moved: one read of its METADATA tablet.
	old, _ := c.Lookup(tabA, []byte("d"))
	moved := old
	moved.Server, moved.Epoch = "u9", 30
	h.put(moved)
	c.Invalidate(old)
	if _, err := c.Locate(ctx, h, tabA, []byte("d")); err != nil {
		t.Fatal(err)
	}
	want.Lookups, want.Reads, want.ByLevels[1] = 2, 4, 1
	check("moved tablet")

	// The lookup key of row "h" is in M1, its tablet's row in M2 (M1 does
	// not end between two rows): M1 is read, then M2 (its location
	// prefetched with M1's): two reads, one level.
	if _, err := c.Locate(ctx, h, tabA, []byte("h")); err != nil {
		t.Fatal(err)
	}
	want.Lookups, want.Reads, want.ByLevels[1] = 3, 6, 2
	check("lookup key past M1's last row")

	// A METADATA row, on a fresh cache: the lock service and the root.
	c2 := NewLocationCache(LocationCacheOptions{})
	if _, err := c2.Locate(ctx, h, meta.MetadataTable, meta.MetadataLookupKey(tabB, nil)); err != nil {
		t.Fatal(err)
	}
	if got, w := c2.Stats(), (LocateStats{Lookups: 1, Reads: 2, ByLevels: [4]uint64{2: 1}, MaxLevels: 2, MaxReads: 2}); got != w {
		t.Fatalf("METADATA row: stats %+v, want %+v", got, w)
	}
}
