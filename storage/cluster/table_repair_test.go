package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// restoredTable is a table of three tablets [,"g") ["g","p") ["p",) as
// RestoreTable creates it.
func restoredTable(restoring bool) meta.Table {
	return meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Restoring: restoring, Tablets: []meta.TabletRef{
		{ID: "t1", End: []byte("g")}, {ID: "t2", Start: []byte("g"), End: []byte("p")}, {ID: "t3", Start: []byte("p")},
	}}
}

func rowsOf(t meta.Table, ids ...string) []meta.Location {
	var out []meta.Location
	for _, r := range t.Tablets {
		if slices.Contains(ids, r.ID) {
			out = append(out, meta.Location{Table: t.ID, TabletID: r.ID, Start: r.Start, End: r.End})
		}
	}
	return out
}

func stateIDs(sts []tabletdesc.State) []string {
	var out []string
	for _, st := range sts {
		out = append(out, st.ID)
	}
	return out
}

// TestPlanRepair: the rows a half-created table lacks are written, and
// only those; its Restoring flag is cleared; a table whose rows cover it
// gets no row, and a tablet overlapping an existing (newer) row none.
func TestPlanRepair(t *testing.T) {
	tb := restoredTable(true)
	for _, c := range []struct {
		name      string
		table     meta.Table
		rows      []string
		tablets   []tabletdesc.State
		wantRows  []string
		wantFinal bool
	}{
		{"killed before any row", tb, nil, refTablets(tb), []string{"t1", "t2", "t3"}, true},
		{"killed after the first row", tb, []string{"t1"}, refTablets(tb), []string{"t2", "t3"}, true},
		{"killed after the middle row", tb, []string{"t1", "t2"}, refTablets(tb), []string{"t3"}, true},
		{"killed before clearing the flag", tb, []string{"t1", "t2", "t3"}, nil, nil, true},
		{"a whole table", restoredTable(false), []string{"t1", "t2", "t3"}, nil, nil, false},
		{"an older dev's table (no rows)", restoredTable(false), nil, refTablets(tb), []string{"t1", "t2", "t3"}, false},
		// t2 split into t2a [g,k) and t2b [k,p); t2a's row is there.
		{"a split tablet's children", restoredTable(false), []string{"t1", "t3"},
			[]tabletdesc.State{{ID: "t1", End: []byte("g")}, {ID: "t2a", Start: []byte("g"), End: []byte("k")}, {ID: "t2b", Start: []byte("k"), End: []byte("p")}, {ID: "t3", Start: []byte("p")}},
			[]string{"t2a", "t2b"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planRepair(c.table, rowsOf(c.table, c.rows...), c.tablets)
			if got := stateIDs(p.Rows); !slices.Equal(got, c.wantRows) {
				t.Errorf("rows written %v, want %v", got, c.wantRows)
			}
			if p.Finish != c.wantFinal {
				t.Errorf("Finish %v, want %v", p.Finish, c.wantFinal)
			}
			if p.Empty() != (len(c.wantRows) == 0 && !c.wantFinal) {
				t.Errorf("Empty %v", p.Empty())
			}
		})
	}
	// A row written since (a tablet that split after the restore was
	// finished by another master) is never overwritten by an older tablet.
	rows := []meta.Location{{TabletID: "t1", End: []byte("g")}, {TabletID: "t2a", Start: []byte("g"), End: []byte("k")}}
	p := planRepair(tb, rows, refTablets(tb))
	if got := stateIDs(p.Rows); !slices.Equal(got, []string{"t3"}) {
		t.Fatalf("rows written %v, want [t3] (t2 overlaps t2a's row)", got)
	}
}

// TestRepairScope: the active master looks at Restoring entries only
// (never at a table whose drop was cut short, which has no rows either);
// the periodic pass spares young ones; dev's start looks at all.
func TestRepairScope(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	young, old, whole := restoredTable(true), restoredTable(true), restoredTable(false)
	young.Created, old.Created = now.Add(-time.Minute), now.Add(-time.Hour)
	periodic := repairScope{minAge: 30 * time.Minute, now: now}
	for _, c := range []struct {
		name  string
		t     meta.Table
		scope repairScope
		want  bool
	}{
		{"leader, restoring", young, repairRestores, true},
		{"leader, whole", whole, repairRestores, false},
		{"periodic, young", young, periodic, false},
		{"periodic, old", old, periodic, true},
		{"periodic, whole", whole, periodic, false},
		{"dev, whole", whole, repairAll, true},
		{"dev, restoring", young, repairAll, true},
	} {
		if got := inRepairScope(c.t, c.scope); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestWithoutRestoring: the loop does not see the unassigned tablets of a
// table being restored, and sees everything else.
func TestWithoutRestoring(t *testing.T) {
	ts := []assign.Tablet{
		{ID: meta.RootTabletID, Table: meta.MetadataTable.String(), Kind: assign.Root, LastServer: "s1"},
		{ID: "r1", Table: "i/restoring"},
		{ID: "r2", Table: "i/restoring", LastServer: "s1"},
		{ID: "o1", Table: "i/other"},
	}
	if !anyUnassigned(ts) || anyUnassigned(ts[:1]) {
		t.Fatal("anyUnassigned")
	}
	got := withoutRestoring(ts, map[string]bool{"i/restoring": true})
	var ids []string
	for _, tb := range got {
		ids = append(ids, string(tb.ID))
	}
	if want := []string{meta.RootTabletID, "r2", "o1"}; !slices.Equal(ids, want) {
		t.Fatalf("got %v, want %v", ids, want)
	}
	if len(withoutRestoring(ts, nil)) != len(ts) {
		t.Fatal("nothing restoring: every tablet stays")
	}
}

// TestCurrentTablets: a tablet whose saved state records a split is
// replaced by its children (recursively), in key order; a tablet without
// a saved state is its catalog reference.
func TestCurrentTablets(t *testing.T) {
	ctx := context.Background()
	states := tablet.NewBlobStateStore(blob.NewMemory(), "states/")
	save := func(st tabletdesc.State) {
		t.Helper()
		if err := states.Save(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	tb := restoredTable(false)
	save(tabletdesc.State{ID: "t2", Start: []byte("g"), End: []byte("p"), SplitInto: []string{"t2a", "t2b"}})
	save(tabletdesc.State{ID: "t2a", Start: []byte("g"), End: []byte("k"), SplitInto: []string{"t2a1", "t2a2"}})
	save(tabletdesc.State{ID: "t2a1", Start: []byte("g"), End: []byte("h")})
	save(tabletdesc.State{ID: "t2a2", Start: []byte("h"), End: []byte("k")})
	save(tabletdesc.State{ID: "t2b", Start: []byte("k"), End: []byte("p")})
	save(tabletdesc.State{ID: "t3", Start: []byte("p")})
	got, err := currentTablets(ctx, states, tb.Tablets)
	if err != nil {
		t.Fatal(err)
	}
	if ids, want := stateIDs(got), []string{"t1", "t2a1", "t2a2", "t2b", "t3"}; !slices.Equal(ids, want) {
		t.Fatalf("got %v, want %v", ids, want)
	}
	if string(got[0].End) != "g" || string(got[2].Start) != "h" {
		t.Fatalf("ranges: %+v", got)
	}
	p := planRepair(tb, nil, got)
	if len(p.Rows) != 5 {
		t.Fatalf("an older dev's table gets a row per current tablet, got %v", stateIDs(p.Rows))
	}
}
