package tablet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestFlushCollects: a flush leaves out of its SSTable the older writes of
// a version and the versions a family's GC policy collects among the
// memtable's, and nothing a read could return: not in a family without a
// policy, an aggregate family (whose writes of a timestamp fold), a row
// with a delete marker (in the frozen memtable, or in the newer active one
// while the flush runs), or a family dropped and created again (its older
// entries are hidden, not versions above the new ones). Reads are the same
// before and after.
func TestFlushCollects(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	schema := func(withR bool) tabletdesc.Schema {
		fams := map[string]tabletdesc.Family{
			"f": {GC: tabletdesc.GCPolicy{MaxVersions: 1}},
			"g": {},
			"s": {Aggregate: cell.Sum},
		}
		if withR {
			fams["r"] = tabletdesc.Family{GC: tabletdesc.GCPolicy{MaxVersions: 1}}
		}
		return tabletdesc.Schema{Families: fams}
	}
	tb, err := Open(ctx, Options{ID: "fc", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema: schema(true), MemtableBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	apply := func(row string, ms ...cell.Mutation) {
		t.Helper()
		if err := tb.Apply(ctx, cell.RowMutation{Row: []byte(row), Mutations: ms}); err != nil {
			t.Fatalf("row %s: %v", row, err)
		}
	}
	q := []byte("q")
	// r: a version written before its family was dropped (and hidden by
	// the drop ever since), newer in timestamp than the one written after.
	apply("r", cell.Set("r", q, 5000, []byte("hidden")))
	if err := tb.SetSchema(ctx, schema(false)); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetSchema(ctx, schema(true)); err != nil {
		t.Fatal(err)
	}
	apply("r", cell.Set("r", q, 1000, []byte("live")))
	// a: three versions, one kept. b: one version written twice.
	apply("a", cell.Set("f", q, 1000, []byte("a1")), cell.Set("f", q, 2000, []byte("a2")))
	apply("a", cell.Set("f", q, 3000, []byte("a3")))
	apply("b", cell.Set("f", q, 1000, []byte("first")))
	apply("b", cell.Set("f", q, 1000, []byte("second")))
	// c: no policy. d: the newest version deleted in the same memtable.
	apply("c", cell.Set("g", q, 1000, []byte("c1")), cell.Set("g", q, 2000, []byte("c2")))
	apply("d", cell.Set("f", q, 1000, []byte("d1")), cell.Set("f", q, 2000, []byte("d2")))
	apply("d", cell.DeleteColumn("f", q, 2000, 2001))
	// e: an aggregate's two writes of one timestamp fold into 3.
	apply("e", cell.Add("s", q, 1000, 1))
	apply("e", cell.Add("s", q, 1000, 2))
	// h: two versions, the newest deleted in the next memtable below.
	apply("h", cell.Set("f", q, 1000, []byte("h1")), cell.Set("f", q, 2000, []byte("h2")))

	// Freeze, then delete h's newest version in the new active memtable
	// before the frozen one is flushed (as a write landing while a flush
	// runs does).
	tb.writeMu.Lock()
	tb.freezeLocked()
	tb.writeMu.Unlock()
	apply("h", cell.DeleteColumn("f", q, 2000, 2001))

	want := scanString(t, tb)
	for _, s := range []string{"r:r:q@1000=live", "h:f:q@1000=h1", "d:f:q@1000=d1", "b:f:q@1000=second", "a:f:q@3000=a3"} {
		if !strings.Contains(want, s) {
			t.Fatalf("before the flush, %q is missing from:\n%s", s, want)
		}
	}
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanString(t, tb); got != want {
		t.Fatalf("reads changed by the flush:\n got  %s\n want %s", got, want)
	}
	// Left out: a's two older versions and b's first write. Written:
	// r 2, a 1, b 1, c 2, d 3 (marker and both), e 2, h 2 from the
	// frozen memtable, and h's marker from the active one.
	if got := tb.Stats().FlushCollected; got != 3 {
		t.Errorf("FlushCollected = %d, want 3", got)
	}
	if n, e := fileEntries(t, tb); n != 2 || e != 14 {
		t.Errorf("after the flush: %d files, %d entries; want 2 files, 14 entries", n, e)
	}
	// Reopened from the files alone, the reads are the same.
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err = Open(ctx, Options{ID: "fc", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema: schema(true), MemtableBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if got := scanString(t, tb); got != want {
		t.Fatalf("reads after reopening:\n got  %s\n want %s", got, want)
	}
}

// TestFlushCollectorRanks: the collector's decisions entry by entry, in
// key order, for policies by count and by age and a union of both.
func TestFlushCollectorRanks(t *testing.T) {
	fams := map[string]tabletdesc.Family{
		"two": {GC: tabletdesc.GCPolicy{MaxVersions: 2}},
		"age": {GC: tabletdesc.GCPolicy{MaxAge: time.Millisecond}},
		"any": {GC: tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{MaxVersions: 3}, {MaxAge: time.Millisecond}}}},
	}
	const now = 10_000 // µs
	c := flushCollector{families: fams, now: now}
	set := func(row, fam, qual string, ts int64) cell.Key {
		return cell.Key{Row: []byte(row), Family: fam, Qualifier: []byte(qual), Timestamp: ts, Kind: cell.KindSet}
	}
	steps := []struct {
		k    cell.Key
		skip bool
	}{
		{set("a", "two", "q", 500), false},
		{set("a", "two", "q", 400), false},
		{set("a", "two", "q", 400), true}, // an older write of the second version
		{set("a", "two", "q", 300), true}, // the third
		{set("a", "two", "r", 300), false},
		{set("a", "two", "r", 200), false},
		{set("b", "two", "q", 100), false}, // a new row starts over
		{set("b", "age", "q", 9500), false},
		{set("b", "age", "q", 8000), true}, // older than 1 ms
		{set("c", "any", "q", 9900), false},
		{set("c", "any", "q", 9800), false},
		{set("c", "any", "q", 1), true}, // too old, though third
		{set("c", "any", "q", 0), true}, // fourth
		{cell.Key{Row: []byte("d"), Family: "two", Kind: cell.KindFamilyDelete}, false},
		{set("d", "two", "q", 3), false}, // after a marker in its row: all kept
		{set("d", "two", "q", 2), false},
		{set("d", "two", "q", 1), false},
		{set("e", "none", "q", 2), false}, // a family not in the schema
		{set("e", "none", "q", 1), false},
	}
	for i, s := range steps {
		if got := c.skip(s.k); got != s.skip {
			t.Fatalf("step %d (%s %s:%s@%d kind %d): skip %v, want %v", i, s.k.Row, s.k.Family, s.k.Qualifier, s.k.Timestamp, s.k.Kind, got, s.skip)
		}
	}
	if c.collected != 5 {
		t.Errorf("collected %d, want 5", c.collected)
	}
}
