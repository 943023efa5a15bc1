package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// metaTablets returns the METADATA tablets of ts other than the root, as
// "[start,end)" with METADATA keys shown as "root-end", "split" (any other
// bounded key) or "" (the end).
func metaTablets(ts []assign.Tablet) []string {
	show := func(k string) string {
		switch {
		case k == "":
			return ""
		case k == string(meta.RootTabletEnd()):
			return "root-end"
		}
		return "split"
	}
	var out []string
	for _, tb := range ts {
		if tb.Kind == assign.Meta {
			out = append(out, fmt.Sprintf("[%s,%s)", show(tb.Start), show(tb.End)))
		}
	}
	return out
}

// checkUserRows fails unless ts lists the user tablets of table tiling
// [r00, r40) … the end once each, as the fixture wrote them.
func checkUserRows(t *testing.T, what string, ts []assign.Tablet, n int) {
	t.Helper()
	seen := map[assign.TabletID]int{}
	for _, tb := range ts {
		if tb.Kind == assign.User {
			seen[tb.ID]++
		}
	}
	if len(seen) != n {
		t.Fatalf("%s: %d user tablets, want %d", what, len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s: user tablet %s listed %d times", what, id, k)
		}
	}
}

// TestMetadataTabletSplit: a METADATA tablet (not the root) split by its
// server is committed to the root tablet's rows like a user tablet's
// split to METADATA: the master then reads two METADATA tablets and every
// user tablet once. Crashes of that commit are finished by the master as
// for user tablets: after the commit point by its next read of the root
// (finishSplits), with each user tablet read once meanwhile although the
// parent's row overlaps its left child's; before it by RepairSplits,
// which the planner asks for when the server reports children the root
// lacks.
func TestMetadataTabletSplit(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	table := meta.TableID{Instance: "i", Table: "t"}
	const users = 40
	const elsewhere = "10.0.0.9:1/x"
	for i := range users {
		st := tabletdesc.State{ID: fmt.Sprintf("u%02d", i), End: fmt.Appendf(nil, "r%02d", i+1)}
		if i > 0 {
			st.Start = fmt.Appendf(nil, "r%02d", i)
		}
		if i == users-1 {
			st.End = nil
		}
		f.putRow(t, table, st, elsewhere, 5)
	}
	ts, err := f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metaTablets(ts), []string{"[root-end,)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA tablets before the split %q, want %q", got, want)
	}
	checkUserRows(t, "before the split", ts, users)

	children, err := f.server.host.SplitTabletAt(ctx, meta.MetadataTable, meta.MetaTabletID, nil)
	if err != nil {
		t.Fatal(err)
	}
	left, right := children[0], children[1]
	if n := len(left.End); n == 0 || left.End[n-1] != 0 {
		t.Fatalf("METADATA split at %q: not between two rows", left.End)
	}
	ts, err = f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metaTablets(ts), []string{"[root-end,split)", "[split,)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA tablets after the split %q, want %q", got, want)
	}
	checkUserRows(t, "after the split", ts, users)
	wantRoot := []string{
		fmt.Sprintf("%s[%s,%s)@%s/2<%s", left.ID, meta.RootTabletEnd(), left.End, f.server.Name(), meta.MetaTabletID),
		fmt.Sprintf("%s[%s,)@%s/2<%s", right.ID, left.End, f.server.Name(), meta.MetaTabletID),
	}
	if got := f.rows(t, meta.MetadataTable); !reflect.DeepEqual(got, wantRoot) {
		t.Fatalf("the root's rows %q, want %q", got, wantRoot)
	}

	// A crash after the commit point: the parent's row is back, the left
	// child's row overlaps it.
	parent := tabletdesc.State{ID: meta.MetaTabletID, Start: meta.RootTabletEnd()}
	f.putRow(t, meta.MetadataTable, parent, f.server.Name(), 2)
	stale := newMetadataStore(f.md.kv, f.md.cl)
	ts, err = stale.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metaTablets(ts), []string{"[root-end,split)", "[root-end,)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA tablets between the commit's steps %q, want %q", got, want)
	}
	checkUserRows(t, "between the commit's steps", ts, users)
	ts, err = f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.rows(t, meta.MetadataTable); !reflect.DeepEqual(got, wantRoot) {
		t.Fatalf("the root's rows after the master's read %q, want %q", got, wantRoot)
	}
	checkUserRows(t, "after the master finished the split", ts, users)

	// A crash before the commit point: the root names the parent alone,
	// the server serves the children.
	if err := f.server.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: meta.MetadataRowKey(meta.MetadataTable, left.End),
		Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	f.putRow(t, meta.MetadataTable, parent, f.server.Name(), 2)
	ts, err = f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := metaTablets(ts), []string{"[root-end,)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA tablets before the repair %q, want %q", got, want)
	}
	checkUserRows(t, "before the repair", ts, users)
	var served []assign.Served
	for _, s := range f.server.host.ServedTablets() {
		served = append(served, assign.Served{ID: assign.TabletID(s.ID), Table: s.Table.String(), Start: string(s.Start), End: string(s.End)})
	}
	var rescan *assign.Action
	for _, a := range assign.Plan(assign.State{Tablets: ts, Live: []assign.Server{{ID: assign.ServerID(f.server.Name()), Serving: served}}}, assign.Config{NoMerge: true}) {
		if a.Kind == assign.Assign {
			t.Fatalf("the planner assigns %s while METADATA lacks the split: %+v", a.Tablet, a)
		}
		if a.Kind == assign.Rescan && a.Reason == "split" && a.Table == meta.MetadataTable.String() {
			rescan = &a
		}
	}
	if rescan == nil || !bytes.Equal([]byte(rescan.Start), meta.RootTabletEnd()) {
		t.Fatalf("the planner does not ask for the parent's range to be read again: %+v", rescan)
	}
	if err := f.md.RepairSplits(ctx, rescan.Table, rescan.Start, rescan.End); err != nil {
		t.Fatal(err)
	}
	if got := f.rows(t, meta.MetadataTable); !reflect.DeepEqual(got, wantRoot) {
		t.Fatalf("the root's rows after the repair %q, want %q", got, wantRoot)
	}
	ts, err = f.md.Tablets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkUserRows(t, "after the repair", ts, users)
	if got, want := metaTablets(ts), []string{"[root-end,split)", "[split,)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("METADATA tablets after the repair %q, want %q", got, want)
	}
}

// putUserRows writes the METADATA rows of 20 tablets of table i/t.
func putUserRows(t *testing.T, f *metadataFixture) {
	table := meta.TableID{Instance: "i", Table: "t"}
	for i := range 20 {
		st := tabletdesc.State{ID: fmt.Sprintf("u%02d", i), Start: fmt.Appendf(nil, "r%02d", i), End: fmt.Appendf(nil, "r%02d", i+1)}
		if i == 0 {
			st.Start = nil
		}
		if i == 19 {
			st.End = nil
		}
		f.putRow(t, table, st, "10.0.0.9:1/x", 5)
	}
}

// moveMetadataTablets splits METADATA into three tablets and "moves" the
// right two to server: their rows name it, and they are unloaded here.
func moveMetadataTablets(t *testing.T, f *metadataFixture, server string) (children, grand []tabletserver.TabletInfo) {
	ctx := context.Background()
	children, err := f.server.host.SplitTabletAt(ctx, meta.MetadataTable, meta.MetaTabletID, nil)
	if err != nil {
		t.Fatal(err)
	}
	grand, err = f.server.host.SplitTabletAt(ctx, meta.MetadataTable, children[1].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range grand {
		f.putRow(t, meta.MetadataTable, tabletdesc.State{ID: c.ID, Start: c.Start, End: c.End, Parent: children[1].ID}, server, 9)
		if err := f.server.host.UnloadTablet(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	return children, grand
}

// silentServer listens on loopback, accepts connections and never reads
// or answers them, as a paused process does; it returns its address and
// a function reporting whether anything connected. Closed at the test's
// end.
func silentServer(t *testing.T) (addr string, connected func() bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String(), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) > 0
	}
}

// TestMetadataReadOfSilentServer: a round's read of METADATA tablets at a
// server that accepts connections and never answers (a paused process)
// gives up at metadataRoundReadTimeout — the master's List timeout — not
// at metadataScanTimeout, and the next one, the server now a suspect, at
// metadataSuspectTimeout.
func TestMetadataReadOfSilentServer(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	putUserRows(t, f)
	addr, _ := silentServer(t)
	silent := addr + "/silent"
	moveMetadataTablets(t, f, silent)
	for i, limit := range []time.Duration{metadataScanTimeout, metadataRoundReadTimeout} {
		began := time.Now()
		ts, complete, err := f.md.read(ctx, nil)
		took := time.Since(began)
		if err != nil || complete {
			t.Fatalf("read %d with two METADATA tablets at a silent server: complete %v, %v", i+1, complete, err)
		}
		if got, want := len(metaTablets(ts)), 3; got != want {
			t.Fatalf("read %d: %d METADATA tablets listed, want %d", i+1, got, want)
		}
		if took >= limit {
			t.Fatalf("read %d took %v at a silent server: want under %v", i+1, took, limit)
		}
		if got := f.md.suspects[silent]; got != i+1 {
			t.Fatalf("failures at the silent server after read %d: %d", i+1, got)
		}
	}
}

// TestMetadataReadOfServerDeclaredDead: METADATA tablets placed at a
// server the master declared dead are not read at all — a silent one
// would cost the round's read its timeout (the round that was to load
// them after the dead server's log sort came 1.8 s late in a campaign) —
// and are listed, unread, for the planner to recover; the server is no
// suspect. The others are read as before.
func TestMetadataReadOfServerDeclaredDead(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	putUserRows(t, f)
	addr, connected := silentServer(t)
	silent := addr + "/silent"
	moveMetadataTablets(t, f, silent)
	began := time.Now()
	ts, complete, err := f.md.read(ctx, func(server string) bool { return server == silent })
	took := time.Since(began)
	if err != nil || complete {
		t.Fatalf("read with two METADATA tablets at a server declared dead: complete %v, %v", complete, err)
	}
	if got, want := len(metaTablets(ts)), 3; got != want {
		t.Fatalf("%d METADATA tablets listed, want %d", got, want)
	}
	if took >= metadataProbeAfter {
		t.Fatalf("the read took %v: it waited for the server declared dead", took)
	}
	if got := f.md.suspects[silent]; got != 0 {
		t.Fatalf("the server declared dead was read (%d failures)", got)
	}
	if connected() {
		t.Fatal("the read connected to the server declared dead")
	}
}

// TestMetadataReadGoesWhereMetadataSays: a METADATA tablet is read at the
// server METADATA names, even when the client's location cache still
// places it at another — a server paused since, which accepts connections
// and never answers (after a pause, rounds waited 2 s each for it).
func TestMetadataReadGoesWhereMetadataSays(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	putUserRows(t, f)
	addr, _ := silentServer(t)
	// The fixture's METADATA tablet, as a client that saw it at the
	// silent server under the same epoch would cache it.
	f.server.cl.CacheLocations(meta.Location{Table: meta.MetadataTable, Start: meta.RootTabletEnd(), TabletID: meta.MetaTabletID,
		Server: addr + "/paused", Epoch: 2})
	began := time.Now()
	ts, complete, err := f.md.read(ctx, nil)
	if err != nil || !complete {
		t.Fatalf("read after %v: complete %v, %v", time.Since(began), complete, err)
	}
	users := 0
	for _, tb := range ts {
		if tb.Kind == assign.User {
			users++
		}
	}
	if users != 20 {
		t.Fatalf("%d user tablets read, want 20", users)
	}
}

// TestMetadataReadSkipsDeadServer: METADATA tablets whose server does not
// answer are listed (for the planner to recover) without their rows, the
// others' rows are read; a server whose read failed is a suspect — read
// once per round, with the short timeout — until a read there succeeds.
func TestMetadataReadSkipsDeadServer(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	f.md.states = f.states
	putUserRows(t, f)
	const dead = "127.0.0.1:1/dead"
	children, grand := moveMetadataTablets(t, f, dead)
	ts, complete, err := f.md.read(ctx, nil)
	if err != nil || complete {
		t.Fatalf("read with two METADATA tablets at a dead server: complete %v, %v", complete, err)
	}
	if got, want := len(metaTablets(ts)), 3; got != want {
		t.Fatalf("%d METADATA tablets listed, want %d", got, want)
	}
	users := 0
	for _, tb := range ts {
		if tb.Kind == assign.User {
			users++
		}
	}
	if users == 0 || users == 20 {
		t.Fatalf("%d user tablets listed: want those of the live METADATA tablet only", users)
	}
	// One read failed at the dead server (the other was not tried).
	if got := f.md.suspects[dead]; got != 1 {
		t.Fatalf("failures at the dead server after one read: %d, want 1", got)
	}
	if _, _, err := f.md.read(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := f.md.suspects[dead]; got != 2 {
		t.Fatalf("failures at the dead server after two reads: %d, want 2", got)
	}
	// Back at the live server: read whole, no suspect left.
	for _, c := range grand {
		if err := f.server.host.LoadTablet(ctx, metadataTable(), meta.TabletRef{ID: c.ID, Start: c.Start, End: c.End}, tabletserver.ReplayLog{}); err != nil {
			t.Fatal(err)
		}
		f.putRow(t, meta.MetadataTable, tabletdesc.State{ID: c.ID, Start: c.Start, End: c.End, Parent: children[1].ID}, f.server.Name(), 10)
	}
	ts, complete, err = f.md.read(ctx, nil)
	if err != nil || !complete {
		t.Fatalf("read after the move back: complete %v, %v", complete, err)
	}
	checkUserRows(t, "after the move back", ts, 20)
	if len(f.md.suspects) != 0 {
		t.Fatalf("suspects %v after every read succeeded", f.md.suspects)
	}
}

// TestServerFollowsRootMoves: a tablet server's location caches (its
// client's and its gateway's) learn a new root location from the lock
// service's root key as it is written, without a call failing first.
func TestServerFollowsRootMoves(t *testing.T) {
	ctx := context.Background()
	f := newMetadataFixture(t)
	moved := meta.RootLocation("127.0.0.1:1/elsewhere", 99)
	b, err := json.Marshal(moved)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.md.kv.Put(ctx, coord.KeyRoot, b); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl, okc := f.server.cl.CachedLocation(meta.MetadataTable, nil)
		gw, okg := f.server.cache.Lookup(meta.MetadataTable, nil)
		if okc && okg && cl.Server == moved.Server && gw.Server == moved.Server {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the root moved: client caches %+v (%v), gateway %+v (%v); want %s", cl, okc, gw, okg, moved.Server)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
