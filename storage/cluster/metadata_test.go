package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
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
