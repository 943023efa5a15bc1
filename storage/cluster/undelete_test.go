package cluster_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/master"
)

// adminConn is a raw admin client on srv, for the RPCs the official
// client's AdminClient lacks (UndeleteTable).
func adminConn(t *testing.T, srv *devtest.Server) adminpb.BigtableTableAdminClient {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminpb.NewBigtableTableAdminClient(conn)
}

const devInstance = "projects/" + devtest.Project + "/instances/" + devtest.Instance

// wantCode fails the test unless err has code and names field.
func wantCode(t *testing.T, what string, err error, code codes.Code, field string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), field) {
		t.Fatalf("%s: got %v, want %v naming %q", what, err, code, field)
	}
}

// TestDevUndeleteTable deletes a table with a schema (a GC rule, an
// aggregate family), an authorized view and cells both flushed and in the
// memtable, while the sweep runs every 5 ms; the table is gone (NOT_FOUND,
// not listed, its name refused to CreateTable and RestoreTable), and
// UndeleteTable brings it back whole, cell by cell, and writable.
func TestDevUndeleteTable(t *testing.T) {
	dir := t.TempDir()
	srv := devtest.StartT(t, cluster.DevConfig{Dir: dir, SweepInterval: 5 * time.Millisecond, SweepGrace: 100 * time.Millisecond,
		MemtableBytes: 16 << 10, UndeleteRetention: time.Hour})
	ctx := devtest.Context(t)
	adm := adminConn(t, srv)
	if err := srv.Admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"k5"}, ColumnFamilies: map[string]bigtable.Family{
		"a":   {GCPolicy: bigtable.MaxVersionsPolicy(2)},
		"sum": {ValueType: bigtable.AggregateType{Input: bigtable.Int64Type{}, Aggregator: bigtable.SumAggregator{}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{TableID: "t", AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("k1")}}}); err != nil {
		t.Fatal(err)
	}
	tbl := srv.Data.Open("t")
	for i := range 400 {
		m := bigtable.NewMutation()
		m.Set("a", "q", bigtable.Timestamp(1000*(i%3+1)), []byte(fmt.Sprintf("v%d-%s", i, strings.Repeat("x", 100))))
		m.AddIntToCell("sum", "n", 0, int64(i))
		if err := tbl.Apply(ctx, fmt.Sprintf("k%d", (i*7919)%200), m); err != nil {
			t.Fatal(err)
		}
	}
	before := srv.CellDump(t, "t")
	infoBefore, err := srv.Admin.TableInfo(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Admin.TableInfo(ctx, "t"); status.Code(err) != codes.NotFound {
		t.Fatalf("GetTable of a deleted table: %v, want NOT_FOUND", err)
	}
	if names, err := srv.Admin.Tables(ctx); err != nil || slices.Contains(names, "t") {
		t.Fatalf("ListTables after the deletion: %v, %v", names, err)
	}
	if _, err := tbl.ReadRow(ctx, "k1"); status.Code(err) != codes.NotFound {
		t.Fatalf("ReadRow of a deleted table: %v, want NOT_FOUND", err)
	}
	wantCode(t, "CreateTable of a restorable name", srv.Admin.CreateTable(ctx, "t"), codes.FailedPrecondition, "table_id")
	if err := srv.Admin.CreateTable(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Admin.CreateBackup(ctx, "src", "c1", "bk", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RestoreTable into a restorable name", srv.Admin.RestoreTable(ctx, "t", "c1", "bk"), codes.FailedPrecondition, "table_id")
	// The sweep runs many rounds: the record keeps every file.
	time.Sleep(300 * time.Millisecond)

	op, err := adm.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: devInstance + "/tables/t"})
	if err != nil {
		t.Fatal(err)
	}
	if !op.GetDone() || op.GetError() != nil {
		t.Fatalf("UndeleteTable's operation: %v", op)
	}
	var got adminpb.Table
	if err := op.GetResponse().UnmarshalTo(&got); err != nil || got.GetName() != devInstance+"/tables/t" {
		t.Fatalf("UndeleteTable's table: %v, %v", &got, err)
	}
	var md adminpb.UndeleteTableMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil || md.GetName() != devInstance+"/tables/t" || md.GetEndTime() == nil {
		t.Fatalf("UndeleteTable's metadata: %v, %v", &md, err)
	}
	if after := srv.CellDump(t, "t"); !slices.Equal(after, before) {
		t.Fatalf("the undeleted table differs: %d cells, want %d\n%s", len(after), len(before), firstDiff(after, before))
	}
	infoAfter, err := srv.Admin.TableInfo(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	byName := func(a, b bigtable.FamilyInfo) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(infoBefore.FamilyInfos, byName)
	slices.SortFunc(infoAfter.FamilyInfos, byName)
	if len(infoBefore.FamilyInfos) != 2 || fmt.Sprint(infoAfter.FamilyInfos) != fmt.Sprint(infoBefore.FamilyInfos) {
		t.Fatalf("families after the undelete: %+v, want %+v", infoAfter.FamilyInfos, infoBefore.FamilyInfos)
	}
	if views, err := srv.Admin.AuthorizedViews(ctx, "t"); err != nil || !slices.Equal(views, []string{"v"}) {
		t.Fatalf("authorized views after the undelete: %v, %v", views, err)
	}
	m := bigtable.NewMutation()
	m.AddIntToCell("sum", "n", 0, 1000)
	if err := tbl.Apply(ctx, "k1", m); err != nil {
		t.Fatalf("writing to the undeleted table: %v", err)
	}
	wantCode(t, "UndeleteTable of a table that exists", func() error {
		_, err := adm.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: devInstance + "/tables/t"})
		return err
	}(), codes.AlreadyExists, "name")
	wantCode(t, "UndeleteTable of a table never deleted", func() error {
		_, err := adm.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: devInstance + "/tables/never"})
		return err
	}(), codes.NotFound, "name")
	wantCode(t, "UndeleteTable of a bad name", func() error {
		_, err := adm.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: "tables/t"})
		return err
	}(), codes.InvalidArgument, "name")

	// Deleted and undeleted again, after a restart: the record is in the
	// store, not in memory.
	before = srv.CellDump(t, "t")
	if err := srv.Admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv = devtest.StartT(t, cluster.DevConfig{Dir: dir, SweepInterval: 5 * time.Millisecond, SweepGrace: 100 * time.Millisecond, UndeleteRetention: time.Hour})
	time.Sleep(200 * time.Millisecond)
	if _, err := adminConn(t, srv).UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: devInstance + "/tables/t"}); err != nil {
		t.Fatal(err)
	}
	if after := srv.CellDump(t, "t"); !slices.Equal(after, before) {
		t.Fatalf("undeleted after a restart: %s", firstDiff(after, before))
	}
}

// TestDevUndeleteRetentionEnds: past the retention the record expires, the
// sweep collects the table's files, UndeleteTable is NOT_FOUND naming
// `name`, and the name may be used again.
func TestDevUndeleteRetentionEnds(t *testing.T) {
	dir := t.TempDir()
	srv := devtest.StartT(t, cluster.DevConfig{Dir: dir, SweepInterval: 5 * time.Millisecond, SweepGrace: 50 * time.Millisecond,
		MemtableBytes: 16 << 10, UndeleteRetention: 300 * time.Millisecond})
	ctx := devtest.Context(t)
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	srv.CreateTable(t, "t", []string{"f", "g"})
	srv.WriteRows(t, "t", devtest.Rows(300))
	if err := srv.Admin.DeleteTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(ctx, "tables/dev/t/")
	if err != nil || len(objs) == 0 {
		t.Fatalf("the deleted table's files right after the deletion: %d, %v (the record keeps them)", len(objs), err)
	}
	wantCode(t, "CreateTable within the retention", srv.Admin.CreateTable(ctx, "t"), codes.FailedPrecondition, "table_id")
	deadline := time.Now().Add(30 * time.Second)
	for {
		objs, err := store.List(ctx, "tables/dev/t/")
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files of the table are left long after its retention ended", len(objs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if recs, err := store.List(ctx, "dropped/"); err != nil || len(recs) != 0 {
		t.Fatalf("dropped-table records after the retention: %v, %v", recs, err)
	}
	_, err = adminConn(t, srv).UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: devInstance + "/tables/t"})
	wantCode(t, "UndeleteTable past the retention", err, codes.NotFound, "name")
	if err := srv.Admin.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("CreateTable after the retention: %v", err)
	}
}

// TestDevRestoreByReference: a restored table's tablets reference the
// backup's SSTables (nothing under its own directory until it writes), and
// those files outlive the source table and the backup while the sweep runs
// every 5 ms — kept by the restored table's own references alone: the
// pending markers that keep them for a while after the restore (see
// master.PendingPrefix) are deleted first, as their expiry would.
func TestDevRestoreByReference(t *testing.T) {
	dir := t.TempDir()
	srv := devtest.StartT(t, cluster.DevConfig{Dir: dir, SweepInterval: 5 * time.Millisecond, SweepGrace: 50 * time.Millisecond, MemtableBytes: 16 << 10})
	ctx := devtest.Context(t)
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	srv.CreateTable(t, "src", []string{"f", "g"}, devtest.SplitKeys(600, 3)...)
	srv.WriteRows(t, "src", devtest.Rows(600))
	atBackup := srv.CellDump(t, "src")
	if err := srv.Admin.CreateBackup(ctx, "src", "c1", "bk", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Admin.RestoreTable(ctx, "r", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	if objs, err := store.List(ctx, "tables/dev/r/"); err != nil || len(objs) != 0 {
		t.Fatalf("the restored table has %d files of its own (%v): RestoreTable copied", len(objs), err)
	}
	if got := srv.CellDump(t, "r"); !slices.Equal(got, atBackup) {
		t.Fatalf("restored: %s", firstDiff(got, atBackup))
	}
	// Writes to the source after the backup: files only the source has
	// (flushed when it is dropped).
	srv.WriteRows(t, "src", devtest.Rows(300))
	raw, err := store.Get(ctx, master.BackupsPrefix+"dev/bk.json")
	if err != nil {
		t.Fatal(err)
	}
	var manifest master.BackupManifest
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	// A second backup flushes them.
	if err := srv.Admin.CreateBackup(ctx, "src", "c1", "bk2", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	all, err := store.List(ctx, "tables/dev/src/")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Admin.DeleteTable(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"bk", "bk2"} {
		if err := srv.Admin.DeleteBackup(ctx, "c1", b); err != nil {
			t.Fatal(err)
		}
	}
	marks, err := store.List(ctx, master.PendingPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range marks {
		if err := store.Delete(ctx, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // many sweeps past the grace
	left, err := store.List(ctx, "tables/dev/src/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range left {
		names = append(names, o.Name)
	}
	want := slices.Sorted(slices.Values(manifest.Files()))
	want = slices.Compact(want)
	if !slices.Equal(names, want) || len(all) <= len(want) {
		t.Fatalf("the source's files after it and the backup were deleted: %q (of %d), want only those the restored table references, %q", names, len(all), want)
	}
	if got := srv.CellDump(t, "r"); !slices.Equal(got, atBackup) {
		t.Fatalf("the restored table after its source and backup were deleted: %s", firstDiff(got, atBackup))
	}
	// The restored table lives on: writes, flushes and compactions write
	// its own files, and the shared ones stop being referenced by it.
	srv.WriteRows(t, "r", devtest.Rows(50))
	if err := srv.Admin.CreateBackup(ctx, "r", "c1", "bk3", time.Now().Add(7*time.Hour)); err != nil { // flushes
		t.Fatal(err)
	}
	if objs, err := store.List(ctx, "tables/dev/r/"); err != nil || len(objs) == 0 {
		t.Fatalf("the restored table wrote no file of its own: %d, %v", len(objs), err)
	}
}

// TestDevListBackupsPages: filter, order and pages through the official
// admin RPC, and a page token ListBackups did not issue refused.
func TestDevListBackupsPages(t *testing.T) {
	srv := devtest.StartT(t, cluster.DevConfig{})
	ctx := devtest.Context(t)
	adm := adminConn(t, srv)
	srv.CreateTable(t, "a", []string{"f"})
	srv.CreateTable(t, "b", []string{"f"})
	for i, table := range []string{"a", "b", "a", "b", "a"} {
		if err := srv.Admin.CreateBackup(ctx, table, "c", fmt.Sprintf("bk%d", i), time.Now().Add(7*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	list := func(filter, order string) []string {
		t.Helper()
		var out []string
		req := &adminpb.ListBackupsRequest{Parent: devInstance + "/clusters/-", Filter: filter, OrderBy: order, PageSize: 2}
		for pages := 1; ; pages++ {
			resp, err := adm.ListBackups(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetBackups()) > 2 {
				t.Fatalf("page %d has %d backups, page_size 2", pages, len(resp.GetBackups()))
			}
			for _, b := range resp.GetBackups() {
				out = append(out, b.GetName()[strings.LastIndex(b.GetName(), "/")+1:])
			}
			if resp.GetNextPageToken() == "" {
				return out
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	if got := list("", "name"); !slices.Equal(got, []string{"bk0", "bk1", "bk2", "bk3", "bk4"}) {
		t.Fatalf("by name: %v", got)
	}
	if got := list("", ""); !slices.Equal(got, []string{"bk4", "bk3", "bk2", "bk1", "bk0"}) {
		t.Fatalf("newest first: %v", got)
	}
	if got := list("source_table:b", "name desc"); !slices.Equal(got, []string{"bk3", "bk1"}) {
		t.Fatalf("of table b, by name descending: %v", got)
	}
	_, err := adm.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: devInstance + "/clusters/-", PageToken: "bk2"})
	wantCode(t, "a page token ListBackups did not issue", err, codes.InvalidArgument, "page_token")
	_, err = adm.ListBackups(ctx, &adminpb.ListBackupsRequest{Parent: devInstance + "/clusters/-", Filter: "size_bytes > lots"})
	wantCode(t, "a bad filter", err, codes.InvalidArgument, "filter")
}
