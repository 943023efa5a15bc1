package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestDevRunsClusterRoles: `tabula dev` is the cluster's master and one
// tablet server: the master holds the master lock at dev's address, the
// server its key; the table's tablets — after splits, committed by the
// server as in a cluster — are METADATA's rows, each located at the
// server, and exactly the tablets it serves; a restart (a new server
// name) finds every row, its tablets now located at the new server.
func TestDevRunsClusterRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := DevConfig{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), MemtableBytes: 8 << 10, SplitBytes: 24 << 10}
	d, err := StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	if e, err := d.kv.Get(ctx, coord.KeyMaster); err != nil || e.Session == "" || string(e.Value) != d.Addr() {
		t.Fatalf("master key: %+v (%v), want held, naming %s", e, err, d.Addr())
	}
	if e, err := d.kv.Get(ctx, coord.ServerKey(d.server.Name())); err != nil || e.Session == "" {
		t.Fatalf("the server's key: %+v (%v), want held", e, err)
	}

	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	id := meta.TableID{Instance: "i", Table: "t"}
	const rows = 400
	value := []byte(strings.Repeat("v", 200))
	for i := 0; i < rows; i++ {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, value)
		if err := data.Open("t").Apply(ctx, fmt.Sprintf("row%04d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	// The splits are committed to METADATA: its rows for the table are
	// the tablets the server serves, each located there.
	for {
		served := tabletIDs(d)
		inMeta, located := metadataTabletIDs(t, ctx, d, id)
		if len(served) > 1 && slices.Equal(served, inMeta) && located {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("served %v, METADATA %v (all located at %s: %v)", served, inMeta, d.server.Name(), located)
		case <-time.After(20 * time.Millisecond):
		}
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	old := d.server.Name()
	if d, err = StartDev(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if d.server.Name() == old {
		t.Fatalf("the restarted server kept the name %s", old)
	}
	// (A split may still be committing: the tablets may still be big.)
	for {
		inMeta, located := metadataTabletIDs(t, ctx, d, id)
		if located && slices.Equal(inMeta, tabletIDs(d)) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after the restart: METADATA %v, served %v, located at %s: %v", inMeta, tabletIDs(d), d.server.Name(), located)
		case <-time.After(20 * time.Millisecond):
		}
	}
	conn2, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	data2, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn2))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := data2.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		if r.Key() != fmt.Sprintf("row%04d", n) || len(r["f"]) != 1 || string(r["f"][0].Value) != string(value) {
			t.Errorf("row %d: %v", n, r)
		}
		n++
		return true
	}); err != nil || n != rows {
		t.Fatalf("read %d rows (%v), want %d", n, err, rows)
	}
}

// tabletIDs are the IDs of the tablets of i/t the dev's server serves, in
// key order.
func tabletIDs(d *Dev) []string {
	var out []string
	for _, ti := range d.host.TableTablets(meta.TableID{Instance: "i", Table: "t"}) {
		out = append(out, ti.ID)
	}
	return out
}

// metadataTabletIDs are the IDs of table id's tablets in METADATA, in key
// order, and whether each is located at the dev's server.
func metadataTabletIDs(t *testing.T, ctx context.Context, d *Dev, id meta.TableID) ([]string, bool) {
	t.Helper()
	locs, err := d.master.md.tableRows(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	located := true
	for _, l := range locs {
		out = append(out, l.TabletID)
		located = located && l.Server == d.server.Name()
	}
	return out, located
}

// TestDevRestoresMissingMetadataRows: a table whose METADATA rows do not
// cover it — a creation (RestoreTable's, say) cut short by a kill between
// its catalog entry and its last row — gets the missing rows at the next
// start, and every row written before is there.
func TestDevRestoresMissingMetadataRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	d, err := StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"row1", "row2"}, Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"row0", "row1", "row2", "row3"}
	for _, k := range keys {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte(k))
		if err := data.Open("t").Apply(ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	id := meta.TableID{Instance: "i", Table: "t"}
	rows, err := d.master.md.tableRows(ctx, id)
	if err != nil || len(rows) != 3 {
		t.Fatalf("METADATA rows: %v (%v), want 3", rows, err)
	}
	// The middle tablet's row is lost, as if its write never happened.
	if err := d.master.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: rows[1].MetadataKey(), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = StartDev(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if rows, err := d.master.md.tableRows(ctx, id); err != nil || !locationsCover(rows) || len(rows) != 3 {
		t.Fatalf("METADATA rows after the restart: %v (%v), want 3 covering the table", rows, err)
	}
	conn, err = grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data, err = bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := data.Open("t").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		got = append(got, string(r["f"][0].Value))
		return true
	}); err != nil || !slices.Equal(got, keys) {
		t.Fatalf("rows after the restart: %v (%v), want %v", got, err, keys)
	}
}

func TestLocationsCoverAndOverlap(t *testing.T) {
	loc := func(start, end string) meta.Location {
		l := meta.Location{Start: []byte(start)}
		if end != "" {
			l.End = []byte(end)
		}
		return l
	}
	for _, c := range []struct {
		rows  []meta.Location
		cover bool
	}{
		{nil, false},
		{[]meta.Location{loc("", "")}, true},
		{[]meta.Location{loc("", "m"), loc("m", "")}, true},
		{[]meta.Location{loc("", "m"), loc("n", "")}, false},
		{[]meta.Location{loc("a", "")}, false},
		{[]meta.Location{loc("", "m")}, false},
	} {
		if got := locationsCover(c.rows); got != c.cover {
			t.Errorf("locationsCover(%v) = %v, want %v", c.rows, got, c.cover)
		}
	}
	rows := []meta.Location{loc("", "c"), loc("m", "p")}
	for _, c := range []struct {
		start, end string
		want       bool
	}{
		{"c", "m", false}, {"b", "d", true}, {"p", "", false}, {"o", "", true}, {"d", "e", false}, {"", "a", true},
	} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		if got := overlapsAny(rows, []byte(c.start), end); got != c.want {
			t.Errorf("overlapsAny([%q, %q)) = %v, want %v", c.start, c.end, got, c.want)
		}
	}
}
