package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
)

// droppingHost is a fakeTableHost that tells dropped tablets as a cluster
// does (its METADATA has no row of the table): a table it does not serve.
// It flushes as flushingHost does, so that a retention applies.
type droppingHost struct{ flushingHost }

func (h droppingHost) TabletsDropped(_ context.Context, t meta.Table) (bool, error) {
	_, open := h.Open(t.ID)
	return !open, nil
}

// finishEnv is an AdminService over droppingHost with a clock the test
// moves, starting at the real time (the sweep of a dropped table's files
// reads the real clock to tell expired records), and tables a and b
// created at its start.
type finishEnv struct {
	ctx     context.Context
	store   blob.Store
	catalog meta.Catalog
	host    droppingHost
	svc     *AdminService
	now     time.Time
}

func newFinishEnv(t *testing.T, retention time.Duration) *finishEnv {
	t.Helper()
	e := &finishEnv{ctx: context.Background(), store: blob.NewMemory(), host: droppingHost{flushingHost{newFakeTableHost()}},
		now: time.Now().UTC().Truncate(time.Second)}
	e.catalog = NewBlobCatalog(e.store, "catalog")
	var err error
	e.svc, err = NewAdminService(Options{Catalog: e.catalog, Host: e.host, Store: e.store, States: tablet.NewBlobStateStore(e.store, "states"),
		UndeleteRetention: retention, Logger: quietLogger(), Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := e.svc.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: name}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *finishEnv) table(t *testing.T, name string) (meta.Table, bool) {
	t.Helper()
	tb, err := e.catalog.Get(e.ctx, meta.TableID{Instance: "i", Table: name})
	if errors.Is(err, meta.ErrTableNotFound) {
		return meta.Table{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return tb, true
}

// interrupt drops a table's tablets and puts a file in its directory, and
// leaves its catalog entry: a DeleteTable killed after DropTable.
func (e *finishEnv) interrupt(t *testing.T, name string) meta.Table {
	t.Helper()
	tb, ok := e.table(t, name)
	if !ok {
		t.Fatalf("no table %s", name)
	}
	if err := e.host.DropTable(e.ctx, tb); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Put(e.ctx, fileOf(tb), []byte("sstable")); err != nil {
		t.Fatal(err)
	}
	return tb
}

// fileOf names an SSTable of t as its tablets name them, with a creation
// time long past in the name.
func fileOf(t meta.Table) string {
	return fmt.Sprintf("%s/%016x-0123456789abcdef.sst", t.Dir(), time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
}

func (e *finishEnv) finish(t *testing.T) int {
	t.Helper()
	n, err := e.svc.FinishDeletions(e.ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFinishDeletions: a table whose tablets are gone (a deletion cut
// short) is deleted with its files once it is older than minAge; tables
// still served, young tables and tables being restored are left alone.
func TestFinishDeletions(t *testing.T) {
	e := newFinishEnv(t, 0)
	a := e.interrupt(t, "a")
	if n := e.finish(t); n != 0 {
		t.Fatalf("finished %d deletions of tables created now, want 0 (their CreateTable may be under way)", n)
	}
	e.now = e.now.Add(2 * time.Minute)
	// A table being restored has no tablets yet either.
	restoring := meta.Table{ID: meta.TableID{Instance: "i", Table: "r"}, Created: e.now.Add(-time.Hour), Restoring: true}
	if err := e.catalog.Create(e.ctx, restoring); err != nil {
		t.Fatal(err)
	}
	if n := e.finish(t); n != 1 {
		t.Fatalf("finished %d deletions, want 1", n)
	}
	if _, ok := e.table(t, "a"); ok {
		t.Fatal("table a is still in the catalog")
	}
	if _, err := e.store.Get(e.ctx, fileOf(a)); !blob.IsNotExist(err) {
		t.Fatalf("table a's file: %v, want it deleted", err)
	}
	if _, ok := e.table(t, "b"); !ok {
		t.Fatal("table b, still served, was deleted")
	}
	if _, ok := e.table(t, "r"); !ok {
		t.Fatal("a table being restored was deleted")
	}
	if n := e.finish(t); n != 0 {
		t.Fatalf("a second round finished %d more, want 0", n)
	}
	// The name is free again.
	if _, err := e.svc.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "a"}); err != nil {
		t.Fatalf("creating a again: %v", err)
	}
}

// TestFinishDeletionsKeepsTheRecord: with a retention, a deletion cut
// short after its record was written keeps the table restorable — the
// entry goes, the files and the record stay; without a record the files
// go as without retention.
func TestFinishDeletionsKeepsTheRecord(t *testing.T) {
	e := newFinishEnv(t, time.Hour)
	a := e.interrupt(t, "a")
	rec := DroppedTable{Table: a, Deleted: e.now, ExpireTime: e.now.Add(time.Hour)}
	rec.Table.Tablets = nil
	if err := putDropped(e.ctx, e.store, rec); err != nil {
		t.Fatal(err)
	}
	b := e.interrupt(t, "b") // no record: a purge, say
	e.now = e.now.Add(2 * time.Minute)
	if n := e.finish(t); n != 2 {
		t.Fatalf("finished %d deletions, want 2", n)
	}
	for _, name := range []string{"a", "b"} {
		if _, ok := e.table(t, name); ok {
			t.Fatalf("table %s is still in the catalog", name)
		}
	}
	if _, live, err := e.svc.restorable(e.ctx, a.ID); err != nil || !live {
		t.Fatalf("table a not restorable after finishing: live %v, %v", live, err)
	}
	if _, err := e.store.Get(e.ctx, fileOf(a)); err != nil {
		t.Fatalf("restorable table a's file: %v", err)
	}
	if _, err := e.store.Get(e.ctx, fileOf(b)); !blob.IsNotExist(err) {
		t.Fatalf("table b's file: %v, want it deleted", err)
	}
}
