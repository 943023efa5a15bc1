package tablet

import (
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestReleaseLog has a cold tablet with one write and a hot one sharing a
// log of small segments. ReleaseLog flushes the cold tablet while it holds
// a write, then — idle — only moves its redo point; either way the redo
// point reaches the tail, and the cold tablet's row survives a crash after
// the log was truncated to that redo point.
func TestReleaseLog(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	logOpts := commitlog.Options{Dir: t.TempDir(), SegmentBytes: 4 << 10}
	log, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	states := NewBlobStateStore(store, "state")
	open := func(id string, start, end string, lg *commitlog.Log) *Tablet {
		t.Helper()
		opts := Options{ID: id, Start: []byte(start), Store: store, Dir: "sst/" + id, Log: lg, LogOptions: logOpts,
			StateStore: states, Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}}
		if end != "" {
			opts.End = []byte(end)
		}
		tb, err := Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	cold, hot := open("cold", "", "m", log), open("hot", "m", "", log)
	defer hot.Close()
	write := func(tb *Tablet, row string) {
		t.Helper()
		rm := cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 10, make([]byte, 500))}}
		if err := tb.Apply(ctx, rm); err != nil {
			t.Fatal(err)
		}
	}
	fillSegments := func(n int) {
		t.Helper()
		start := log.Tail().Segment
		for i := 0; log.Tail().Segment < start+uint64(n); i++ {
			write(hot, fmt.Sprintf("r%06d", i))
		}
	}

	write(cold, "c")
	fillSegments(3)
	if p := cold.State().RedoPoint; p.Segment+3 > log.Tail().Segment {
		t.Fatalf("cold redo point %v, tail %v: the test needs it segments behind", p, log.Tail())
	}
	tail := log.Tail()
	if err := cold.ReleaseLog(ctx); err != nil {
		t.Fatal(err)
	}
	st := cold.Stats()
	if st.Flushes != 1 || st.MemtableBytes != 0 {
		t.Fatalf("after ReleaseLog with a write in memory: %d flushes, %d bytes in the memtable; want 1 and 0", st.Flushes, st.MemtableBytes)
	}
	if p := cold.State().RedoPoint; p.Compare(tail) < 0 {
		t.Fatalf("redo point %v after the flush, before the tail %v it was called at", p, tail)
	}

	// Idle now: the redo point follows the tail without another flush.
	fillSegments(2)
	tail = log.Tail()
	if err := cold.ReleaseLog(ctx); err != nil {
		t.Fatal(err)
	}
	if p := cold.State().RedoPoint; p != tail {
		t.Fatalf("idle tablet's redo point %v, want the tail %v", p, tail)
	}
	if st := cold.Stats(); st.Flushes != 1 {
		t.Fatalf("idle tablet flushed again: %d flushes", st.Flushes)
	}
	saved, err := states.Load(ctx, "cold")
	if err != nil || saved.RedoPoint != tail {
		t.Fatalf("saved redo point %v (%v), want %v", saved.RedoPoint, err, tail)
	}

	// Crash, with the log truncated up to the cold tablet's redo point:
	// its row is in its SSTable.
	if err := log.Truncate(ctx, tail); err != nil {
		t.Fatal(err)
	}
	cold.abandon()
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	log2, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer log2.Close()
	reopened := open("cold", "", "m", log2)
	defer reopened.Close()
	if _, ok, err := reopened.ReadRow(ctx, []byte("c"), ReadOptions{}); !ok || err != nil {
		t.Fatalf("row c after the crash: found %v, %v", ok, err)
	}
}

// TestReleaseLogWithoutLog: a tablet without a log has nothing to release.
func TestReleaseLogWithoutLog(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	tb, err := Open(ctx, Options{ID: "nolog", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("a"), Mutations: []cell.Mutation{cell.Set("f", nil, 1, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if err := tb.ReleaseLog(ctx); err != nil {
		t.Fatal(err)
	}
	if st := tb.Stats(); st.Flushes != 0 {
		t.Fatalf("ReleaseLog flushed a tablet without a log (%d flushes)", st.Flushes)
	}
}
