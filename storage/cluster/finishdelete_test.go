package cluster

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestFinishDeletionsOverMetadata: over METADATA served by a real tablet
// server, the cluster's table host tells a table whose rows are gone (a
// DeleteTable killed between dropping the tablets and deleting the catalog
// entry), and the admin service's FinishDeletions deletes that entry and
// only that one.
func TestFinishDeletionsOverMetadata(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	store := newLocalStore(t)
	catalog := master.NewBlobCatalog(store, "catalog")
	host := &clusterTableHost{catalog: catalog, md: f.md}
	created := time.Now().Add(-time.Hour)
	tables := map[string]meta.Table{}
	for _, name := range []string{"dropped", "served"} {
		tb := meta.Table{ID: meta.TableID{Instance: "i", Table: name}, Created: created,
			Families: map[string]tabletdesc.Family{"f": {}}, Tablets: []meta.TabletRef{{ID: name + "-0"}}}
		if err := catalog.Create(ctx, tb); err != nil {
			t.Fatal(err)
		}
		f.putRow(t, tb.ID, tabletdesc.State{ID: name + "-0"}, f.server.Name(), 1)
		tables[name] = tb
	}
	// What DropTable does to METADATA, and no more: the master died.
	dropped := tables["dropped"]
	rm, err := meta.StateMutation(dropped.ID, tabletdesc.State{ID: "dropped-0"}, cell.ServerTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.server.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: rm.Row, Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"dropped": true, "served": false} {
		if gone, err := host.TabletsDropped(ctx, tables[name]); err != nil || gone != want {
			t.Fatalf("TabletsDropped(%s) = %v, %v; want %v", name, gone, err, want)
		}
	}

	svc, err := master.NewAdminService(master.Options{Catalog: catalog, Host: host, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := svc.FinishDeletions(ctx, CreationInProgressFor)
	if err != nil || n != 1 {
		t.Fatalf("FinishDeletions: %d, %v; want 1 finished", n, err)
	}
	if _, err := catalog.Get(ctx, dropped.ID); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("the dropped table's entry: %v, want it deleted", err)
	}
	if _, err := catalog.Get(ctx, tables["served"].ID); err != nil {
		t.Fatalf("the served table's entry: %v", err)
	}
}
