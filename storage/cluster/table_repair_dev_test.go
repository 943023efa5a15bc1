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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestDevHidesAndFinishesHalfRestoredTable: a table whose creation by
// reference was cut short after its catalog entry (Restoring) and its
// first METADATA row — as a RestoreTable killed then leaves it — is
// hidden from the official client (GetTable and reads NOT_FOUND, not in
// ListTables) and its tablet is not served; the next start finishes it,
// and it equals the backup cell by cell. A RestoreTable that is not cut
// short gives a table readable as soon as its operation is done.
func TestDevHidesAndFinishesHalfRestoredTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}
	d, err := StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	data, admin, closeClients := devClientsFor(t, ctx, d.Addr())
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "src", SplitKeys: []string{"k3", "k6"},
		Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte(fmt.Sprint(i)))
		m.Set("f", "q", 2000, []byte(fmt.Sprint("v2-", i)))
		if err := data.Open("src").Apply(ctx, fmt.Sprintf("k%d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	want := cellDump(t, ctx, data, "src")
	if err := admin.CreateBackup(ctx, "src", "c", "bk", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := admin.RestoreTable(ctx, "whole", "c", "bk"); err != nil {
		t.Fatal(err)
	}
	if got := cellDump(t, ctx, data, "whole"); !slices.Equal(got, want) {
		t.Fatalf("restored table: %v, want %v", got, want)
	}

	// "half": the states, the Restoring entry and the first METADATA row
	// of a restore of the same backup (copies of whole's), as a kill
	// after the first row leaves them.
	whole, err := d.master.catalog().Get(ctx, meta.TableID{Instance: "i", Table: "whole"})
	if err != nil {
		t.Fatal(err)
	}
	half := whole
	half.ID.Table = "half"
	half.Restoring = true
	half.Tablets = nil
	for _, ref := range whole.Tablets {
		st, err := d.states.Load(ctx, ref.ID)
		if err != nil {
			t.Fatal(err)
		}
		st.ID = "half-" + ref.ID
		if err := d.states.Save(ctx, st); err != nil {
			t.Fatal(err)
		}
		half.Tablets = append(half.Tablets, meta.TabletRef{ID: st.ID, Start: ref.Start, End: ref.End})
	}
	if err := d.master.catalog().Create(ctx, half); err != nil {
		t.Fatal(err)
	}
	rm, err := meta.StateMutation(half.ID, refTablets(half)[0], cell.ServerTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.master.cl.Apply(ctx, meta.MetadataTableName, rm); err != nil {
		t.Fatal(err)
	}
	d.master.loop.Poke()
	time.Sleep(300 * time.Millisecond) // rounds that must not assign it

	if _, err := admin.TableInfo(ctx, "half"); status.Code(err) != codes.NotFound {
		t.Fatalf("GetTable of a half-restored table: %v, want NOT_FOUND", err)
	}
	tables, err := admin.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tables, "half") || !slices.Contains(tables, "whole") {
		t.Fatalf("ListTables: %q, want whole and not half", tables)
	}
	for _, key := range []string{"k0", "k5"} { // the tablet with a row, one without
		if _, err := data.Open("half").ReadRow(ctx, key); status.Code(err) != codes.NotFound {
			t.Fatalf("reading %s of a half-restored table: %v, want NOT_FOUND", key, err)
		}
	}
	// The name is taken: restoring into it again is ALREADY_EXISTS, saying why.
	if err := admin.RestoreTable(ctx, "half", "c", "bk"); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "being restored") {
		t.Fatalf("RestoreTable into a half-restored table's name: %v, want ALREADY_EXISTS saying it is being restored", err)
	}
	for _, table := range d.host.Tables() {
		if table == half.ID && len(d.host.TableTablets(table)) > 0 {
			t.Fatalf("a tablet of the half-restored table is served: %v", d.host.TableTablets(table))
		}
	}
	closeClients()

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = StartDev(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	data, admin, closeClients = devClientsFor(t, ctx, d.Addr())
	defer closeClients()
	if _, err := admin.TableInfo(ctx, "half"); err != nil {
		t.Fatalf("the finished table: %v", err)
	}
	if got := cellDump(t, ctx, data, "half"); !slices.Equal(got, want) {
		t.Fatalf("the finished table: %v, want %v", got, want)
	}
	if got := cellDump(t, ctx, data, "src"); !slices.Equal(got, want) {
		t.Fatalf("the source table: %v, want %v", got, want)
	}
	if e, err := d.master.catalog().Get(ctx, half.ID); err != nil || e.Restoring {
		t.Fatalf("catalog entry: Restoring %v (%v)", e.Restoring, err)
	}
}

func devClientsFor(t *testing.T, ctx context.Context, addr string) (*bigtable.Client, *bigtable.AdminClient, func()) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	return data, admin, func() { data.Close(); admin.Close(); conn.Close() }
}

// cellDump reads table whole: every cell as row|column|timestamp|value,
// sorted.
func cellDump(t *testing.T, ctx context.Context, data *bigtable.Client, table string) []string {
	t.Helper()
	var out []string
	if err := data.Open(table).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%s|%s|%d|%s", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
