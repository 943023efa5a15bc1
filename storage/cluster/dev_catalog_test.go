package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestDevMovesLegacyCatalog: a directory written by a dev that kept its
// catalog in the store (testdata/olddev, see testdata/README.md) starts
// with every table, schema and acknowledged write, its catalog now in
// the lock service's file and no longer in the store, its commit log
// flushed into the tables and gone; and a second start finds the same.
func TestDevMovesLegacyCatalog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/olddev")); err != nil {
		t.Fatal(err)
	}
	for start := 1; start <= 2; start++ {
		d, err := StartDev(ctx, DevConfig{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("start %d: %v", start, err)
		}
		checkOldDevTables(t, ctx, d.Addr())
		if err := d.Close(); err != nil {
			t.Fatalf("start %d: close: %v", start, err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "store", legacyCatalogPrefix, "*", "*.json")); len(left) != 0 {
			t.Fatalf("start %d: catalog objects left in the store: %v", start, left)
		}
		// The older dev's commit log was flushed into the tables and
		// deleted: the rows above came from SSTables and this run's log.
		if _, err := os.Stat(filepath.Join(dir, legacyLogDir)); !os.IsNotExist(err) {
			t.Fatalf("start %d: the older dev's log directory is still there (%v)", start, err)
		}
		kv, err := coord.OpenLocal(coord.LocalConfig{Path: filepath.Join(dir, DevCoordFile)})
		if err != nil {
			t.Fatal(err)
		}
		tables, err := NewCoordCatalog(kv).List(ctx, "")
		_ = kv.Close()
		if err != nil || len(tables) != 2 || tables[0].ID.String() != "i/web" || tables[1].ID.String() != "j/other" {
			t.Fatalf("start %d: the lock service's catalog: %v (%v), want i/web and j/other", start, tables, err)
		}
	}
}

// checkOldDevTables checks what testdata/olddev holds, through the
// official client.
func checkOldDevTables(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.TableInfo(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	gc := map[string]string{}
	for _, f := range info.FamilyInfos {
		gc[f.Name] = f.GCPolicy
	}
	if len(gc) != 2 || gc["f"] != bigtable.MaxVersionsPolicy(2).String() || gc["g"] != bigtable.NoGcPolicy().String() {
		t.Errorf("web's families: %v, want f (max 2 versions) and g (no GC)", gc)
	}
	if info.DeletionProtection != bigtable.Protected {
		t.Errorf("web's deletion protection: %v, want on", info.DeletionProtection)
	}
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = data.Open("web").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		want := fmt.Sprintf("row%04d", n)
		if r.Key() != want {
			t.Errorf("row %d is %q, want %q", n, r.Key(), want)
			return false
		}
		f := r["f"]
		if len(f) != 1 || f[0].Timestamp != 1000 || string(f[0].Value) != fmt.Sprintf("%s-%04d", strings.Repeat("v", 100), n) {
			t.Errorf("row %s: family f is %v", want, f)
		}
		g := r["g"]
		if n%3 == 0 && (len(g) != 1 || g[0].Timestamp != 2000 || string(g[0].Value) != fmt.Sprintf("g%04d", n)) || n%3 != 0 && len(g) != 0 {
			t.Errorf("row %s: family g is %v", want, g)
		}
		n++
		return true
	})
	if err != nil || n != 400 {
		t.Fatalf("read %d rows of web (%v), want 400", n, err)
	}
	other, err := bigtable.NewClientWithConfig(ctx, "p", "j", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = other.Open("other").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		got = append(got, r.Key()+"="+string(r["cf"][0].Value))
		return true
	})
	if err != nil || strings.Join(got, ",") != "k0=o0,k1=o1,k2=o2,k3=o3,k4=o4" {
		t.Fatalf("rows of j/other: %v (%v)", got, err)
	}
}

// TestMigrateDevCatalogResumes: a move cut short — some tables already in
// the lock service, their objects still in the store — finishes on the
// next call, keeping what the lock service has, and a store without a
// legacy catalog moves nothing.
func TestMigrateDevCatalogResumes(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	old := master.NewBlobCatalog(store, legacyCatalogPrefix)
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	to := NewCoordCatalog(kv)
	a := meta.Table{ID: meta.TableID{Instance: "i", Table: "a"}, Families: map[string]tabletdesc.Family{"f": {}}, Tablets: []meta.TabletRef{{ID: "a-0"}}, Generation: 1}
	b := meta.Table{ID: meta.TableID{Instance: "i", Table: "b"}, Families: map[string]tabletdesc.Family{"g": {}}, Tablets: []meta.TabletRef{{ID: "b-0"}}, Generation: 1}
	for _, tbl := range []meta.Table{a, b} {
		if err := old.Create(ctx, tbl); err != nil {
			t.Fatal(err)
		}
	}
	// The cut-short move had written a (at a later generation since).
	moved := a
	moved.Generation = 7
	if err := to.Create(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if n, err := migrateDevCatalog(ctx, store, to); err != nil || n != 2 {
		t.Fatalf("migrate: %d, %v; want 2 tables", n, err)
	}
	if got, err := to.Get(ctx, a.ID); err != nil || got.Generation != 7 {
		t.Errorf("a after the move: generation %d (%v), want the lock service's 7", got.Generation, err)
	}
	if got, err := to.Get(ctx, b.ID); err != nil || got.Families["g"].Name != b.Families["g"].Name || len(got.Tablets) != 1 || got.Tablets[0].ID != "b-0" {
		t.Errorf("b after the move: %+v (%v)", got, err)
	}
	if objs, err := store.List(ctx, legacyCatalogPrefix+"/"); err != nil || len(objs) != 1 || objs[0].Name != legacyCatalogGuard {
		t.Errorf("left in the store: %v (%v), want only %s", objs, err, legacyCatalogGuard)
	}
	// What an older dev does at start: list its catalog. The guard makes
	// that fail, so it refuses to start rather than collect every table's
	// files as garbage.
	if left, err := old.List(ctx, ""); err == nil || !strings.Contains(err.Error(), legacyCatalogGuard) {
		t.Errorf("an older dev's catalog listing: %v, %v; want an error naming %s", left, err, legacyCatalogGuard)
	}
	if n, err := migrateDevCatalog(ctx, store, to); err != nil || n != 0 {
		t.Errorf("second migrate: %d, %v; want nothing moved", n, err)
	}
	if _, err := to.Get(ctx, meta.TableID{Instance: "i", Table: "c"}); !errors.Is(err, meta.ErrTableNotFound) {
		t.Errorf("an unknown table: %v", err)
	}
}
