package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

func TestReadRoot(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()

	l, index, err := readRoot(ctx, kv)
	if err != nil || index != 0 || !reflect.DeepEqual(l, unassignedRoot()) {
		t.Fatalf("readRoot of a new cluster = %+v, %d, %v; want the unassigned root, 0", l, index, err)
	}
	if !unassignedRoot().IsRoot() || unassignedRoot().Server != "" || unassignedRoot().TabletID != meta.RootTabletID {
		t.Fatalf("unassignedRoot = %+v: not the root, or assigned", unassignedRoot())
	}

	want := meta.RootLocation("h:1/abc", 9)
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, coord.KeyRoot, b); err != nil {
		t.Fatal(err)
	}
	e, _ := kv.Get(ctx, coord.KeyRoot)
	l, index, err = readRoot(ctx, kv)
	if err != nil || index != e.ModifyIndex || !reflect.DeepEqual(l, want) {
		t.Fatalf("readRoot = %+v, %d, %v; want %+v, %d", l, index, err, want, e.ModifyIndex)
	}
	if got, err := (coordSource{kv: kv}).Root(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("coordSource.Root = %+v, %v; want %+v", got, err, want)
	}

	if err := kv.Put(ctx, coord.KeyRoot, []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readRoot(ctx, kv); err == nil || !strings.Contains(err.Error(), coord.KeyRoot) {
		t.Fatalf("readRoot of a corrupt key: %v, want an error naming it", err)
	}
}

// TestMetadataNewCluster: before any server serves the root tablet, the
// master's METADATA reader needs no tablet server: it creates the root key
// and reports the root tablet alone, unassigned, as incomplete.
func TestMetadataNewCluster(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	md := newMetadataStore(kv, nil)

	if err := md.SetLocation(ctx, meta.RootTabletID, "h:1/a", 1); err == nil {
		t.Fatal("SetLocation before METADATA was read: no error")
	}
	ts, err := md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []assign.Tablet{{ID: meta.RootTabletID, Table: meta.MetadataTable.String(), End: string(meta.RootTabletEnd()), Kind: assign.Root}}
	if !reflect.DeepEqual(ts, want) {
		t.Fatalf("Tablets = %+v, want %+v", ts, want)
	}
	root, index, err := readRoot(ctx, kv)
	if err != nil || index == 0 || !reflect.DeepEqual(root, unassignedRoot()) {
		t.Fatalf("root key after the first read: %+v, %d, %v; want the unassigned root, stored", root, index, err)
	}
	if _, err := md.allTablets(ctx); err == nil {
		t.Fatal("allTablets with the root unassigned: no error (GC would miss tablets)")
	}
	if _, after, _ := readRoot(ctx, kv); after != index {
		t.Fatalf("a second read rewrote the root key (index %d → %d)", index, after)
	}

	if err := md.SetLocation(ctx, "no-such-tablet", "h:1/a", 1); err == nil {
		t.Fatal("SetLocation of a tablet METADATA does not list: no error")
	}
	if err := md.SetLocation(ctx, meta.RootTabletID, "h:1/a", 4); err != nil {
		t.Fatal(err)
	}
	root, _, err = readRoot(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if want := meta.RootLocation("h:1/a", 4); !reflect.DeepEqual(root, want) {
		t.Fatalf("root after SetLocation = %+v, want %+v", root, want)
	}
}

// TestMetadataKeepsExistingRoot: a master reading METADATA never replaces
// a root key another master wrote.
func TestMetadataKeepsExistingRoot(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	defer kv.Close()
	existing := unassignedRoot()
	existing.Epoch = 3
	b, _ := json.Marshal(existing)
	if err := kv.Put(ctx, coord.KeyRoot, b); err != nil {
		t.Fatal(err)
	}
	_, before, _ := readRoot(ctx, kv)
	if _, err := newMetadataStore(kv, nil).Tablets(ctx); err != nil {
		t.Fatal(err)
	}
	root, after, _ := readRoot(ctx, kv)
	if after != before || root.Epoch != 3 {
		t.Fatalf("root key rewritten: %+v (index %d → %d)", root, before, after)
	}
}

// rowOf applies rm's SetCell mutations to an empty row, as a read would
// return them.
func rowOf(rm cell.RowMutation) cell.Row {
	row := cell.Row{Key: rm.Row}
	for _, m := range rm.Mutations {
		row.Cells = append(row.Cells, cell.Cell{Family: m.Family, Qualifier: m.Qualifier, Timestamp: m.Timestamp, Value: m.Value})
	}
	return row
}

func TestLocationWithEvent(t *testing.T) {
	table := meta.TableID{Instance: "i", Table: "t"}
	l := meta.Location{Table: table, Start: []byte("a"), End: []byte("m"), TabletID: "t-1", Server: "h:1/abc", Epoch: 12}
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	rm := locationWithEvent(l, meta.EventLoad, "why", now)
	if !bytes.Equal(rm.Row, meta.MetadataRowKey(table, l.End)) {
		t.Fatalf("row %q, want the tablet's METADATA row", rm.Row)
	}
	for _, m := range rm.Mutations {
		if m.Family == meta.FamilyLoc && m.Timestamp != cell.ServerTimestamp {
			t.Errorf("loc:%s has timestamp %d, want the server's", m.Qualifier, m.Timestamp)
		}
	}
	e, err := meta.ParseMetadataRow(rowOf(rm))
	if err != nil {
		t.Fatal(err)
	}
	if e.Server != l.Server || e.Epoch != l.Epoch {
		t.Fatalf("location %s@%d, want %s@%d", e.Server, e.Epoch, l.Server, l.Epoch)
	}
	if len(e.Events) != 1 {
		t.Fatalf("events %+v, want one", e.Events)
	}
	// METADATA has millisecond granularity, which rejects timestamps that
	// are not whole milliseconds: the event time is truncated.
	if metadataTable().Granularity != meta.GranularityMillis {
		t.Fatal("METADATA is not of millisecond granularity: the truncation may go")
	}
	wantEv := meta.Event{Time: now.Truncate(time.Millisecond).UnixMicro(), Kind: meta.EventLoad, Server: l.Server, Epoch: l.Epoch, Detail: "why"}
	if e.Events[0] != wantEv {
		t.Fatalf("event %+v, want %+v", e.Events[0], wantEv)
	}
	if e.Events[0].Time%1000 != 0 {
		t.Fatalf("event time %d µs is not whole milliseconds", e.Events[0].Time)
	}
}

func TestAssignTablet(t *testing.T) {
	l := meta.Location{Table: meta.TableID{Instance: "i", Table: "t"}, Start: []byte("a"), End: []byte("m"), TabletID: "t-1", Server: "h:1/abc", Epoch: 3}
	got := assignTablet(l, assign.User)
	want := assign.Tablet{ID: "t-1", Table: "i/t", Start: "a", End: "m", LastServer: "h:1/abc", Kind: assign.User}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("assignTablet = %+v, want %+v", got, want)
	}
	// The table string goes back to the catalog's ID when the master loads
	// the tablet (serverClient.tableEntry).
	if id, err := parseTableString(got.Table); err != nil || id != l.Table {
		t.Fatalf("parseTableString(%q) = %+v, %v", got.Table, id, err)
	}
}

// row is a METADATA entry for the split tests: tablet id of table tab
// over [start, end) ("" for the table's bounds), split from parent,
// served by server at epoch.
func row(tab, id, start, end, parent, server string, epoch uint64) meta.MetadataEntry {
	e := meta.MetadataEntry{Table: meta.TableID{Instance: "i", Table: tab}, Server: server, Epoch: epoch}
	e.State = tabletdesc.State{ID: id, Parent: parent}
	if start != "" {
		e.State.Start = []byte(start)
	}
	if end != "" {
		e.State.End = []byte(end)
	}
	return e
}

// state is a saved tablet state for the split tests.
func state(id, start, end, parent string, splitInto ...string) tabletdesc.State {
	st := tabletdesc.State{ID: id, Parent: parent, SplitInto: splitInto}
	if start != "" {
		st.Start = []byte(start)
	}
	if end != "" {
		st.End = []byte(end)
	}
	return st
}

// repairString is a splitRepair as the tests compare it:
// "child[start,end)@server/epoch" with "replaces parent" when it does.
func repairString(r splitRepair) string {
	s := fmt.Sprintf("%s[%s,%s)@%s/%d", r.Child.ID, r.Child.Start, r.Child.End, r.Parent.Server, r.Parent.Epoch)
	if r.ReplacesParent {
		s += " replaces " + r.Parent.TabletID
	}
	return s
}

// TestSplitRepairs: which rows finish a split committed but not finished,
// from the rows read and the saved states.
func TestSplitRepairs(t *testing.T) {
	const x = "x:1/dead" // the splitting server
	// P [c, k) of table t split into L [c, g) and R [g, k); X and Y are
	// its neighbours.
	splitP := []tabletdesc.State{state("P", "c", "k", "", "L", "R"), state("L", "c", "g", "P"), state("R", "g", "k", "P")}
	// Q, the whole of table u, split into three.
	splitQ := []tabletdesc.State{state("Q", "", "", "", "Q1", "Q2", "Q3"), state("Q1", "", "f", "Q"), state("Q2", "f", "p", "Q"), state("Q3", "p", "", "Q")}
	for _, tc := range []struct {
		name    string
		rows    []meta.MetadataEntry
		states  []tabletdesc.State
		want    []string
		wantErr string
	}{{
		name:   "consistent",
		rows:   []meta.MetadataEntry{row("t", "X", "", "c", "", x, 1), row("t", "L", "c", "g", "P", x, 5), row("t", "R", "g", "k", "P", x, 5), row("t", "Y", "k", "", "", x, 1)},
		states: splitP,
	}, {
		name:   "crash after the commit",
		rows:   []meta.MetadataEntry{row("t", "X", "", "c", "", x, 1), row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5), row("t", "Y", "k", "", "", x, 1)},
		states: splitP,
		want:   []string{"R[g,k)@x:1/dead/5 replaces P"},
	}, {
		name:   "the parent row's location wins",
		rows:   []meta.MetadataEntry{row("t", "L", "c", "g", "P", "x:1/other", 4), row("t", "P", "c", "k", "", x, 5)},
		states: splitP,
		want:   []string{"R[g,k)@x:1/dead/5 replaces P"},
	}, {
		name:   "three children, one written",
		rows:   []meta.MetadataEntry{row("u", "Q1", "", "f", "Q", x, 3), row("u", "Q", "", "", "", x, 3)},
		states: splitQ,
		want:   []string{"Q2[f,p)@x:1/dead/3", "Q3[p,)@x:1/dead/3 replaces Q"},
	}, {
		name:   "three children, two written",
		rows:   []meta.MetadataEntry{row("u", "Q1", "", "f", "Q", x, 3), row("u", "Q2", "f", "p", "Q", x, 3), row("u", "Q", "", "", "", x, 3)},
		states: splitQ,
		want:   []string{"Q3[p,)@x:1/dead/3 replaces Q"},
	}, {
		name:   "a child split in turn",
		rows:   []meta.MetadataEntry{row("t", "L1", "c", "e", "L", x, 5), row("t", "L2", "e", "g", "L", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states: append(slices.Clone(splitP), state("L", "c", "g", "P", "L1", "L2"), state("L1", "c", "e", "L"), state("L2", "e", "g", "L")),
		want:   []string{"R[g,k)@x:1/dead/5 replaces P"},
	}, {
		name:   "two tables",
		rows:   []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5), row("u", "Q1", "", "f", "Q", x, 3), row("u", "Q", "", "", "", x, 3)},
		states: append(slices.Clone(splitP), splitQ...),
		want:   []string{"R[g,k)@x:1/dead/5 replaces P", "Q2[f,p)@x:1/dead/3", "Q3[p,)@x:1/dead/3 replaces Q"},
	}, {
		name: "rows of another table are no overlap",
		rows: []meta.MetadataEntry{row("t", "L", "c", "z", "P", x, 5), row("u", "Q", "", "", "", x, 3)},
	}, {
		name:   "an overlapping row without a parent",
		rows:   []meta.MetadataEntry{row("t", "L", "c", "g", "", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states: splitP,
	}, {
		name:   "overlapped, but not split",
		rows:   []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states: []tabletdesc.State{state("P", "c", "k", "")},
	}, {
		name:    "no state of the parent",
		rows:    []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5), row("u", "Q1", "", "f", "Q", x, 3), row("u", "Q", "", "", "", x, 3)},
		states:  splitQ,
		want:    []string{"Q2[f,p)@x:1/dead/3", "Q3[p,)@x:1/dead/3 replaces Q"},
		wantErr: "tablet P: no saved state",
	}, {
		name:    "no state of a child",
		rows:    []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states:  splitP[:2],
		wantErr: "no saved state of its child R",
	}, {
		name:    "children that do not cover the parent",
		rows:    []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states:  []tabletdesc.State{splitP[0], splitP[1], state("R", "g", "j", "P")},
		wantErr: "children end at",
	}, {
		name:    "children with a gap",
		rows:    []meta.MetadataEntry{row("t", "L", "c", "g", "P", x, 5), row("t", "P", "c", "k", "", x, 5)},
		states:  []tabletdesc.State{splitP[0], splitP[1], state("R", "h", "k", "P")},
		wantErr: "child R has range",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			states := make(map[string]tabletdesc.State)
			for _, st := range tc.states {
				states[st.ID] = st
			}
			repairs, err := splitRepairs(tc.rows, states)
			var got []string
			for _, r := range repairs {
				got = append(got, repairString(r))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("repairs %q, want %q", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

// metadataFixture is METADATA served by a real tablet server in the
// process (on the in-process lock service and a local object store),
// with the master's METADATA store over it.
type metadataFixture struct {
	server *TabletServer
	md     *metadataStore
	states tablet.StateStore
}

func newMetadataFixture(t *testing.T) *metadataFixture {
	t.Helper()
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	t.Cleanup(func() { _ = kv.Close() })
	store := newLocalStore(t)
	s, err := StartTabletServer(ctx, ServerConfig{Coord: kv, Store: store, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	f := &metadataFixture{server: s, md: newMetadataStore(kv, s.cl), states: tablet.NewBlobStateStore(store, StatePrefix)}
	// What the master does at bootstrap: the root tablet, then METADATA's
	// second tablet, both here.
	if _, err := f.md.Tablets(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ref := range []meta.TabletRef{{ID: meta.RootTabletID, End: meta.RootTabletEnd()}, {ID: meta.MetaTabletID, Start: meta.RootTabletEnd()}} {
		if err := s.host.LoadTablet(ctx, metadataTable(), ref, tabletserver.ReplayLog{}); err != nil {
			t.Fatal(err)
		}
		if err := f.md.SetLocation(ctx, ref.ID, s.Name(), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.md.Tablets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// putRow writes the METADATA row of tablet st of table, located at server
// with epoch.
func (f *metadataFixture) putRow(t *testing.T, table meta.TableID, st tabletdesc.State, server string, epoch uint64) {
	t.Helper()
	rm, err := meta.StateMutation(table, st, cell.ServerTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	rm.Mutations = append(rm.Mutations, meta.LocationMutation(table, st.End, server, epoch, cell.ServerTimestamp).Mutations...)
	if err := f.server.cl.Apply(context.Background(), meta.MetadataTableName, rm); err != nil {
		t.Fatal(err)
	}
}

// rows returns table's METADATA rows as "id[start,end)@server/epoch<parent".
func (f *metadataFixture) rows(t *testing.T, table meta.TableID) []string {
	t.Helper()
	start, end := meta.MetadataTableRange(table)
	es, err := f.md.scanEntries(context.Background(), start, end)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s[%s,%s)@%s/%d<%s", e.State.ID, e.State.Start, e.State.End, e.Server, e.Epoch, e.State.Parent))
	}
	return out
}

// userTablets returns the user tablets of ts as "id[start,end)@server".
func userTablets(ts []assign.Tablet) []string {
	var out []string
	for _, tb := range ts {
		if tb.Kind == assign.User {
			out = append(out, fmt.Sprintf("%s[%s,%s)@%s", tb.ID, tb.Start, tb.End, tb.LastServer))
		}
	}
	return out
}

// TestSplitCrashAfterCommit: a tablet server that dies between the two
// steps of a split's commit leaves METADATA with the parent overlapping
// its left child. The planner assigns neither meanwhile, and the master's
// next read finishes the split: a view without gap or overlap, the right
// child located at the dead server (whose log holds its recent writes),
// which the planner then recovers from that log. Late steps of the dead
// server's commit overwrite nothing.
func TestSplitCrashAfterCommit(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	table := meta.TableID{Instance: "i", Table: "t"}
	const dead, other = "10.0.0.1:1/dead", "10.0.0.2:1/live"
	// P, the whole table, at the server about to die; its split into L
	// and R at "m" is saved in the states (tablet.Tablet's split).
	f.putRow(t, table, tabletdesc.State{ID: "P"}, dead, 7)
	saveStates(t, f.states,
		tabletdesc.State{ID: "P", SplitInto: []string{"L", "R"}, SplitKey: []byte("m")},
		tabletdesc.State{ID: "L", End: []byte("m"), Parent: "P"},
		tabletdesc.State{ID: "R", Start: []byte("m"), Parent: "P"})
	children := []splitChild{{ID: "L", End: []byte("m")}, {ID: "R", Start: []byte("m")}}

	// The dead server's last act: the commit point, L's row.
	epoch, finished, err := commitSplitNew(ctx, f.server.cl, dead, table, "P", children, time.Now())
	if err != nil || finished || epoch != 7 {
		t.Fatalf("commitSplitNew = %d, %v, %v; want epoch 7, unfinished", epoch, finished, err)
	}
	if got, want := f.rows(t, table), []string{"L[,m)@10.0.0.1:1/dead/7<P", "P[,)@10.0.0.1:1/dead/7<"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA after the commit point: %q, want %q", got, want)
	}

	// A master without the states sees the overlap as it is: the planner
	// assigns neither tablet, nor anything else in their range.
	stale := newMetadataStore(f.md.kv, f.md.cl)
	ts, err := stale.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := userTablets(ts), []string{"L[,m)@" + dead, "P[,)@" + dead}; !reflect.DeepEqual(got, want) {
		t.Fatalf("view without repair %q, want %q", got, want)
	}
	st := assign.State{Tablets: ts, Dead: []assign.DeadServer{{ID: dead}}, Live: []assign.Server{
		{ID: assign.ServerID(f.server.Name()), Serving: []assign.Served{{ID: meta.RootTabletID}, {ID: meta.MetaTabletID}}},
		{ID: assign.ServerID(other)},
	}}
	rescanned := false
	for _, a := range assign.Plan(st, assign.Config{}) {
		if a.Kind == assign.Assign {
			t.Fatalf("the planner assigns %s while P and L overlap: %+v", a.Tablet, a)
		}
		rescanned = rescanned || a.Kind == assign.Rescan
	}
	if !rescanned {
		t.Fatal("the planner holds P and L without reading their range again")
	}
	// Nor while the splitting server is alive, serving the children (R
	// unknown to METADATA as read) and about to finish the commit.
	alive := st
	alive.Dead = nil
	alive.Live = append(slices.Clone(st.Live), assign.Server{ID: dead, Serving: []assign.Served{
		{ID: "L", Table: table.String(), End: "m"}, {ID: "R", Table: table.String(), Start: "m"}}})
	for _, a := range assign.Plan(alive, assign.Config{}) {
		if a.Kind != assign.Rescan {
			t.Fatalf("the planner acts while P and L overlap and the splitter lives: %+v", a)
		}
	}

	// The master's read finishes the split.
	f.md.states = f.states
	ts, err = f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := userTablets(ts), []string{"L[,m)@" + dead, "R[m,)@" + dead}; !reflect.DeepEqual(got, want) {
		t.Fatalf("view after the master's read %q, want %q (no gap, no overlap)", got, want)
	}
	if got, want := f.rows(t, table), []string{"L[,m)@10.0.0.1:1/dead/7<P", "R[m,)@10.0.0.1:1/dead/7<P"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA after the master's read: %q, want %q", got, want)
	}
	st.Tablets = ts
	assigned := map[assign.TabletID]assign.Action{}
	for _, a := range assign.Plan(st, assign.Config{}) {
		if a.Kind == assign.Assign {
			assigned[a.Tablet] = a
		}
	}
	for _, id := range []assign.TabletID{"L", "R"} {
		if a, ok := assigned[id]; !ok || a.RecoverFrom != dead {
			t.Fatalf("tablet %s: assignment %+v, want one recovering from %s's log", id, a, dead)
		}
	}
	row, ok, err := f.server.cl.ReadRow(ctx, meta.MetadataTableName, meta.MetadataRowKey(table, nil), client.ScanOptions{})
	if err != nil || !ok {
		t.Fatalf("R's row: %v, %v", ok, err)
	}
	e, err := meta.ParseMetadataRow(row)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Events) != 1 || e.Events[0].Kind != meta.EventSplit || !strings.Contains(e.Events[0].Detail, "master") {
		t.Fatalf("R's events %+v, want the master's split event", e.Events)
	}

	// R moves; then the dead server's late second step (it was only cut
	// off) and a retry of the whole commit change nothing.
	if err := f.md.SetLocation(ctx, "R", other, 9); err != nil {
		t.Fatal(err)
	}
	if err := commitSplitLast(ctx, f.server.cl, dead, table, "P", children[1], 7, time.Now()); err != nil {
		t.Fatalf("a late second step: %v, want nothing done", err)
	}
	if _, finished, err := commitSplitNew(ctx, f.server.cl, dead, table, "P", children, time.Now()); err != nil || !finished {
		t.Fatalf("a retried commit: finished %v, %v; want finished", finished, err)
	}
	if got, want := f.rows(t, table), []string{"L[,m)@10.0.0.1:1/dead/7<P", "R[m,)@10.0.0.2:1/live/9<P"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA after late steps: %q, want %q (R's move kept)", got, want)
	}
}

// TestSplitCommitConcurrentFinish: the splitting server, alive, finishing
// its commit after the master read the overlap: the master's repair, from
// that stale read, overwrites neither the server's row nor a later move.
func TestSplitCommitConcurrentFinish(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	table := meta.TableID{Instance: "i", Table: "t"}
	const x, y = "10.0.0.1:1/x", "10.0.0.2:1/y"
	f.putRow(t, table, tabletdesc.State{ID: "A", End: []byte("c")}, x, 2)
	f.putRow(t, table, tabletdesc.State{ID: "P", Start: []byte("c"), End: []byte("k")}, x, 5)
	f.putRow(t, table, tabletdesc.State{ID: "B", Start: []byte("k")}, x, 2)
	saveStates(t, f.states,
		tabletdesc.State{ID: "P", Start: []byte("c"), End: []byte("k"), SplitInto: []string{"L", "R"}},
		tabletdesc.State{ID: "L", Start: []byte("c"), End: []byte("g"), Parent: "P"},
		tabletdesc.State{ID: "R", Start: []byte("g"), End: []byte("k"), Parent: "P"})
	children := []splitChild{{ID: "L", Start: []byte("c"), End: []byte("g")}, {ID: "R", Start: []byte("g"), End: []byte("k")}}
	epoch, _, err := commitSplitNew(ctx, f.server.cl, x, table, "P", children, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	start, end := meta.MetadataTableRange(table)
	read, err := f.md.scanEntries(ctx, start, end) // the master's read, in the window
	if err != nil {
		t.Fatal(err)
	}
	if err := commitSplitLast(ctx, f.server.cl, x, table, "P", children[1], epoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.md.SetLocation(ctx, "R", y, 8); err == nil {
		t.Fatal("SetLocation of a tablet the master has not read: no error")
	}
	if _, err := f.md.Tablets(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.md.SetLocation(ctx, "R", y, 8); err != nil {
		t.Fatal(err)
	}
	want := []string{"A[,c)@10.0.0.1:1/x/2<", "L[c,g)@10.0.0.1:1/x/5<P", "R[g,k)@10.0.0.2:1/y/8<P", "B[k,)@10.0.0.1:1/x/2<"}
	got := f.md.finishSplits(ctx, start, end, read)
	var gotRows []string
	for _, e := range got {
		gotRows = append(gotRows, fmt.Sprintf("%s[%s,%s)@%s/%d<%s", e.State.ID, e.State.Start, e.State.End, e.Server, e.Epoch, e.State.Parent))
	}
	if !reflect.DeepEqual(gotRows, want) {
		t.Fatalf("finishSplits from a stale read returned %q, want METADATA as it is: %q", gotRows, want)
	}
	if got := f.rows(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA %q, want %q", got, want)
	}
}

// TestSplitCommitOrder: a live server's commit, step by step: the new
// rows first (the commit point), the parent's row last; a commit whose
// parent has no row yet (its own parent's split is not in METADATA)
// writes nothing.
func TestSplitCommitOrder(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	table := meta.TableID{Instance: "i", Table: "t"}
	const x = "10.0.0.1:1/x"
	f.putRow(t, table, tabletdesc.State{ID: "P"}, x, 3)
	children := []splitChild{{ID: "C1", End: []byte("f")}, {ID: "C2", Start: []byte("f"), End: []byte("p")}, {ID: "C3", Start: []byte("p")}}
	epoch, finished, err := commitSplitNew(ctx, f.server.cl, x, table, "P", children, time.Now())
	if err != nil || finished || epoch != 3 {
		t.Fatalf("commitSplitNew = %d, %v, %v", epoch, finished, err)
	}
	if got, want := f.rows(t, table), []string{"C1[,f)@10.0.0.1:1/x/3<P", "C2[f,p)@10.0.0.1:1/x/3<P", "P[,)@10.0.0.1:1/x/3<"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first step %q, want %q", got, want)
	}
	// Idempotent: a retry of the first step rewrites nothing.
	if _, _, err := commitSplitNew(ctx, f.server.cl, x, table, "P", children, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := commitSplitLast(ctx, f.server.cl, x, table, "P", children[2], epoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := []string{"C1[,f)@10.0.0.1:1/x/3<P", "C2[f,p)@10.0.0.1:1/x/3<P", "C3[p,)@10.0.0.1:1/x/3<P"}
	if got := f.rows(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the second step %q, want %q", got, want)
	}
	if err := commitSplitLast(ctx, f.server.cl, x, table, "P", children[2], epoch, time.Now()); err != nil {
		t.Fatalf("a repeated second step: %v", err)
	}

	// C2 split before C2's own row exists: nothing is written.
	other := meta.TableID{Instance: "i", Table: "u"}
	grand := []splitChild{{ID: "G1", Start: []byte("f"), End: []byte("h")}, {ID: "G2", Start: []byte("h"), End: []byte("p")}}
	if _, _, err := commitSplitNew(ctx, f.server.cl, x, other, "C2", grand, time.Now()); err == nil {
		t.Fatal("commit of a split whose parent has no row: no error")
	}
	if got := f.rows(t, other); len(got) != 0 {
		t.Fatalf("rows %q written for a split whose parent has no row", got)
	}
	// A parent row naming another tablet is an error too.
	if _, _, err := commitSplitNew(ctx, f.server.cl, x, table, "Z", []splitChild{{ID: "Z1", End: []byte("b")}, {ID: "C3", Start: []byte("b")}}, time.Now()); err != nil {
		t.Fatalf("a split whose last child's row exists: %v, want finished", err)
	}
	if _, _, err := commitSplitNew(ctx, f.server.cl, x, table, "Z", []splitChild{{ID: "Z1", End: []byte("b")}, {ID: "Z2", Start: []byte("b")}}, time.Now()); err == nil {
		t.Fatal("a split whose parent's row names another tablet: no error")
	}
	if got := f.rows(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("after refused commits %q, want %q", got, want)
	}
}

// TestSplitCommitAfterChildSplit: a left child that split in turn, its
// split committed before its parent's commit finished (the second step
// failed and is retried): the parent's retried commit leaves the child's
// children alone and finishes.
func TestSplitCommitAfterChildSplit(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	table := meta.TableID{Instance: "i", Table: "t"}
	const x = "10.0.0.1:1/x"
	f.putRow(t, table, tabletdesc.State{ID: "P"}, x, 3)
	children := []splitChild{{ID: "L", End: []byte("m")}, {ID: "R", Start: []byte("m")}}
	if _, _, err := commitSplitNew(ctx, f.server.cl, x, table, "P", children, time.Now()); err != nil {
		t.Fatal(err)
	}
	grand := []splitChild{{ID: "L1", End: []byte("f")}, {ID: "L2", Start: []byte("f"), End: []byte("m")}}
	epoch, _, err := commitSplitNew(ctx, f.server.cl, x, table, "L", grand, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := commitSplitLast(ctx, f.server.cl, x, table, "L", grand[1], epoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	epoch, finished, err := commitSplitNew(ctx, f.server.cl, x, table, "P", children, time.Now())
	if err != nil || finished {
		t.Fatalf("P's retried commit: finished %v, %v", finished, err)
	}
	if err := commitSplitLast(ctx, f.server.cl, x, table, "P", children[1], epoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := []string{"L1[,f)@10.0.0.1:1/x/3<L", "L2[f,m)@10.0.0.1:1/x/3<L", "R[m,)@10.0.0.1:1/x/3<P"}
	if got := f.rows(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA %q, want %q", got, want)
	}
}

// TestMetadataReadsUnrouted: the master's METADATA reads are answered by
// the server they reach from its own tablets — "not serving" when it
// lacks the one asked for — never routed by its gateway, which would
// retry until the read's deadline for a tablet only the master's next
// round can reassign (a killed server started again on its address: the
// master's rounds waited 0.5–3 s per METADATA read for it).
func TestMetadataReadsUnrouted(t *testing.T) {
	f := newMetadataFixture(t)
	ctx := context.Background()
	// METADATA still places its second tablet here; the server no longer
	// serves it.
	if err := f.server.host.UnloadTablet(ctx, meta.MetaTabletID); err != nil {
		t.Fatal(err)
	}
	_, err := f.md.scanEntriesWithin(ctx, time.Second, meta.RootTabletEnd(), nil)
	if err == nil {
		t.Fatal("read of a METADATA tablet no server serves succeeded")
	}
	mfs, gerr := f.server.registry.Gather()
	if gerr != nil {
		t.Fatal(gerr)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "tabula_gateway_retries_total" {
			found = true
			if n := mf.GetMetric()[0].GetCounter().GetValue(); n != 0 {
				t.Fatalf("the gateway retried the read %v times (err %v): it routed it", n, err)
			}
		}
	}
	if !found {
		t.Fatal("no tabula_gateway_retries_total metric: the test checked nothing")
	}
}

// TestMetadataAtDeadServerLoggedAsInfo: a METADATA tablet placed at an
// address where nothing listens (a killed server; at every restart of
// tabula dev, the previous run's) is the recovery's ordinary state, logged
// at INFO; other failures to read METADATA stay warnings.
func TestMetadataAtDeadServerLoggedAsInfo(t *testing.T) {
	f := newMetadataFixture(t)
	ctx := context.Background()
	// Port 1 on loopback: nothing listens there.
	if err := f.md.SetLocation(ctx, meta.RootTabletID, "127.0.0.1:1/dead", 99); err != nil {
		t.Fatal(err)
	}
	// A master's METADATA store, with a client that has cached nothing.
	s := f.server
	cl := client.New(s.self, client.Options{Metadata: s.src, FailFastNotServing: true})
	md := newMetadataStore(f.md.kv, cl)
	var logged bytes.Buffer
	md.log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, err := md.Tablets(ctx); err != nil {
		t.Fatal(err)
	}
	out := logged.String()
	if !strings.Contains(out, "level=INFO") || !strings.Contains(out, "METADATA tablet at a dead server") || strings.Contains(out, "level=WARN") {
		t.Fatalf("log of a root tablet at a dead server:\n%s\nwant one INFO line and no warning", out)
	}
	logged.Reset()
	md.warn("reading the root tablet", errors.New("some other failure"))
	if !strings.Contains(logged.String(), "level=WARN") {
		t.Fatalf("log of another failure:\n%s\nwant a warning", logged.String())
	}
}

// TestSetLocationOnlyOnTheTabletsRow: the master records a load's
// location only in a row that still names the tablet. A load answered
// after its table was deleted brought the deleted row back (a location
// without a state, in the key range of the table created again under
// the name), and one answered after the row changed hands wrote its
// location into another tablet's row.
func TestSetLocationOnlyOnTheTabletsRow(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	table := meta.TableID{Instance: "i", Table: "t"}
	const x, y = "10.0.0.1:1/x", "10.0.0.2:1/y"
	f.putRow(t, table, tabletdesc.State{ID: "A", End: []byte("m")}, x, 2)
	f.putRow(t, table, tabletdesc.State{ID: "B", Start: []byte("m")}, x, 2)
	if _, err := f.md.Tablets(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.md.SetLocation(ctx, "A", y, 3); err != nil {
		t.Fatalf("SetLocation of a tablet whose row names it: %v", err)
	}
	// A's row deleted (its table deleted), B's now another tablet's.
	if err := f.server.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: meta.MetadataRowKey(table, []byte("m")), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	f.putRow(t, table, tabletdesc.State{ID: "C", Start: []byte("m")}, x, 4)
	if err := f.md.SetLocation(ctx, "A", y, 5); err == nil {
		t.Fatal("SetLocation of a tablet whose row is gone: no error")
	}
	if err := f.md.SetLocation(ctx, "B", y, 5); err == nil {
		t.Fatal("SetLocation of a tablet whose row names another: no error")
	}
	want := []string{"C[m,)@10.0.0.1:1/x/4<"}
	if got := f.rows(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA %q, want %q (nothing brought back, C's location kept)", got, want)
	}
}
