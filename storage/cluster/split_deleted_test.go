package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// TestSplitOfDeletedTableUnloadsChildren: a split that raced its table's
// deletion — DeleteTable removed the METADATA rows and unloaded the
// tablets it listed, the parent among them, while the parent was
// becoming two children — cannot be committed, and its server unloads
// the children instead of retrying for ever. Found with `tabula bench`
// against a one-server cluster: the bench drops its table at the end,
// a split finished at that moment, its children stayed served, and the
// next run's table of the same name was never served ("its 1 tablets
// were not all served within 1m0s"): the master assigns nothing that
// overlaps tablets a server reports and METADATA lacks. A split whose
// parent's row is merely missing while the table lives (its own parent's
// split not yet in METADATA) keeps its children and is retried.
func TestSplitOfDeletedTableUnloadsChildren(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after runs once the parent serves: what happened to the table
		// before the split is committed.
		after    func(t *testing.T, f *metadataFixture, tbl meta.Table)
		wantGone bool
	}{
		{name: "deleted", wantGone: true, after: func(t *testing.T, f *metadataFixture, tbl meta.Table) {
			f.deleteRow(t, tbl.ID, nil)
			if err := NewCoordCatalog(f.md.kv).Delete(context.Background(), tbl.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "deleted and created again", wantGone: true, after: func(t *testing.T, f *metadataFixture, tbl meta.Table) {
			ctx := context.Background()
			cat := NewCoordCatalog(f.md.kv)
			if err := cat.Delete(ctx, tbl.ID); err != nil {
				t.Fatal(err)
			}
			again := tbl
			again.Created = tbl.Created.Add(time.Minute)
			again.Tablets = []meta.TabletRef{{ID: "T"}}
			if err := cat.Create(ctx, again); err != nil {
				t.Fatal(err)
			}
			f.putRow(t, tbl.ID, tabletdesc.State{ID: "T"}, "", 0) // the new table's tablet, not yet served
		}},
		{name: "parent's row not yet written", wantGone: false, after: func(t *testing.T, f *metadataFixture, tbl meta.Table) {
			f.deleteRow(t, tbl.ID, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newMetadataFixture(t)
			tbl := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
				Tablets: []meta.TabletRef{{ID: "P"}}, Created: time.Now().UTC().Truncate(time.Millisecond)}
			if err := NewCoordCatalog(f.md.kv).Create(ctx, tbl); err != nil {
				t.Fatal(err)
			}
			f.putRow(t, tbl.ID, tabletdesc.State{ID: "P"}, f.server.Name(), 3)
			if err := f.server.host.LoadTablet(ctx, tbl, meta.TabletRef{ID: "P"}, tabletserver.ReplayLog{}); err != nil {
				t.Fatal(err)
			}
			tc.after(t, f, tbl)

			children, err := f.server.host.SplitTabletAt(ctx, tbl.ID, "P", []byte("m"))
			if err != nil {
				t.Fatal(err)
			}
			var served []string
			for _, st := range f.server.host.ServedTablets() {
				if st.Table == tbl.ID {
					served = append(served, st.ID)
				}
			}
			switch {
			case tc.wantGone && len(served) != 0:
				t.Fatalf("tablets %q of the deleted table still served after its split; want its children %s and %s unloaded", served, children[0].ID, children[1].ID)
			case !tc.wantGone && len(served) != 2:
				t.Fatalf("tablets %q served after the split of a live table whose commit must wait; want both children", served)
			}
		})
	}
}

// deleteRow deletes the METADATA row of table's tablet ending at end
// (nil: the last tablet).
func (f *metadataFixture) deleteRow(t *testing.T, table meta.TableID, end []byte) {
	t.Helper()
	rm := cell.RowMutation{Row: meta.MetadataRowKey(table, end), Mutations: []cell.Mutation{cell.DeleteRow()}}
	if err := f.server.cl.Apply(context.Background(), meta.MetadataTableName, rm); err != nil {
		t.Fatal(err)
	}
}
