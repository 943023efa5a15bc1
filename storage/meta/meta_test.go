package meta

import (
	"errors"
	"strings"
	"testing"
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
