package tablet

import (
	"context"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestApplyBatch checks the bulk path: entries fail alone, mutations of one
// row keep their order, and what was acknowledged survives a crash (the
// tablet abandoned without a flush, then reopened from the log).
func TestApplyBatch(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	logDir := t.TempDir()
	log, err := commitlog.Open(ctx, commitlog.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		ID: "batch", Start: []byte("b"), End: []byte("y"), Store: store, Dir: "sst", Log: log,
		LogOptions: commitlog.Options{Dir: logDir}, StateStore: NewBlobStateStore(store, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
	}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	set := func(row, value string) cell.RowMutation {
		return cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 10, []byte(value))}}
	}
	errs := tb.ApplyBatch(ctx, []cell.RowMutation{
		set("c", "1"),
		{Row: []byte("d"), Mutations: []cell.Mutation{cell.Set("nosuch", nil, 1, nil)}},
		set("a", "outside"),
		{Row: []byte("e")}, // no mutations
		set("c", "2"),      // same row, later: wins at the same timestamp
		set("f", "3"),
		{Row: []byte("f"), Mutations: []cell.Mutation{cell.DeleteRow()}},
	})
	wantErr := []error{nil, ErrFamilyNotFound, tabletdesc.ErrNotServing, cell.ErrInvalidArgument, nil, nil, nil}
	for i, want := range wantErr {
		if (want == nil) != (errs[i] == nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Fatalf("entry %d: got %v, want %v", i, errs[i], want)
		}
	}
	check := func(tb *Tablet, when string) {
		t.Helper()
		r, ok, err := tb.ReadRow(ctx, []byte("c"), ReadOptions{})
		if err != nil || !ok || len(r.Cells) != 1 || string(r.Cells[0].Value) != "2" {
			t.Fatalf("%s: row c = %+v, %v, %v; want the one value 2", when, r, ok, err)
		}
		for _, row := range []string{"d", "f"} {
			if _, ok, err := tb.ReadRow(ctx, []byte(row), ReadOptions{}); ok || err != nil {
				t.Fatalf("%s: row %s exists (err %v)", when, row, err)
			}
		}
	}
	check(tb, "after the batch")
	// Crash: no flush, no close; the log holds the acknowledged entries.
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	log2, err := commitlog.Open(ctx, commitlog.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	defer log2.Close()
	opts.Log = log2
	tb2, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb2.Close()
	check(tb2, "after recovery")
}
