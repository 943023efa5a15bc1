package tablet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestBackgroundMergesCollect: the background's merge of some of a
// group's SSTables drops the versions the GC policy collects among them
// and what their markers shadow, and keeps the markers, for the older
// files; its merge of all of them drops what a major compaction drops,
// markers included. Reads are the same before and after each.
func TestBackgroundMergesCollect(t *testing.T) {
	ctx := context.Background()
	tb, _ := openOneVersion(t, Options{MaxSSTables: 100})
	// Five files: every round rewrites rows r0–r9 with a newer
	// timestamp; round 3 deletes r5's column and r7 whole; round 4
	// deletes r8 and writes it no more.
	for round := int64(1); round <= 5; round++ {
		for i := range 10 {
			rm := cell.RowMutation{Row: fmt.Appendf(nil, "r%d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), round*1000, fmt.Appendf(nil, "v%d.%d", i, round))}}
			switch {
			case round == 3 && i == 5:
				rm.Mutations = append(rm.Mutations, cell.DeleteColumn("f", []byte("q"), 0, 0))
			case round == 3 && i == 7:
				rm.Mutations = append(rm.Mutations, cell.DeleteRow())
			case round == 4 && i == 8:
				rm.Mutations = []cell.Mutation{cell.DeleteRow()}
			case round == 5 && i == 8:
				continue
			}
			if err := tb.Apply(ctx, rm); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string { return scanString(t, tb) }
	want := read()
	if !strings.Contains(want, "r7:f:q@5000=v7.5") || !strings.Contains(want, "r5:f:q@5000=v5.5") || strings.Contains(want, "r8") {
		t.Fatalf("the writes after the deletes are missing, or r8 is not deleted:\n%s", want)
	}
	// 48 writes, r5's column marker, r7's and r8's row markers.
	if n, e := fileEntries(t, tb); n != 5 || e != 51 {
		t.Fatalf("%d files, %d entries; want 5 and 51", n, e)
	}
	g := tb.groupNames()[0]
	step := func(k int, wantFiles int, wantEntries uint64, wantMerges uint64, what string) {
		t.Helper()
		tb.maintMu.Lock()
		err := tb.autoMergeLocked(ctx, g, k)
		tb.maintMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		n, e := fileEntries(t, tb)
		if n != wantFiles || e != wantEntries || tb.merges.Load() != wantMerges || tb.collectingMerges.Load() != wantMerges || tb.majors.Load() != 0 {
			t.Fatalf("after %s: %d files, %d entries, %d merges (%d collecting), %d majors; want %d, %d, %d (all collecting), 0",
				what, n, e, tb.merges.Load(), tb.collectingMerges.Load(), tb.majors.Load(), wantFiles, wantEntries, wantMerges)
		}
		if got := read(); got != want {
			t.Fatalf("reads changed by the %s:\n got  %s\n want %s", what, got, want)
		}
	}
	// Rounds 5 and 4: nine rows keep their version at 5000 only; r8's
	// marker stays, or r8's older versions would be read again.
	step(2, 4, 51-9, 1, "merge of the newest 2 of 5 files")
	// That and round 3: its writes go (collected, or shadowed by its
	// markers), its two markers stay.
	step(2, 3, 12+10+10, 2, "merge of the newest 2 of 4 files")
	// All: the newest version of the nine live rows, no marker.
	step(3, 1, 9, 3, "merge of all 3 files")
}

func TestNextMajorWait(t *testing.T) {
	for _, u := range []float64{0, 0.25, 0.999999} {
		d, ok := nextMajorWait(time.Hour, u)
		if !ok || d < 30*time.Minute || d >= time.Hour {
			t.Errorf("nextMajorWait(1h, %v) = %v, %v; want in [30m, 1h)", u, d, ok)
		}
	}
	if _, ok := nextMajorWait(-1, 0.5); ok {
		t.Error("a negative interval still schedules majors")
	}
	if d0, _ := nextMajorWait(time.Hour, 0); d0 != 30*time.Minute {
		t.Errorf("the shortest wait is %v, want half the interval", d0)
	}
}

// TestPeriodicMajorCompaction: a tablet that takes no more writes still
// compacts its SSTables into one on its own, dropping deleted and
// collected data, with reads unchanged.
func TestPeriodicMajorCompaction(t *testing.T) {
	ctx := context.Background()
	tb, _ := openOneVersion(t, Options{MajorInterval: 40 * time.Millisecond})
	tb.lockMaint() // no major before the files are written
	for round := int64(1); round <= 3; round++ {
		for i := range 5 {
			rm := cell.RowMutation{Row: fmt.Appendf(nil, "r%d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), round*1000, fmt.Appendf(nil, "v%d", round))}}
			if round == 3 && i == 0 {
				rm.Mutations = []cell.Mutation{cell.DeleteRow()}
			}
			if err := tb.Apply(ctx, rm); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tb.flushLocked(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := scanString(t, tb)
	tb.unlockMaint()
	deadline := time.Now().Add(30 * time.Second)
	for tb.majors.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no periodic major compaction within 30 s at an interval of 40 ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.lockMaint() // the major under way, if another started, ends
	files, entries := fileEntries(t, tb)
	tb.unlockMaint()
	// Left: rows r1–r4 at round 3; r0's row marker and every older
	// version gone.
	if files != 1 || entries != 4 {
		t.Fatalf("after the periodic major: %d files, %d entries; want 1 and 4", files, entries)
	}
	if got := scanString(t, tb); got != want {
		t.Fatalf("reads changed:\n got  %s\n want %s", got, want)
	}
}

// scanString is every row of tb, one line each.
func scanString(t *testing.T, tb *Tablet) string {
	t.Helper()
	var b strings.Builder
	if err := tb.Scan(context.Background(), ScanOptions{}, func(r cell.Row) error {
		b.WriteString(string(r.Key) + ":" + cellsString(r.Cells) + "\n")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// fileEntries counts tb's SSTables and the entries they hold.
func fileEntries(t *testing.T, tb *Tablet) (files int, entries uint64) {
	t.Helper()
	v, _, err := tb.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer v.unref()
	for _, gf := range v.groups {
		for _, f := range gf.files {
			files++
			entries += f.meta.Entries
		}
	}
	return files, entries
}

// TestCloseCutsPeriodicMajorShort: a tablet closing while its periodic
// major compaction waits in the pacer does not wait for the rest of it:
// the compaction is cancelled, the tablet closes, and its data is intact
// when it opens again.
func TestCloseCutsPeriodicMajorShort(t *testing.T) {
	gate := newGatedSleep() // never opened: only a cancellation ends a pacing sleep
	p := pacing.New(pacing.Config{MinRate: 1 << 10, Quiet: time.Hour, Sleep: gate.sleep})
	p.Begin() // a request in flight: background work is paced
	defer p.End()
	ctx := context.Background()
	store := blob.NewMemory()
	opts := Options{ID: "m", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
		MemtableBytes: 1 << 30, Pacer: p}
	open := func(major time.Duration) *Tablet {
		o := opts
		o.MajorInterval = major
		tb, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	tb := open(time.Hour)
	for i := range 200 {
		if err := tb.Apply(ctx, cell.RowMutation{Row: fmt.Appendf(nil, "r%03d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, make([]byte, 1000))}}); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if err := tb.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := scanString(t, tb)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}

	tb = open(10 * time.Millisecond)
	select {
	case <-gate.sleeping:
	case <-time.After(30 * time.Second):
		t.Fatal("no periodic major compaction waited in the pacer")
	}
	closed := make(chan error, 1)
	go func() { closed <- tb.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for a paced periodic major compaction (the pacer's sleep never ends)")
	}
	tb = open(-1)
	defer tb.Close()
	if got := scanString(t, tb); got != want {
		t.Fatalf("rows after the cut-short major:\n got  %s\n want %s", got, want)
	}
	if files, _ := fileEntries(t, tb); files != 2 {
		t.Fatalf("%d files after the cut-short major, want the 2 flushed", files)
	}
}

// TestCollectingMergeHeedsMemtableMarkers: a collecting merge does not
// read the memtable, where a delete of a column's newest version may wait
// for its flush; the version below it is then the newest left, live, and
// the merge must not collect it as the second of two.
func TestCollectingMergeHeedsMemtableMarkers(t *testing.T) {
	ctx := context.Background()
	tb, _ := openOneVersion(t, Options{MaxSSTables: 100})
	for _, rm := range []cell.RowMutation{
		{Row: []byte("a"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("old"))}},
		{Row: []byte("b"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("gone"))}},
		{Row: []byte("a"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 2000, []byte("new"))}},
		{Row: []byte("b"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 2000, []byte("kept"))}},
	} {
		if err := tb.Apply(ctx, rm); err != nil {
			t.Fatal(err)
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// In the memtable only: a's version at 2000 deleted.
	if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("a"), Mutations: []cell.Mutation{cell.DeleteColumn("f", []byte("q"), 2000, 2001)}}); err != nil {
		t.Fatal(err)
	}
	want := scanString(t, tb)
	if !strings.Contains(want, "a:f:q@1000=old") || strings.Contains(want, "gone") {
		t.Fatalf("before the merge: %s", want)
	}
	tb.maintMu.Lock()
	err := tb.autoMergeLocked(ctx, tb.groupNames()[0], 4)
	tb.maintMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := scanString(t, tb); got != want {
		t.Fatalf("reads changed by a collecting merge:\n got  %s\n want %s", got, want)
	}
	// b, with no marker in the memtable, was collected: a's two
	// versions and b's newest are left.
	if n, e := fileEntries(t, tb); n != 1 || e != 3 || tb.collectingMerges.Load() != 1 {
		t.Fatalf("after the merge: %d files, %d entries, %d collecting merges; want 1, 3, 1", n, e, tb.collectingMerges.Load())
	}
}

// openOneVersion opens a tablet over a fresh memory store, its one family
// f keeping one version and its memtable never full; opts sets the other
// options (ID, Store, Dir, StateStore, Schema and MemtableBytes are
// overwritten). The tablet is closed when tb's test ends.
func openOneVersion(tb testing.TB, opts Options) (*Tablet, blob.Store) {
	tb.Helper()
	store := blob.NewMemory()
	opts.ID, opts.Store, opts.Dir, opts.StateStore = "c", store, "sst", NewBlobStateStore(store, "state")
	opts.Schema = tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {GC: tabletdesc.GCPolicy{MaxVersions: 1}}}}
	opts.MemtableBytes = 1 << 30
	t, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { t.Close() })
	return t, store
}
