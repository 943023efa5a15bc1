package tablet

import (
	"context"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestCloseForgetsTheState: a closed tablet leaves nothing in the blob
// state store's per-tablet maps, and opening it again loads its state
// afresh, conditional writes included.
func TestCloseForgetsTheState(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	states := NewBlobStateStore(store, "state")
	bs := states.(*blobStateStore)
	entries := func() int {
		bs.mu.Lock()
		defer bs.mu.Unlock()
		return len(bs.versions) + len(bs.saving)
	}
	opts := Options{ID: "forget", Store: store, Dir: "sst", StateStore: states,
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}}
	for round := range 3 {
		tb, err := Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if entries() == 0 {
			t.Fatalf("round %d: an open tablet has no entry in the state store", round)
		}
		if err := tb.Apply(ctx, cell.RowMutation{Row: []byte{byte('a' + round)}, Mutations: []cell.Mutation{cell.Set("f", nil, 1, []byte("v"))}}); err != nil {
			t.Fatal(err)
		}
		if err := tb.Close(); err != nil {
			t.Fatal(err)
		}
		if n := entries(); n != 0 {
			t.Fatalf("round %d: %d entries left in the state store after Close", round, n)
		}
	}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for _, row := range []string{"a", "b", "c"} {
		if _, ok, err := tb.ReadRow(ctx, []byte(row), ReadOptions{}); !ok || err != nil {
			t.Fatalf("row %s after three close/open rounds: %v %v", row, ok, err)
		}
	}
	// Conditional again: a state written behind its back is not overwritten.
	if err := store.Put(ctx, "state/forget.tablet", []byte(`{"id":"forget"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("d"), Mutations: []cell.Mutation{cell.Set("f", nil, 1, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Flush(ctx); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("flush after another writer saved the state: %v, want ErrStateConflict", err)
	}
}
