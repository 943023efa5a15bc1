package tablet

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestAggregateFamilyRecreated: a family dropped and created again as an
// aggregate one in a single schema change starts empty — its plain cells
// are not folded as states — through a flush, a major compaction and a
// reopen.
func TestAggregateFamilyRecreated(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	opts := Options{ID: "agg", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(tb *Tablet, m cell.Mutation) {
		t.Helper()
		if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{m}}); err != nil {
			t.Fatal(err)
		}
	}
	apply(tb, cell.Set("f", []byte("c"), 1000, []byte("plain, not a state")))
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	apply(tb, cell.Set("f", []byte("c"), 1000, []byte("x")))
	opts.Schema = tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {Aggregate: cell.Sum}}}
	if err := tb.SetSchema(ctx, opts.Schema); err != nil {
		t.Fatal(err)
	}
	apply(tb, cell.Add("f", []byte("c"), 1000, 7))
	apply(tb, cell.Add("f", []byte("c"), 1000, 5))
	check := func(tb *Tablet, when string) {
		t.Helper()
		r, ok, err := tb.ReadRow(ctx, []byte("r"), ReadOptions{})
		if err != nil || !ok || len(r.Cells) != 1 || int64(binary.BigEndian.Uint64(r.Cells[0].Value)) != 12 {
			t.Fatalf("%s: %v %v %v, want f:c = 12", when, r, ok, err)
		}
	}
	check(tb, "in the memtable")
	if err := tb.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	check(tb, "after a major compaction")
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err = Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	check(tb, "after a reopen")
}
