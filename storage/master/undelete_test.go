package master

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestSweepKeepsDroppedTablesAndMarkedFiles: the sweep keeps the files of a
// dropped-table record until it expires, then deletes the record and the
// files; a pending marker naming files keeps them until it is older than
// PendingMarkerTTL.
func TestSweepKeepsDroppedTablesAndMarkedFiles(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	now := time.Now()
	old := now.Add(-time.Hour)
	var (
		dropped = sstName("tables/i/t", old, 1)
		marked  = sstName("tables/i/u", old, 2)
		loose   = sstName("tables/i/u", old, 3)
	)
	for _, n := range []string{dropped, marked, loose} {
		if err := store.Put(ctx, n, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	rec := DroppedTable{Table: meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}}, Deleted: now, ExpireTime: now.Add(time.Hour),
		Tablets: []tabletdesc.State{{ID: "t-1", Groups: map[string][]tabletdesc.FileMeta{"": {{Name: dropped}}}}}}
	if err := putDropped(ctx, store, rec); err != nil {
		t.Fatal(err)
	}
	if err := putPendingFiles(ctx, store, pendingName("i", "restore-u-1"), []string{marked}, now); err != nil {
		t.Fatal(err)
	}
	got, err := SweepFiles(ctx, store, "tables/", nil, time.Minute, now)
	if err != nil || !slices.Equal(got, []string{loose}) {
		t.Fatalf("within the retention: deleted %v, %v; want only %s", got, err, loose)
	}
	// Past the marker's TTL, within the record's retention.
	later := now.Add(PendingMarkerTTL + time.Minute)
	got, err = SweepFiles(ctx, store, "tables/", nil, time.Minute, later)
	if err != nil || !slices.Equal(got, []string{marked}) {
		t.Fatalf("past the marker's TTL: deleted %v, %v; want only %s", got, err, marked)
	}
	if _, err := store.Get(ctx, droppedName(rec.Table.ID, rec.Deleted)); err != nil {
		t.Fatalf("the record within its retention: %v", err)
	}
	// A table of the same name, created and deleted again later: its
	// record is another object, which the expiry of the first spares.
	again := sstName("tables/i/t", now.Add(90*time.Minute), 4)
	if err := store.Put(ctx, again, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec2 := rec
	rec2.Deleted, rec2.ExpireTime = now.Add(100*time.Minute), now.Add(3*time.Hour)
	rec2.Tablets = []tabletdesc.State{{ID: "t-2", Groups: map[string][]tabletdesc.FileMeta{"": {{Name: again}}}}}
	if err := putDropped(ctx, store, rec2); err != nil {
		t.Fatal(err)
	}
	// Past the first retention: its record goes, then its files.
	got, err = SweepFiles(ctx, store, "tables/", nil, time.Minute, now.Add(2*time.Hour))
	if err != nil || !slices.Equal(got, []string{dropped}) {
		t.Fatalf("past the retention: deleted %v, %v; want %s", got, err, dropped)
	}
	if _, err := store.Get(ctx, droppedName(rec.Table.ID, rec.Deleted)); !blob.IsNotExist(err) {
		t.Fatalf("the expired record: %v, want it deleted", err)
	}
	if _, err := store.Get(ctx, droppedName(rec2.Table.ID, rec2.Deleted)); err != nil {
		t.Fatalf("the later deletion's record: %v", err)
	}
}

// TestFinalStates follows split children to the leaves and refuses states
// that do not cover the table.
func TestFinalStates(t *testing.T) {
	ctx := context.Background()
	states := tablet.NewBlobStateStore(blob.NewMemory(), "states")
	for _, st := range []tabletdesc.State{
		{ID: "a", End: []byte("m"), SplitInto: []string{"a1", "a2"}},
		{ID: "a1", End: []byte("f")},
		{ID: "a2", Start: []byte("f"), End: []byte("m")},
		{ID: "b", Start: []byte("m")},
	} {
		if err := states.Save(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	got, err := finalStates(ctx, states, []tabletdesc.State{{ID: "a"}, {ID: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range got {
		ids = append(ids, st.ID)
	}
	if !slices.Equal(ids, []string{"a1", "a2", "b"}) {
		t.Fatalf("final states %v, want a1 a2 b", ids)
	}
	if _, err := finalStates(ctx, states, []tabletdesc.State{{ID: "a"}}); err == nil {
		t.Fatal("states covering [\"\", m) only were accepted")
	}
	if _, err := finalStates(ctx, states, []tabletdesc.State{{ID: "a"}, {ID: "nope"}}); err == nil {
		t.Fatal("a missing state was accepted")
	}
}

// crashHost is a fakeTableHost whose flush fails and whose METADATA may
// have no row of the table: what a master killed mid-DeleteTable leaves.
type crashHost struct {
	*fakeTableHost
	dropped bool
}

func (h *crashHost) FlushTableStates(context.Context, meta.Table) ([]tabletdesc.State, error) {
	return nil, errors.New("rows from \"\" are not served")
}

func (h *crashHost) TabletsDropped(context.Context, meta.Table) (bool, error) { return h.dropped, nil }

// TestDeleteFinishesAnInterruptedDeletion: a flush that fails deletes
// nothing, unless the tablets are gone and a live record of this very
// table exists (a deletion interrupted after its commit point), when the
// deletion is finished and that record kept.
func TestDeleteFinishesAnInterruptedDeletion(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	host := &crashHost{fakeTableHost: newFakeTableHost()}
	catalog := NewBlobCatalog(store, "catalog")
	svc, err := NewAdminService(Options{Catalog: catalog, Host: host, Store: store, States: tablet.NewBlobStateStore(store, "states"),
		UndeleteRetention: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "t"}); err != nil {
		t.Fatal(err)
	}
	id := meta.TableID{Instance: "i", Table: "t"}
	del := func() error {
		_, err := svc.DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: "projects/p/instances/i/tables/t"})
		return err
	}
	exists := func() bool {
		_, err := catalog.Get(ctx, id)
		return err == nil
	}
	// The flush fails and nothing says the tablets are gone.
	wantCode(t, "a failed flush", del(), codes.Unavailable)
	if !exists() {
		t.Fatal("a failed flush deleted the table")
	}
	tbl, err := catalog.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The tablets are gone but no record: still nothing deleted.
	host.dropped = true
	wantCode(t, "tablets gone without a record", del(), codes.Unavailable)
	// A record of another incarnation (an older generation): nothing.
	old := DroppedTable{Table: tbl, Deleted: time.Now(), ExpireTime: time.Now().Add(time.Hour)}
	old.Table.Tablets = nil
	old.Table.Generation--
	if err := putDropped(ctx, store, old); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "a record of another generation", del(), codes.Unavailable)
	if !exists() {
		t.Fatal("deleted on another incarnation's record")
	}
	// The record of this table, written before its tablets were dropped.
	rec := old
	rec.Table.Generation = tbl.Generation
	rec.Deleted = time.Now().Add(time.Second)
	if err := putDropped(ctx, store, rec); err != nil {
		t.Fatal(err)
	}
	if err := del(); err != nil {
		t.Fatalf("finishing the interrupted deletion: %v", err)
	}
	if exists() {
		t.Fatal("the interrupted deletion was not finished")
	}
	got, live, err := svc.restorable(ctx, id)
	if err != nil || !live || got.object != droppedName(id, rec.Deleted) {
		t.Fatalf("the record after finishing: %q live %v, %v; want %q kept", got.object, live, err, droppedName(id, rec.Deleted))
	}
}

// flushingHost is a BackupHost whose tables flush to states without files.
type flushingHost struct{ *fakeTableHost }

func (h flushingHost) FlushTableStates(_ context.Context, t meta.Table) ([]tabletdesc.State, error) {
	var out []tabletdesc.State
	for _, r := range t.Tablets {
		out = append(out, tabletdesc.State{ID: r.ID, Start: r.Start, End: r.End})
	}
	return out, nil
}

// TestUndeleteCutShortIsHiddenThenFinished: an undelete whose tablets
// failed to open after its catalog entry was written (a kill there) leaves
// the entry Restoring — GetTable NOT_FOUND, not in ListTables — and the
// next UndeleteTable finishes it (the table comes back, the record goes);
// once finished, UndeleteTable is ALREADY_EXISTS.
func TestUndeleteCutShortIsHiddenThenFinished(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	host := flushingHost{newFakeTableHost()}
	catalog := NewBlobCatalog(store, "catalog")
	svc, err := NewAdminService(Options{Catalog: catalog, Host: host, Store: store, States: tablet.NewBlobStateStore(store, "states"),
		UndeleteRetention: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	const name = "projects/p/instances/i/tables/t"
	if _, err := svc.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "t",
		InitialSplits: []*adminpb.CreateTableRequest_Split{{Key: []byte("m")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	undelete := func() error {
		_, err := svc.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: name})
		return err
	}
	visible := func() bool {
		t.Helper()
		_, gerr := svc.GetTable(ctx, &adminpb.GetTableRequest{Name: name})
		list, err := svc.ListTables(ctx, &adminpb.ListTablesRequest{Parent: "projects/p/instances/i"})
		if err != nil {
			t.Fatal(err)
		}
		if (gerr == nil) != (len(list.GetTables()) == 1) {
			t.Fatalf("GetTable %v but ListTables %v", gerr, list.GetTables())
		}
		if gerr != nil {
			wantCode(t, "GetTable of a hidden table", gerr, codes.NotFound)
		}
		return gerr == nil
	}
	host.fail["OpenTable"] = errors.New("killed")
	if err := undelete(); err == nil {
		t.Fatal("undelete with tablets that fail to open succeeded")
	}
	id := meta.TableID{Instance: "i", Table: "t"}
	if e, err := catalog.Get(ctx, id); err != nil || !e.Restoring || len(e.Tablets) != 2 {
		t.Fatalf("the entry left: %+v (%v), want Restoring with 2 tablets", e, err)
	}
	if visible() {
		t.Fatal("a half-undeleted table is visible")
	}
	delete(host.fail, "OpenTable")
	if err := undelete(); err != nil {
		t.Fatalf("undelete finishing the one cut short: %v", err)
	}
	if !visible() {
		t.Fatal("the finished table is not visible")
	}
	if e, err := catalog.Get(ctx, id); err != nil || e.Restoring {
		t.Fatalf("the finished entry: Restoring %v (%v)", e.Restoring, err)
	}
	if _, live, err := svc.restorable(ctx, id); err != nil || live {
		t.Fatalf("the record of the deletion stays after the undelete (live %v, %v)", live, err)
	}
	wantCode(t, "undelete of an existing table", undelete(), codes.AlreadyExists)
}

// flakyOpenHost fails OpenTable failures times, then opens.
type flakyOpenHost struct {
	flushingHost
	failures int
}

func (h *flakyOpenHost) OpenTable(ctx context.Context, t meta.Table) error {
	if h.failures > 0 {
		h.failures--
		return errors.New("METADATA unavailable a moment")
	}
	return h.flushingHost.OpenTable(ctx, t)
}

// TestCreationByReferenceRetried: tablets that fail to open a moment after
// the entry is written do not fail the call: the creation is retried and
// the table comes back whole in the one UndeleteTable.
func TestCreationByReferenceRetried(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	host := &flakyOpenHost{flushingHost: flushingHost{newFakeTableHost()}}
	catalog := NewBlobCatalog(store, "catalog")
	svc, err := NewAdminService(Options{Catalog: catalog, Host: host, Store: store, States: tablet.NewBlobStateStore(store, "states"),
		UndeleteRetention: time.Hour, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	const name = "projects/p/instances/i/tables/t"
	if _, err := svc.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	host.failures = 2
	if _, err := svc.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: name}); err != nil {
		t.Fatalf("undelete with two transient failures: %v", err)
	}
	if host.failures != 0 {
		t.Fatalf("%d failures left: not retried", host.failures)
	}
	if _, err := svc.GetTable(ctx, &adminpb.GetTableRequest{Name: name}); err != nil {
		t.Fatalf("the undeleted table: %v", err)
	}
}
