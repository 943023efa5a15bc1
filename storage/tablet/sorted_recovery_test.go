package tablet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestOpenFromSortedLog crashes a server whose tablets share one commit log
// (small segments; two tablets flushed midway, so redo points and flushed
// sequences differ), then recovers every tablet twice from copies of the
// store: replaying the log itself, and from its sorted copy. Both must
// hold the same rows, which are the rows written.
func TestOpenFromSortedLog(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	deadLog := commitlog.Options{Store: store, Prefix: "logs/dead", SegmentBytes: 4 << 10}
	lg, err := commitlog.Open(ctx, deadLog)
	if err != nil {
		t.Fatal(err)
	}
	bounds := []string{"", "g", "n", "t", ""}
	schema := tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}
	options := func(i int, st blob.Store, l *commitlog.Log) Options {
		var end []byte
		if bounds[i+1] != "" {
			end = []byte(bounds[i+1])
		}
		return Options{ID: fmt.Sprintf("tab-%d", i), Start: []byte(bounds[i]), End: end, Store: st,
			Dir: fmt.Sprintf("tables/x/%d", i), StateStore: NewBlobStateStore(st, "state"), Schema: schema,
			Log: l, Logger: slog.New(slog.DiscardHandler)}
	}
	tabs := make([]*Tablet, len(bounds)-1)
	for i := range tabs {
		if tabs[i], err = Open(ctx, options(i, store, lg)); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]map[string]string, len(tabs))
	for i := range want {
		want[i] = make(map[string]string)
	}
	for n := range 400 {
		row := fmt.Sprintf("%c%03d", 'a'+n%26, n%37)
		value := fmt.Sprintf("v%d-padding-to-fill-segments", n)
		i := 0
		for i+1 < len(tabs) && row >= bounds[i+1] {
			i++
		}
		m := cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, []byte(value))}}
		if n%11 == 0 {
			m.Mutations = []cell.Mutation{cell.DeleteRow()}
			delete(want[i], row)
		} else {
			want[i][row] = value
		}
		if err := tabs[i].Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
		if n == 150 || n == 320 {
			if err := tabs[n%len(tabs)].Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tb := range tabs {
		tb.abandon() // the server dies: nothing more is flushed
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tabs[2].State(); st.RedoPoint == (tabletdesc.LogPosition{}) {
		t.Fatal("tablet 2 was flushed but has no redo point")
	}

	raw, sorted := copyStore(t, store), copyStore(t, store)
	sortedCopy := commitlog.SortedLog{Store: sorted, Prefix: "sortedlogs/dead"}
	stats, err := commitlog.Sort(ctx, commitlog.Options{Store: sorted, Prefix: deadLog.Prefix}, sortedCopy)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) < 4 {
		t.Fatalf("the log has %d segments; the test wants several", len(stats))
	}

	recover := func(i int, st blob.Store, sortedLog commitlog.SortedLog) (map[string]string, error) {
		opts := options(i, st, nil)
		opts.LogOptions = commitlog.Options{Store: st, Prefix: deadLog.Prefix}
		opts.SortedLog = sortedLog
		tb, err := Open(ctx, opts)
		if err != nil {
			return nil, err
		}
		defer tb.Close()
		rows := make(map[string]string)
		err = tb.Scan(ctx, ScanOptions{}, func(r cell.Row) error {
			rows[string(r.Key)] = string(r.Cells[0].Value)
			return nil
		})
		return rows, err
	}
	for i := range tabs {
		fromLog, err := recover(i, raw, commitlog.SortedLog{})
		if err != nil {
			t.Fatal(err)
		}
		fromSorted, err := recover(i, sorted, sortedCopy)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromSorted, fromLog) || !reflect.DeepEqual(fromLog, want[i]) {
			t.Fatalf("tablet %d: %d rows from the sorted copy, %d from the log, %d written", i, len(fromSorted), len(fromLog), len(want[i]))
		}
	}
}

// TestOpenFromIncompleteSortedLog: a sorted copy missing a segment the
// tablet needs fails Open rather than lose the segment's writes.
func TestOpenFromIncompleteSortedLog(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	logOpts := commitlog.Options{Store: store, Prefix: "logs/dead", SegmentBytes: 1 << 10}
	lg, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{ID: "only", Store: store, Dir: "tables/y", StateStore: NewBlobStateStore(store, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}, Log: lg, Logger: slog.New(slog.DiscardHandler)}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 50 {
		m := cell.RowMutation{Row: fmt.Appendf(nil, "r%02d", n), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, make([]byte, 100))}}
		if err := tb.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	tb.abandon()
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	sortedCopy := commitlog.SortedLog{Store: store, Prefix: "sortedlogs/dead"}
	stats, err := commitlog.Sort(ctx, logOpts, sortedCopy)
	if err != nil || len(stats) < 2 {
		t.Fatalf("%d segments, %v", len(stats), err)
	}
	if err := store.Delete(ctx, fmt.Sprintf("sortedlogs/dead/%020d.sorted", stats[1].Segment)); err != nil {
		t.Fatal(err)
	}
	opts.Log, opts.LogOptions, opts.SortedLog = nil, logOpts, sortedCopy
	if _, err := Open(ctx, opts); !errors.Is(err, commitlog.ErrNotSorted) {
		t.Fatalf("Open from a sorted copy without segment %d: %v, want ErrNotSorted", stats[1].Segment, err)
	}
}

// copyStore returns a memory store holding a copy of every object of src.
func copyStore(t *testing.T, src blob.Store) blob.Store {
	t.Helper()
	ctx := context.Background()
	dst := blob.NewMemory()
	objs, err := src.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		data, err := src.Get(ctx, o.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.Put(ctx, o.Name, data); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
