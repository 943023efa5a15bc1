package cluster

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestNoTabletsError: a table the master's view holds no tablet of is NOT_FOUND
// only when the catalog has no such table; an existing one (a master that
// took over moments ago, or a round that missed part of METADATA) is
// UNAVAILABLE, and so is a catalog that cannot be read. (A fault campaign
// run saw NOT_FOUND for an existing table right after a Consul restart and
// a master kill.)
func TestNoTabletsError(t *testing.T) {
	ctx := context.Background()
	catalog := NewCoordCatalog(coord.NewLocal(coord.LocalConfig{Clock: coord.NewFakeClock()}))
	id := meta.TableID{Instance: "i", Table: "t"}
	if err := catalog.Create(ctx, meta.Table{ID: id}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		catalog meta.Catalog
		id      meta.TableID
		want    codes.Code
	}{
		{"existing table", catalog, id, codes.Unavailable},
		{"no such table", catalog, meta.TableID{Instance: "i", Table: "gone"}, codes.NotFound},
		{"unreadable catalog", failingCatalog{catalog}, id, codes.Unavailable},
	} {
		if got := status.Code(noTabletsError(ctx, tc.catalog, tc.id)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

type failingCatalog struct{ meta.Catalog }

func (failingCatalog) Get(context.Context, meta.TableID) (meta.Table, error) {
	return meta.Table{}, errors.New("lock service unreachable")
}

// TestTabletsOf: the tablets of one table, in row order, each with the
// server reporting it.
func TestTabletsOf(t *testing.T) {
	id := meta.TableID{Instance: "i", Table: "t"}
	st := assign.State{
		Tablets: []assign.Tablet{
			{ID: "t2", Table: id.String(), Start: "m"},
			{ID: "x1", Table: "i/other"},
			{ID: "t1", Table: id.String(), End: "m"},
		},
		Live: []assign.Server{{ID: "s1", Serving: []assign.Served{{ID: "t1"}}}},
	}
	got := tabletsOf(st, id)
	if len(got) != 2 || got[0].ID != "t1" || got[1].ID != "t2" || got[0].server != "s1" || got[1].server != "" {
		t.Fatalf("tabletsOf = %+v, want t1 (on s1) then t2 (unserved)", got)
	}
	if got := tabletsOf(assign.State{}, id); len(got) != 0 {
		t.Fatalf("tabletsOf of an empty view = %+v", got)
	}
}
