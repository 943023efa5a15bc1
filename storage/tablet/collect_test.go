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

// TestBackgroundMergeOfAllFilesCollects: the background's merge of some of
// a group's SSTables keeps every entry; its merge of all of them drops what
// a major compaction drops — versions the GC policy collects, delete
// markers and what they shadow — and reads are the same before and after
// both.
func TestBackgroundMergeOfAllFilesCollects(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	tb, err := Open(ctx, Options{ID: "c", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {GC: tabletdesc.GCPolicy{MaxVersions: 1}}}},
		MemtableBytes: 1 << 30, MaxSSTables: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	// Five files: every round rewrites rows r0–r9 with a newer
	// timestamp; round 3 deletes r5's column and r7 whole.
	for round := int64(1); round <= 5; round++ {
		for i := range 10 {
			rm := cell.RowMutation{Row: fmt.Appendf(nil, "r%d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), round*1000, fmt.Appendf(nil, "v%d.%d", i, round))}}
			if round == 3 && i == 5 {
				rm.Mutations = append(rm.Mutations, cell.DeleteColumn("f", []byte("q"), 0, 0))
			}
			if round == 3 && i == 7 {
				rm.Mutations = append(rm.Mutations, cell.DeleteRow())
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
	files := func() (int, uint64) { return fileEntries(t, tb) }
	want := read()
	if n, e := files(); n != 5 || e != 52 { // 50 writes, a column and a row marker
		t.Fatalf("%d files, %d entries; want 5 and 52", n, e)
	}
	g := tb.groupNames()[0]
	merge := func(k int) {
		tb.maintMu.Lock()
		defer tb.maintMu.Unlock()
		if err := tb.autoMergeLocked(ctx, g, k); err != nil {
			t.Fatal(err)
		}
	}

	merge(2) // the newest two of five: a plain merge
	if n, e := files(); n != 4 || e != 52 || tb.collectingMerges.Load() != 0 || tb.merges.Load() != 1 {
		t.Fatalf("after merging 2 of 5 files: %d files, %d entries, %d collecting of %d merges; want 4, 52, 0 of 1", n, e, tb.collectingMerges.Load(), tb.merges.Load())
	}
	if got := read(); got != want {
		t.Fatalf("reads changed by a merge:\n got  %s\n want %s", got, want)
	}

	merge(4) // all of them: collected
	// Left: the newest version of each row, r7's two writes after its
	// delete among them.
	if n, e := files(); n != 1 || e != 10 || tb.collectingMerges.Load() != 1 || tb.merges.Load() != 2 || tb.majors.Load() != 0 {
		t.Fatalf("after merging all 4 files: %d files, %d entries, %d collecting of %d merges, %d majors; want 1, 10, 1 of 2, 0", n, e, tb.collectingMerges.Load(), tb.merges.Load(), tb.majors.Load())
	}
	if got := read(); got != want {
		t.Fatalf("reads changed by a collecting merge:\n got  %s\n want %s", got, want)
	}
	if !strings.Contains(want, "r7:f:q@5000=v7.5") || !strings.Contains(want, "r5:f:q@5000=v5.5") {
		t.Fatalf("the writes after the deletes are missing:\n%s", want)
	}
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
	store := blob.NewMemory()
	tb, err := Open(ctx, Options{ID: "m", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {GC: tabletdesc.GCPolicy{MaxVersions: 1}}}},
		MemtableBytes: 1 << 30, MajorInterval: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	tb.maintMu.Lock() // no major before the files are written
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
	tb.maintMu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for tb.majors.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no periodic major compaction within 30 s at an interval of 40 ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.lockMaint() // the major under way, if another started, ends
	files, entries := fileEntries(t, tb)
	tb.maintMu.Unlock()
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
