package tablet

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestRedoPointMovesWithTheTablet moves a tablet cleanly from one server's
// log to another's (reopened with the new Log and no LogOptions, as a
// server that takes over a cleanly unloaded tablet does), writes, crashes,
// and recovers from the new log: the redo point must be a position in the
// new log, or the replay would start at the old log's (larger) position
// and skip the write made after the move.
func TestRedoPointMovesWithTheTablet(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	states := NewBlobStateStore(store, "state")
	openLog := func(dir string) (*commitlog.Log, commitlog.Options) {
		opts := commitlog.Options{Dir: dir}
		lg, err := commitlog.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		return lg, opts
	}
	options := func(lg *commitlog.Log, replay commitlog.Options) Options {
		return Options{ID: "moved", Store: store, Dir: "tables/x", StateStore: states,
			Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}, Log: lg, LogOptions: replay}
	}
	write := func(tb *Tablet, row string) {
		t.Helper()
		err := tb.Apply(ctx, cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, []byte(row+"-value-padding-padding"))}})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Server A: enough writes that A's log tail is well past where B's
	// first record will be.
	l1, _ := openLog(filepath.Join(t.TempDir(), "a"))
	defer l1.Close()
	tb, err := Open(ctx, options(l1, commitlog.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		write(tb, fmt.Sprintf("before-%02d", i))
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}

	// Server B takes it over: no replay needed (A flushed on close).
	dirB := filepath.Join(t.TempDir(), "b")
	l2, l2opts := openLog(dirB)
	tb, err = Open(ctx, options(l2, commitlog.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tb.State().RedoPoint, l2.Tail(); got != want {
		t.Fatalf("redo point after the move %+v, want B's log tail %+v", got, want)
	}
	write(tb, "after")
	tb.abandon() // B crashes: "after" is only in B's log
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}

	// B restarts and recovers from its own log.
	l2, _ = openLog(dirB)
	defer l2.Close()
	tb, err = Open(ctx, options(l2, l2opts))
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for _, row := range []string{"before-00", "before-49", "after"} {
		if _, ok, err := tb.ReadRow(ctx, []byte(row), ReadOptions{}); err != nil || !ok {
			t.Fatalf("row %q after recovery: found %v, err %v", row, ok, err)
		}
	}
}
