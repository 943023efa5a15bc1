package tablet

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// countingStore counts the SSTables opened and closed.
type countingStore struct {
	blob.Store
	opens, closes atomic.Int64
}

func (s *countingStore) Open(ctx context.Context, name string) (blob.Object, error) {
	o, err := s.Store.Open(ctx, name)
	if err == nil && strings.HasSuffix(name, ".sst") {
		s.opens.Add(1)
		o = &countedObject{Object: o, closes: &s.closes}
	}
	return o, err
}

type countedObject struct {
	blob.Object
	closes *atomic.Int64
}

func (o *countedObject) Close() error {
	o.closes.Add(1)
	return o.Object.Close()
}

// TestSplitChildrenAdoptParentFiles: children opened with the parent's
// SplitResult.Files open none of the files they share with it (an
// in-memory group's included), read what the parent held, and every file
// is closed once both children close and the result is released.
func TestSplitChildrenAdoptParentFiles(t *testing.T) {
	ctx := context.Background()
	local, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: local}
	schema := tabletdesc.Schema{
		Families:       map[string]tabletdesc.Family{"f": {}, "m": {LocalityGroup: "mem"}},
		LocalityGroups: map[string]tabletdesc.LocalityGroup{"mem": {InMemory: true}},
	}
	opts := func(id string) Options {
		return Options{ID: id, Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
			Cache: sstable.NewCache(1 << 20), Schema: schema}
	}
	parent, err := Open(ctx, opts("p"))
	if err != nil {
		t.Fatal(err)
	}
	for v := range 2 { // two files in each group
		for i := range 40 {
			row := fmt.Appendf(nil, "r%02d", i)
			m := cell.RowMutation{Row: row, Mutations: []cell.Mutation{
				cell.Set("f", nil, int64(v+1), fmt.Appendf(nil, "f%d-%d", i, v)),
				cell.Set("m", nil, int64(v+1), fmt.Appendf(nil, "m%d-%d", i, v)),
			}}
			if err := parent.Apply(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := parent.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	res, err := parent.Split(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opened := store.opens.Load()
	var children []*Tablet
	for _, id := range []string{res.Left.ID, res.Right.ID} {
		o := opts(id)
		o.Adopt = res.Files
		tb, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		children = append(children, tb)
	}
	res.Files.Release()
	if n := store.opens.Load() - opened; n != 0 {
		t.Fatalf("the children opened %d files they share with their parent", n)
	}
	for i := range 40 {
		row := fmt.Appendf(nil, "r%02d", i)
		tb := children[0]
		if !tb.Contains(row) {
			tb = children[1]
		}
		got, ok, err := tb.ReadRow(ctx, row, ReadOptions{MaxVersions: 1})
		want := fmt.Sprintf("f:@2=f%d-1 m:@2=m%d-1 ", i, i)
		if err != nil || !ok || cellsString(got.Cells) != want {
			t.Fatalf("row %s: %v %q (%v), want %q", row, ok, cellsString(got.Cells), err, want)
		}
	}
	for _, tb := range children {
		if err := tb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if o, c := store.opens.Load(), store.closes.Load(); o != c {
		t.Fatalf("%d files opened, %d closed: the adopted files leak", o, c)
	}
}
