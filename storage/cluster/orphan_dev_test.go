package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestDevUnloadsOrphanedTablets: a deleted table's tablet its deletion
// did not reach — here its METADATA row and catalog entry are removed
// behind its server's back, as a deletion leaves it whose unloads failed
// (the server unreachable then) or raced a load there — is unloaded by
// the master once METADATA, read whole, has lacked it for OrphanAfter,
// and a table created again under the name is served. Before, the tablet
// was served for ever, and the new table's creation waited for its
// tablet until it gave up: the master assigns nothing that overlaps
// tablets a server reports and METADATA lacks.
func TestDevUnloadsOrphanedTablets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), orphanAfter: 2 * time.Second}
	d, err := StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	data, admin, closeClients := devClientsFor(t, ctx, d.Addr())
	defer closeClients()
	createT := func() {
		t.Helper()
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(1)}}); err != nil {
			t.Fatal(err)
		}
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte("v"))
		if err := data.Open("t").Apply(ctx, "r", m); err != nil {
			t.Fatal(err)
		}
	}
	createT()
	id := meta.TableID{Instance: "i", Table: "t"}
	rows, err := d.master.md.tableRows(ctx, id)
	if err != nil || len(rows) != 1 {
		t.Fatalf("METADATA rows of t: %v, %v", rows, err)
	}
	if err := d.master.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: rows[0].MetadataKey(), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	if err := d.master.catalog().Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	servedOfT := func() []string {
		var out []string
		for _, st := range d.server.host.ServedTablets() {
			if st.Table == id {
				out = append(out, st.ID)
			}
		}
		return out
	}
	if got := servedOfT(); len(got) != 1 || got[0] != rows[0].TabletID {
		t.Fatalf("served of t after its rows went: %q, want its tablet %s still (the test's premise)", got, rows[0].TabletID)
	}
	for len(servedOfT()) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("the orphaned tablet %s is still served", rows[0].TabletID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	createT()
	r, err := data.Open("t").ReadRow(ctx, "r")
	if err != nil || len(r["f"]) != 1 || string(r["f"][0].Value) != "v" {
		t.Fatalf("the table created again: %v, %v", r, err)
	}
}
