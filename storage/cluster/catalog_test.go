package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func testTable(instance, table string) meta.Table {
	return meta.Table{
		ID:       meta.TableID{Instance: instance, Table: table},
		Families: map[string]tabletdesc.Family{"cf": {Name: "cf", GC: tabletdesc.GCPolicy{MaxVersions: 3}}},
		Tablets:  []meta.TabletRef{{ID: table + "-0"}},
		Created:  time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

func tableIDs(ts []meta.Table) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID.String())
	}
	return out
}

func TestCoordCatalog(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	cat := NewCoordCatalog(kv)

	a := testTable("i", "a")
	b := testTable("i", "b")
	other := testTable("i2", "a") // same table name, another instance
	for _, tb := range []meta.Table{a, b, other} {
		if err := cat.Create(ctx, tb); err != nil {
			t.Fatalf("Create %s: %v", tb.ID, err)
		}
	}
	// Kept in the lock service under schema/, one key per table.
	ents, err := kv.List(ctx, coord.PrefixSchema)
	if err != nil || len(ents) != 3 {
		t.Fatalf("schema keys: %d, %v; want 3", len(ents), err)
	}
	if _, err := kv.Get(ctx, coord.SchemaKey(a.ID.String())); err != nil {
		t.Fatalf("key of %s: %v", a.ID, err)
	}

	got, err := cat.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("Get = %+v, want %+v", got, a)
	}
	if err := cat.Create(ctx, a); !errors.Is(err, meta.ErrTableExists) {
		t.Fatalf("Create of an existing table: %v, want ErrTableExists", err)
	}
	missing := meta.TableID{Instance: "i", Table: "zz"}
	if _, err := cat.Get(ctx, missing); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("Get of a missing table: %v, want ErrTableNotFound", err)
	}

	all, err := cat.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tableIDs(all), []string{a.ID.String(), b.ID.String(), other.ID.String()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("List all = %v, want %v", got, want)
	}
	inst, err := cat.List(ctx, "i")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tableIDs(inst), []string{a.ID.String(), b.ID.String()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("List of one instance = %v, want %v (not the instance i2)", got, want)
	}

	a2 := a
	a2.Families = maps.Clone(a.Families)
	a2.Families["cf2"] = tabletdesc.Family{Name: "cf2"}
	a2.Generation = 1
	if err := cat.Update(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if got, _ := cat.Get(ctx, a.ID); !reflect.DeepEqual(got, a2) {
		t.Fatalf("after Update, Get = %+v, want %+v", got, a2)
	}
	if err := cat.Update(ctx, testTable("i", "zz")); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("Update of a missing table: %v, want ErrTableNotFound", err)
	}

	if err := cat.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Get(ctx, b.ID); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrTableNotFound", err)
	}
	// Deleted, the name can be created again.
	if err := cat.Create(ctx, b); err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
}

// racingKV changes key behind the caller's back right after the caller
// read it, as a second master would.
type racingKV struct {
	coord.KV
	key   string
	value []byte
	done  bool
}

func (k *racingKV) Get(ctx context.Context, key string) (coord.Entry, error) {
	e, err := k.KV.Get(ctx, key)
	if err == nil && key == k.key && !k.done {
		k.done = true
		if perr := k.KV.Put(ctx, key, k.value); perr != nil {
			return e, perr
		}
	}
	return e, err
}

// TestCoordCatalogUpdateConflict: two masters updating one table never
// lose each other's change silently.
func TestCoordCatalogUpdateConflict(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	a := testTable("i", "a")
	if err := NewCoordCatalog(kv).Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	theirs := a
	theirs.Generation = 7
	b, err := json.Marshal(theirs)
	if err != nil {
		t.Fatal(err)
	}
	racing := &racingKV{KV: kv, key: coord.SchemaKey(a.ID.String()), value: b}
	mine := a
	mine.Generation = 1
	err = NewCoordCatalog(racing).Update(ctx, mine)
	if !errors.Is(err, coord.ErrConflict) {
		t.Fatalf("Update racing another master: %v, want coord.ErrConflict", err)
	}
	// The admin API passes gRPC statuses through (master's toStatus): the
	// client sees Aborted, a retryable conflict, not Unknown or Internal.
	if s, ok := status.FromError(err); !ok || s.Code() != codes.Aborted {
		t.Fatalf("Update racing another master: status %v (ok %v), want Aborted", s, ok)
	}
	if s, ok := status.FromError(fmt.Errorf("updating: %w", err)); !ok || s.Code() != codes.Aborted {
		t.Fatalf("wrapped conflict: status %v (ok %v), want Aborted", s, ok)
	}
	got, err := NewCoordCatalog(kv).Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != 7 {
		t.Fatalf("after the race the entry has generation %d, want the other master's 7", got.Generation)
	}
}

func TestCoordCatalogCorruptEntry(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	id := meta.TableID{Instance: "i", Table: "bad"}
	if err := kv.Put(ctx, coord.SchemaKey(id.String()), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	cat := NewCoordCatalog(kv)
	if _, err := cat.Get(ctx, id); err == nil || errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("Get of a corrupt entry: %v, want a corruption error", err)
	}
	if _, err := cat.List(ctx, ""); err == nil {
		t.Fatal("List over a corrupt entry: no error")
	}
}

func TestParseTableString(t *testing.T) {
	for _, id := range []meta.TableID{
		{Instance: "i", Table: "t"},
		meta.MetadataTable,
	} {
		got, err := parseTableString(id.String())
		if err != nil || got != id {
			t.Errorf("parseTableString(%q) = %+v, %v; want %+v", id.String(), got, err, id)
		}
	}
	for _, s := range []string{"", "noslash", "inst/"} {
		if _, err := parseTableString(s); err == nil {
			t.Errorf("parseTableString(%q): no error", s)
		}
	}
}

func TestMetadataTable(t *testing.T) {
	m := metadataTable()
	if m.ID != meta.MetadataTable {
		t.Fatalf("ID = %+v", m.ID)
	}
	if !reflect.DeepEqual(m.Families, meta.MetadataFamilies()) {
		t.Fatalf("families %+v, want METADATA's", m.Families)
	}
}

// TestCatalogContract runs the meta.Catalog contract on the coord catalog
// and on blobCatalog side by side: the same calls give the same answers
// (missing tables, List's order by name across instances whose escaped
// keys sort otherwise).
func TestCatalogContract(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	store, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cat  meta.Catalog
	}{{"coord", NewCoordCatalog(kv)}, {"blob", master.NewBlobCatalog(store, "catalog")}} {
		t.Run(c.name, func(t *testing.T) {
			// "a-b" < "a/…" by name; escaped as keys, "a" ends before "-".
			for _, tb := range []meta.Table{testTable("a", "t"), testTable("a-b", "t"), testTable("a", "s"), testTable("b", "a")} {
				if err := c.cat.Create(ctx, tb); err != nil {
					t.Fatal(err)
				}
			}
			all, err := c.cat.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tableIDs(all), []string{"a-b/t", "a/s", "a/t", "b/a"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("List = %v, want %v (sorted by name)", got, want)
			}
			inst, err := c.cat.List(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tableIDs(inst), []string{"a/s", "a/t"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("List(a) = %v, want %v", got, want)
			}

			missing := meta.TableID{Instance: "a", Table: "zz"}
			if err := c.cat.Delete(ctx, missing); !errors.Is(err, meta.ErrTableNotFound) {
				t.Fatalf("Delete of a missing table: %v, want ErrTableNotFound", err)
			}
			gone := meta.TableID{Instance: "b", Table: "a"}
			if err := c.cat.Delete(ctx, gone); err != nil {
				t.Fatal(err)
			}
			if err := c.cat.Delete(ctx, gone); !errors.Is(err, meta.ErrTableNotFound) {
				t.Fatalf("second Delete: %v, want ErrTableNotFound", err)
			}
			if err := c.cat.Update(ctx, testTable("b", "a")); !errors.Is(err, meta.ErrTableNotFound) {
				t.Fatalf("Update after Delete: %v, want ErrTableNotFound", err)
			}
		})
	}
}

// TestCoordCatalogDeleteRacingUpdate: a Delete whose entry another master
// rewrites between the read and the delete reads it again and deletes it.
func TestCoordCatalogDeleteRacingUpdate(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	a := testTable("i", "a")
	if err := NewCoordCatalog(kv).Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	theirs := a
	theirs.Generation = 7
	b, err := json.Marshal(theirs)
	if err != nil {
		t.Fatal(err)
	}
	racing := &racingKV{KV: kv, key: coord.SchemaKey(a.ID.String()), value: b}
	if err := NewCoordCatalog(racing).Delete(ctx, a.ID); err != nil {
		t.Fatalf("Delete racing an update: %v", err)
	}
	if !racing.done {
		t.Fatal("the race did not happen")
	}
	if _, err := NewCoordCatalog(kv).Get(ctx, a.ID); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrTableNotFound", err)
	}
}
