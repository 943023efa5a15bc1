package master

import (
	"context"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestBlobCatalog(t *testing.T) {
	ctx := context.Background()
	c := NewBlobCatalog(blob.NewMemory(), "catalog")
	a := meta.Table{ID: meta.TableID{Instance: "i", Table: "a"}, Families: map[string]tabletdesc.Family{"f": {GC: tabletdesc.GCPolicy{MaxVersions: 2}}},
		Tablets: []meta.TabletRef{{ID: "t1"}}}
	b := meta.Table{ID: meta.TableID{Instance: "j", Table: "b"}, Families: map[string]tabletdesc.Family{}}
	if err := c.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, a); !errors.Is(err, meta.ErrTableExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := c.Update(ctx, b); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("update of missing: %v", err)
	}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, a.ID)
	if err != nil || got.Families["f"].GC.MaxVersions != 2 || got.Tablets[0].ID != "t1" {
		t.Fatalf("get: %+v %v", got, err)
	}
	all, _ := c.List(ctx, "")
	inI, _ := c.List(ctx, "i")
	if len(all) != 2 || len(inI) != 1 || inI[0].ID != a.ID {
		t.Fatalf("list: all %d, in i %d", len(all), len(inI))
	}
	if err := c.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, a.ID); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := c.Delete(ctx, a.ID); !errors.Is(err, meta.ErrTableNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
