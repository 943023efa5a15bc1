package cluster

import (
	"context"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestSplitCrashBeforeCommit: a tablet server dies after saving a split's
// states but before its first METADATA write, at each step of the split.
// Only P's row is in METADATA; P's next server loads P's children (the
// saved state says P was split) and reports them. The planner asks for
// P's range to be read again, and RepairSplits finishes the split where
// P's row says P is; a crash before P's state recorded the split leaves
// P as it was (rolled back), and the repair changes nothing.
func TestSplitCrashBeforeCommit(t *testing.T) {
	ctx := context.Background()
	table := meta.TableID{Instance: "i", Table: "t"}
	const loader = "10.0.0.3:1/loader"
	for _, step := range []string{"children saved", "parent saved"} {
		t.Run(step, func(t *testing.T) {
			f := newMetadataFixture(t)
			f.md.states = f.states
			// P is at loader, which loaded it after its first server
			// died (the master recorded the new location).
			f.putRow(t, table, tabletdesc.State{ID: "P"}, loader, 11)
			saveStates(t, f.states,
				tabletdesc.State{ID: "L", End: []byte("m"), Parent: "P"},
				tabletdesc.State{ID: "R", Start: []byte("m"), Parent: "P"})
			parent := tabletdesc.State{ID: "P"}
			if step == "parent saved" {
				parent.SplitInto, parent.SplitKey = []string{"L", "R"}, []byte("m")
			}
			saveStates(t, f.states, parent)

			ts, err := f.md.Tablets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := userTablets(ts), []string{"P[,)@" + loader}; !reflect.DeepEqual(got, want) {
				t.Fatalf("METADATA as read %q, want P alone", got)
			}
			served := []assign.Served{{ID: "P", Table: table.String()}}
			if step == "parent saved" {
				// The loader followed SplitInto: it serves the children.
				served = []assign.Served{{ID: "L", Table: table.String(), End: "m"}, {ID: "R", Table: table.String(), Start: "m"}}
			}
			st := assign.State{Tablets: ts, Live: []assign.Server{
				{ID: assign.ServerID(f.server.Name()), Serving: []assign.Served{{ID: meta.RootTabletID}, {ID: meta.MetaTabletID}}},
				{ID: loader, Serving: served},
			}}
			var rescans []assign.Action
			for _, a := range assign.Plan(st, assign.Config{NoMerge: true}) {
				if a.Kind == assign.Assign && a.Tablet == "P" {
					t.Fatalf("P assigned while its children are served: %+v", a)
				}
				if a.Kind == assign.Rescan {
					rescans = append(rescans, a)
				}
			}
			if step == "children saved" {
				if len(rescans) != 0 {
					t.Fatalf("rescans %+v of a tablet served as it is", rescans)
				}
				if err := f.md.RepairSplits(ctx, table.String(), "", ""); err != nil {
					t.Fatal(err)
				}
				if got, want := f.rows(t, table), []string{"P[,)@" + loader + "/11<"}; !reflect.DeepEqual(got, want) {
					t.Fatalf("METADATA %q, want P as it was (the split rolled back)", got)
				}
				return
			}
			if len(rescans) != 1 || rescans[0].Reason != "split" {
				t.Fatalf("actions %+v, want one rescan of P's range", rescans)
			}
			if err := f.md.RepairSplits(ctx, rescans[0].Table, rescans[0].Start, rescans[0].End); err != nil {
				t.Fatal(err)
			}
			if got, want := f.rows(t, table), []string{"L[,m)@" + loader + "/11<P", "R[m,)@" + loader + "/11<P"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("METADATA after the repair %q, want %q", got, want)
			}
			// The planner now sees the children served where METADATA
			// says: nothing to do for them.
			ts, err = f.md.Tablets(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.Tablets = ts
			for _, a := range assign.Plan(st, assign.Config{NoMerge: true}) {
				if a.Tablet == "L" || a.Tablet == "R" || a.Kind == assign.Rescan {
					t.Fatalf("after the repair: %+v", a)
				}
			}
			// Repairing again changes nothing.
			if err := f.md.RepairSplits(ctx, table.String(), "", ""); err != nil {
				t.Fatal(err)
			}
			if got := f.rows(t, table); len(got) != 2 {
				t.Fatalf("after a second repair: %q", got)
			}
		})
	}
}

// TestRepairSplitsSkipsTabletsNeverOpened: a row whose tablet has no
// saved state (a table just created, not yet loaded) was never split,
// and the repair the unknown tablets of another table of the name ask
// for passes it by — it answered "tablet state not found" every round
// while a deleted table's tablet was still served.
func TestRepairSplitsSkipsTabletsNeverOpened(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	table := meta.TableID{Instance: "i", Table: "t"}
	f.putRow(t, table, tabletdesc.State{ID: "new"}, "", 0)
	if err := f.md.RepairSplits(ctx, table.String(), "", ""); err != nil {
		t.Fatalf("RepairSplits over a tablet never opened: %v", err)
	}
	if got, want := f.rows(t, table), []string{"new[,)@/0<"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA %q, want %q", got, want)
	}
}
