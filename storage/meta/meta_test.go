package meta

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tablet"
)

func TestParseTableName(t *testing.T) {
	id, err := ParseTableName("projects/p/instances/i/tables/web-table.1")
	if err != nil || id != (TableID{Instance: "i", Table: "web-table.1"}) {
		t.Fatalf("got %v %v", id, err)
	}
	if id.FullName("p") != "projects/p/instances/i/tables/web-table.1" {
		t.Fatalf("FullName %q", id.FullName("p"))
	}
	for _, bad := range []string{"", "projects/p/instances/i", "projects/p/instances/i/tables/", "projects/p/instances/i/tables/-x",
		"projects//instances/i/tables/t", "x/p/instances/i/tables/t", "projects/p/instances/i/tables/t/extra"} {
		if _, err := ParseTableName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("%q: got %v, want ErrBadName", bad, err)
		}
	}
	if _, inst, err := ParseInstanceName("projects/p/instances/i"); err != nil || inst != "i" {
		t.Fatalf("instance: %q %v", inst, err)
	}
}

func TestBlobCatalog(t *testing.T) {
	ctx := context.Background()
	c := NewBlobCatalog(blob.NewMemory(), "catalog")
	a := Table{ID: TableID{"i", "a"}, Families: map[string]tablet.Family{"f": {GC: tablet.GCPolicy{MaxVersions: 2}}},
		Tablets: []TabletRef{{ID: "t1"}}}
	b := Table{ID: TableID{"j", "b"}, Families: map[string]tablet.Family{}}
	if err := c.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, a); !errors.Is(err, ErrTableExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := c.Update(ctx, b); !errors.Is(err, ErrTableNotFound) {
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
	if _, err := c.Get(ctx, a.ID); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := c.Delete(ctx, a.ID); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestTableDir(t *testing.T) {
	a := Table{ID: TableID{Instance: "i", Table: "a"}}
	ab := Table{ID: TableID{Instance: "i", Table: "ab"}}
	if a.Dir() != "tables/i/a" {
		t.Fatalf("Dir %q", a.Dir())
	}
	if strings.HasPrefix(ab.Dir()+"/", a.Dir()+"/") {
		t.Fatalf("%q is under %q", ab.Dir(), a.Dir())
	}
}
