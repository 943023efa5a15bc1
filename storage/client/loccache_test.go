package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

var (
	tabA = meta.TableID{Instance: "i", Table: "a"}
	tabB = meta.TableID{Instance: "i", Table: "b"}
)

func loc(table meta.TableID, start, end, id, server string, epoch uint64) meta.Location {
	l := meta.Location{Table: table, TabletID: id, Server: server, Epoch: epoch}
	if start != "" {
		l.Start = []byte(start)
	}
	if end != "" {
		l.End = []byte(end)
	}
	return l
}

// modelCache is the obvious, slow implementation of LocationCache's
// contract without eviction.
type modelCache struct{ locs []meta.Location }

func rangesOverlap(a, b meta.Location) bool {
	return a.Table == b.Table && a.Range().Overlaps(b.Range())
}

func (m *modelCache) insert(l meta.Location) {
	if len(l.End) > 0 && bytes.Compare(l.Start, l.End) >= 0 {
		return
	}
	for _, e := range m.locs {
		if rangesOverlap(e, l) && e.Epoch > l.Epoch {
			return
		}
	}
	m.locs = slices.DeleteFunc(m.locs, func(e meta.Location) bool { return rangesOverlap(e, l) })
	if l.Server != "" {
		m.locs = append(m.locs, l)
	}
}

func (m *modelCache) lookup(t meta.TableID, row []byte) (meta.Location, bool) {
	for _, e := range m.locs {
		if e.Table == t && e.Contains(row) {
			return e, true
		}
	}
	return meta.Location{}, false
}

func (m *modelCache) invalidate(l meta.Location) {
	m.locs = slices.DeleteFunc(m.locs, func(e meta.Location) bool {
		return e.Table == l.Table && bytes.Equal(e.Start, l.Start) && bytes.Equal(e.End, l.End) && fingerprintOf(e) == fingerprintOf(l)
	})
}

// sameLoc compares locations with nil and empty rows equal.
func sameLoc(a, b meta.Location) bool {
	return a.Table == b.Table && bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End) && fingerprintOf(a) == fingerprintOf(b)
}

// world is the truth the cache chases: the tablets of some tables, split,
// merged and moved, with epochs from one counter.
type world struct {
	r       *rand.Rand
	epoch   uint64
	nextID  int
	tablets map[meta.TableID][]meta.Location // sorted, covering each table
	history []meta.Location                  // every location ever current
}

func newWorld(r *rand.Rand, tables ...meta.TableID) *world {
	w := &world{r: r, tablets: map[meta.TableID][]meta.Location{}}
	for _, t := range tables {
		w.tablets[t] = []meta.Location{w.newLoc(t, nil, nil)}
	}
	return w
}

func (w *world) newLoc(t meta.TableID, start, end []byte) meta.Location {
	w.epoch++
	w.nextID++
	l := meta.Location{Table: t, Start: start, End: end, TabletID: fmt.Sprintf("t%d", w.nextID),
		Server: fmt.Sprintf("s%d", w.r.IntN(3)), Epoch: w.epoch}
	w.history = append(w.history, l)
	return l
}

func (w *world) randRow() []byte {
	b := make([]byte, w.r.IntN(4))
	for i := range b {
		b[i] = "\x00ab\xff"[w.r.IntN(4)]
	}
	return b
}

func (w *world) randTable() meta.TableID {
	return []meta.TableID{tabA, tabB}[w.r.IntN(2)]
}

// step changes the world: a split, a merge or a move.
func (w *world) step() {
	t := w.randTable()
	ts := w.tablets[t]
	i := w.r.IntN(len(ts))
	switch w.r.IntN(3) {
	case 0: // split at a row strictly inside the tablet
		k := w.randRow()
		if len(k) == 0 || !ts[i].Contains(k) || bytes.Equal(k, ts[i].Start) {
			return
		}
		l, rr := w.newLoc(t, ts[i].Start, k), w.newLoc(t, k, ts[i].End)
		w.tablets[t] = slices.Concat(ts[:i], []meta.Location{l, rr}, ts[i+1:])
	case 1: // merge with the right neighbour
		if i+1 == len(ts) {
			return
		}
		m := w.newLoc(t, ts[i].Start, ts[i+1].End)
		w.tablets[t] = slices.Concat(ts[:i], []meta.Location{m}, ts[i+2:])
	case 2: // move
		l := ts[i]
		w.epoch++
		l.Epoch = w.epoch
		l.Server = fmt.Sprintf("s%d", w.r.IntN(3))
		w.history = append(w.history, l)
		ts[i] = l
	}
}

func (w *world) holder(t meta.TableID, row []byte) meta.Location {
	for _, l := range w.tablets[t] {
		if l.Contains(row) {
			return l
		}
	}
	panic("world has a gap")
}

// checkIndex verifies that the cache's index and LRU agree and that each
// table's entries are sorted and disjoint.
func checkIndex(t *testing.T, c *LocationCache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for tab, ents := range c.tables {
		n += len(ents)
		for i, e := range ents {
			if v, ok := c.lru.Peek(keyOf(e)); !ok || v != e {
				t.Fatalf("%s entry %+v not in the LRU", tab, *e)
			}
			if i > 0 && (len(ents[i-1].End) == 0 || bytes.Compare(ents[i-1].End, e.Start) > 0) {
				t.Fatalf("%s entries overlap: %+v %+v", tab, *ents[i-1], *e)
			}
		}
	}
	if n != c.lru.Len() {
		t.Fatalf("index holds %d entries, LRU %d", n, c.lru.Len())
	}
}

// TestLocationCacheModel runs random splits, merges and moves, feeds the
// cache fresh and stale locations, invalidates, and compares every answer
// with the model.
func TestLocationCacheModel(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		w := newWorld(r, tabA, tabB)
		c := NewLocationCache(LocationCacheOptions{Capacity: 1 << 20})
		m := &modelCache{}
		for step := 0; step < 400; step++ {
			switch op := r.IntN(10); {
			case op < 3:
				w.step()
			case op < 6: // a METADATA scan: consecutive current tablets
				ts := w.tablets[w.randTable()]
				i := r.IntN(len(ts))
				run := ts[i:min(len(ts), i+1+r.IntN(4))]
				c.Insert(run...)
				for _, l := range run {
					m.insert(l)
				}
			case op < 7: // a stale answer, from a read that raced with changes
				l := w.history[r.IntN(len(w.history))]
				if r.IntN(4) == 0 {
					l.Server = "" // an unassignment
				}
				c.Insert(l)
				m.insert(l)
			case op < 8: // not serving
				tb := w.randTable()
				if l, ok := c.Lookup(tb, w.randRow()); ok {
					if got := c.Invalidate(l); got == InvalidateIgnored {
						t.Fatalf("seed %d: invalidating a cached location was ignored", seed)
					}
					m.invalidate(l)
					if c.Invalidate(l) != InvalidateIgnored {
						t.Fatalf("seed %d: a second invalidation of a dropped location changed something", seed)
					}
				}
			default:
				for k := 0; k < 5; k++ {
					tb, row := w.randTable(), w.randRow()
					got, gok := c.Lookup(tb, row)
					want, wok := m.lookup(tb, row)
					if gok != wok || gok && !sameLoc(got, want) {
						t.Fatalf("seed %d step %d: Lookup(%s, %q) = %+v %v, model %+v %v", seed, step, tb, row, got, gok, want, wok)
					}
				}
			}
			checkIndex(t, c)
		}
		// Given the whole truth, the cache knows it exactly.
		for _, tb := range []meta.TableID{tabA, tabB} {
			c.Insert(w.tablets[tb]...)
			for k := 0; k < 50; k++ {
				row := w.randRow()
				if got, ok := c.Lookup(tb, row); !ok || !sameLoc(got, w.holder(tb, row)) {
					t.Fatalf("seed %d: after the truth, Lookup(%s, %q) = %+v %v, want %+v", seed, tb, row, got, ok, w.holder(tb, row))
				}
			}
			locs, complete := c.TabletsInRange(tb, nil, nil)
			if !complete || len(locs) != len(w.tablets[tb]) {
				t.Fatalf("seed %d: TabletsInRange(%s) complete=%v with %d tablets, want %d", seed, tb, complete, len(locs), len(w.tablets[tb]))
			}
			for i := range locs {
				if !sameLoc(locs[i], w.tablets[tb][i]) {
					t.Fatalf("seed %d: tablet %d = %+v, want %+v", seed, i, locs[i], w.tablets[tb][i])
				}
			}
		}
	}
}

func TestTabletsInRangeGaps(t *testing.T) {
	c := NewLocationCache(LocationCacheOptions{})
	c.Insert(loc(tabA, "", "c", "1", "s", 1), loc(tabA, "c", "f", "2", "s", 1), loc(tabA, "h", "k", "4", "s", 1), loc(tabA, "k", "", "5", "s", 1))
	for _, tc := range []struct {
		start, end string
		n          int
		complete   bool
	}{
		{"", "f", 2, true},
		{"a", "d", 2, true},
		{"", "g", 2, false}, // [f, h) is missing
		{"f", "h", 0, false},
		{"g", "i", 1, false},
		{"h", "", 2, true},
		{"h", "z", 2, true},
		{"", "", 4, false},
		{"d", "e", 1, true},
	} {
		var end []byte
		if tc.end != "" {
			end = []byte(tc.end)
		}
		locs, complete := c.TabletsInRange(tabA, []byte(tc.start), end)
		if len(locs) != tc.n || complete != tc.complete {
			t.Errorf("[%q, %q): %d tablets complete=%v, want %d %v", tc.start, tc.end, len(locs), complete, tc.n, tc.complete)
		}
	}
	if _, complete := c.TabletsInRange(tabB, nil, nil); complete {
		t.Error("an unknown table is complete")
	}
	// The table's end is not covered without the last tablet.
	c2 := NewLocationCache(LocationCacheOptions{})
	c2.Insert(loc(tabA, "", "c", "1", "s", 1))
	if _, complete := c2.TabletsInRange(tabA, nil, nil); complete {
		t.Error("[\"\", c) covers the whole table")
	}
	if _, complete := c2.TabletsInRange(tabA, nil, []byte("c")); !complete {
		t.Error("[\"\", c) does not cover [\"\", c)")
	}
}

func TestLocationCacheEviction(t *testing.T) {
	c := NewLocationCache(LocationCacheOptions{Capacity: 3})
	c.Insert(loc(tabA, "", "b", "1", "s", 1), loc(tabA, "b", "c", "2", "s", 1), loc(tabA, "c", "d", "3", "s", 1))
	if _, ok := c.Lookup(tabA, []byte("a")); !ok { // tablet 1 becomes the most recent
		t.Fatal("miss")
	}
	c.Insert(loc(tabA, "d", "", "4", "s", 1)) // evicts tablet 2, the least recently used
	if c.Len() != 3 {
		t.Fatalf("Len %d", c.Len())
	}
	if _, ok := c.Lookup(tabA, []byte("b")); ok {
		t.Fatal("tablet 2 not evicted")
	}
	for _, row := range []string{"a", "c", "x"} {
		if _, ok := c.Lookup(tabA, []byte(row)); !ok {
			t.Fatalf("row %q evicted", row)
		}
	}
	if _, complete := c.TabletsInRange(tabA, nil, nil); complete {
		t.Fatal("complete with an evicted tablet")
	}
	checkIndex(t, c)

	// Random churn at a small capacity keeps the index and the LRU equal,
	// and every hit right when only the truth is inserted.
	r := rand.New(rand.NewPCG(1, 1))
	w := newWorld(r, tabA, tabB)
	c = NewLocationCache(LocationCacheOptions{Capacity: 8})
	for step := 0; step < 3000; step++ {
		if r.IntN(4) == 0 {
			w.step()
			// The cache may now hold stale locations; drop what the
			// truth replaced, as "not serving" would.
			for _, tb := range []meta.TableID{tabA, tabB} {
				c.Insert(w.tablets[tb]...)
			}
		}
		tb := w.randTable()
		ts := w.tablets[tb]
		i := r.IntN(len(ts))
		c.Insert(ts[i:min(len(ts), i+3)]...)
		row := w.randRow()
		if got, ok := c.Lookup(tb, row); ok && !sameLoc(got, w.holder(tb, row)) {
			t.Fatalf("step %d: Lookup(%s, %q) = %+v, truth %+v", step, tb, row, got, w.holder(tb, row))
		}
		if c.Len() > 8 {
			t.Fatalf("Len %d > capacity", c.Len())
		}
		checkIndex(t, c)
	}
	c.RemoveTable(tabA)
	if locs, _ := c.TabletsInRange(tabA, nil, nil); len(locs) != 0 {
		t.Fatalf("RemoveTable left %d", len(locs))
	}
	checkIndex(t, c)
}

func TestLocationCacheStaleAndOverlap(t *testing.T) {
	c := NewLocationCache(LocationCacheOptions{})
	parent := loc(tabA, "", "", "p", "s1", 3)
	left, right := loc(tabA, "", "m", "l", "s1", 5), loc(tabA, "m", "", "r", "s2", 6)
	c.Insert(left, right)
	if n := c.Insert(parent); n != 0 {
		t.Fatal("a stale parent replaced its children")
	}
	if got, _ := c.Lookup(tabA, []byte("z")); got.TabletID != "r" {
		t.Fatalf("got %+v", got)
	}
	merged := loc(tabA, "", "", "m", "s3", 7)
	if c.Insert(merged) != 1 || c.Len() != 1 {
		t.Fatal("the merge did not replace the children")
	}
	moved := merged
	moved.Server, moved.Epoch = "s1", 8
	c.Insert(moved)
	if got, _ := c.Lookup(tabA, nil); got.Server != "s1" {
		t.Fatalf("move not seen: %+v", got)
	}
	// Invalidating an older location of the range leaves the newer one.
	if c.Invalidate(merged) != InvalidateIgnored {
		t.Fatal("an older location invalidated the newer")
	}
	// An unassignment drops the location without caching one.
	c.Insert(loc(tabA, "", "", "m", "", 9))
	if _, ok := c.Lookup(tabA, nil); ok || c.Len() != 0 {
		t.Fatal("unassigned location cached")
	}
	// Empty ranges are ignored.
	if c.Insert(loc(tabA, "b", "a", "x", "s", 10), loc(tabA, "b", "b", "x", "s", 10)) != 0 {
		t.Fatal("empty range cached")
	}
}

// hierarchy is a three-level METADATA world for Locate: the lock service's
// root pointer, METADATA tablets (root first), and rows.
type hierarchy struct {
	root     meta.Location
	metaTabs []meta.Location // METADATA tablets after the root, in order
	rows     map[string]meta.Location
	serving  map[string]string // tablet ID → the server that really serves it
	calls    map[string]int    // "root", and per scanned tablet ID
}

func newHierarchy() *hierarchy {
	return &hierarchy{rows: map[string]meta.Location{}, serving: map[string]string{}, calls: map[string]int{}}
}

// put records loc as a METADATA row and as the truth about who serves it.
func (h *hierarchy) put(l meta.Location) {
	if l.IsRoot() {
		h.root = l
	} else {
		h.rows[string(l.MetadataKey())] = l
	}
	h.serving[l.TabletID] = l.Server
}

func (h *hierarchy) Root(ctx context.Context) (meta.Location, error) {
	h.calls["root"]++
	return h.root, nil
}

func (h *hierarchy) ScanMetadata(ctx context.Context, tab meta.Location, from []byte, limit int) ([]meta.Location, error) {
	h.calls[tab.TabletID]++
	if h.serving[tab.TabletID] != tab.Server {
		return nil, &tabletdesc.NotServingError{Tablet: tab.TabletID, Reason: "not here"}
	}
	if !tab.Contains(from) {
		return nil, fmt.Errorf("scan of %s from %x outside it", tab.TabletID, from)
	}
	var keys []string
	for k := range h.rows {
		if k >= string(from) && tab.Contains([]byte(k)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []meta.Location
	for _, k := range keys[:min(limit, len(keys))] {
		out = append(out, h.rows[k])
	}
	return out, nil
}

func (h *hierarchy) total() int {
	n := 0
	for _, v := range h.calls {
		n += v
	}
	return n
}

// newTestHierarchy builds: root → M1 [RootEnd, key(a, "k")) and M2 [that,
// ∞); table a has tablets split at c, g, m, t; table b one tablet. M1 ends
// between two rows, so a lookup may start in M1 and find its row in M2.
func newTestHierarchy() *hierarchy {
	h := newHierarchy()
	h.put(meta.RootLocation("r1", 1))
	split := meta.MetadataRowKey(tabA, []byte("k"))
	m1 := meta.Location{Table: meta.MetadataTable, Start: meta.RootTabletEnd(), End: split, TabletID: "M1", Server: "m1", Epoch: 2}
	m2 := meta.Location{Table: meta.MetadataTable, Start: split, TabletID: "M2", Server: "m2", Epoch: 3}
	h.put(m1)
	h.put(m2)
	h.metaTabs = []meta.Location{m1, m2}
	bounds := []string{"", "c", "g", "m", "t", ""}
	for i := 0; i+1 < len(bounds); i++ {
		h.put(loc(tabA, bounds[i], bounds[i+1], fmt.Sprintf("a%d", i), fmt.Sprintf("u%d", i%2), uint64(10+i)))
	}
	h.put(loc(tabB, "", "", "b0", "u0", 20))
	return h
}

func TestLocateHierarchy(t *testing.T) {
	ctx := context.Background()
	h := newTestHierarchy()
	c := NewLocationCache(LocationCacheOptions{Prefetch: 2})

	// A cold miss reads the lock service, the root and a METADATA tablet.
	l, err := c.Locate(ctx, h, tabA, []byte("a"))
	if err != nil || l.TabletID != "a0" {
		t.Fatalf("got %+v %v", l, err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{"root": 1, meta.RootTabletID: 1, "M1": 1}) {
		t.Fatalf("cold miss calls %v", h.calls)
	}
	// The neighbour was prefetched.
	before := h.total()
	if l, err := c.Locate(ctx, h, tabA, []byte("f")); err != nil || l.TabletID != "a1" || h.total() != before {
		t.Fatalf("prefetched neighbour: %+v %v, %d calls", l, err, h.total()-before)
	}
	// A row equal to an end row belongs to the next tablet.
	if l, err := c.Locate(ctx, h, tabA, []byte("c")); err != nil || l.TabletID != "a1" {
		t.Fatalf("row c: %+v %v", l, err)
	}

	// The tablet moves: "not serving", one METADATA read, no higher level.
	old, _ := c.Lookup(tabA, []byte("d"))
	moved := old
	moved.Server, moved.Epoch = "u9", 30
	h.put(moved)
	if got := c.Invalidate(old); got != InvalidateDropped {
		t.Fatalf("Invalidate = %v", got)
	}
	before = h.total()
	if l, err := c.Locate(ctx, h, tabA, []byte("d")); err != nil || l.Server != "u9" || h.total()-before != 1 {
		t.Fatalf("after move: %+v %v, %d calls", l, err, h.total()-before)
	}

	// The METADATA tablet moves too: its scan fails, the root is read again.
	m1 := h.metaTabs[0]
	m1.Server, m1.Epoch = "m9", 31
	h.put(m1)
	moved2 := moved
	moved2.Server, moved2.Epoch = "u8", 32
	h.put(moved2)
	c.Invalidate(moved)
	h.calls = map[string]int{}
	if l, err := c.Locate(ctx, h, tabA, []byte("d")); err != nil || l.Server != "u8" {
		t.Fatalf("after METADATA move: %+v %v", l, err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{meta.RootTabletID: 1, "M1": 2}) {
		t.Fatalf("METADATA move calls %v", h.calls)
	}

	// And the root moves: the lock service is read again.
	root := h.root
	root.Server, root.Epoch = "r2", 33
	h.put(root)
	m1.Server, m1.Epoch = "m8", 34
	h.put(m1)
	moved3 := moved2
	moved3.Server, moved3.Epoch = "u7", 35
	h.put(moved3)
	c.Invalidate(moved2)
	h.calls = map[string]int{}
	if l, err := c.Locate(ctx, h, tabA, []byte("d")); err != nil || l.Server != "u7" {
		t.Fatalf("after root move: %+v %v", l, err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{"root": 1, meta.RootTabletID: 2, "M1": 2}) {
		t.Fatalf("root move calls %v", h.calls)
	}
}

// TestLocateSecondFailureWalksUp: a METADATA tablet keeps answering with a
// location that fails; the second failure drops the METADATA tablet's own
// entry, so the next lookup reads the root.
func TestLocateSecondFailureWalksUp(t *testing.T) {
	ctx := context.Background()
	h := newTestHierarchy()
	c := NewLocationCache(LocationCacheOptions{})
	l, err := c.Locate(ctx, h, tabA, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	// The tablet is no longer served where METADATA says (a stale row).
	if got := c.Invalidate(l); got != InvalidateDropped {
		t.Fatalf("first failure: %v", got)
	}
	h.calls = map[string]int{}
	l2, err := c.Locate(ctx, h, tabA, []byte("x"))
	if err != nil || !sameLoc(l, l2) || !reflect.DeepEqual(h.calls, map[string]int{"M2": 1}) {
		t.Fatalf("re-read: %+v %v %v", l2, err, h.calls)
	}
	if got := c.Invalidate(l2); got != InvalidateWalkedUp {
		t.Fatalf("second failure: %v", got)
	}
	if _, ok := c.Lookup(meta.MetadataTable, l.MetadataKey()); ok {
		t.Fatal("the METADATA tablet's entry survived the walk up")
	}
	h.calls = map[string]int{}
	if _, err := c.Locate(ctx, h, tabA, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{meta.RootTabletID: 1, "M2": 1}) {
		t.Fatalf("after the walk up: %v", h.calls)
	}
	// The root itself walks up to the lock service: nothing above to drop.
	root, _ := c.Lookup(meta.MetadataTable, nil)
	c.Invalidate(root)
	c.Insert(root)
	if got := c.Invalidate(root); got != InvalidateWalkedUp {
		t.Fatalf("root second failure: %v", got)
	}
}

func TestLocateEdges(t *testing.T) {
	ctx := context.Background()
	h := newTestHierarchy()
	c := NewLocationCache(LocationCacheOptions{Prefetch: 1})
	// The lookup key of row "h" is in M1, but the row of its tablet [g, m)
	// is in M2: the scan of M1 finds nothing and goes on into M2.
	if l, err := c.Locate(ctx, h, tabA, []byte("h")); err != nil || l.TabletID != "a2" {
		t.Fatalf("h: %+v %v", l, err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{"root": 1, meta.RootTabletID: 2, "M1": 1, "M2": 1}) {
		t.Fatalf("calls %v", h.calls)
	}
	h.calls = map[string]int{}
	if l, err := c.Locate(ctx, h, tabA, []byte("m")); err != nil || l.TabletID != "a3" {
		t.Fatalf("m: %+v %v", l, err)
	}
	if !reflect.DeepEqual(h.calls, map[string]int{"M2": 1}) {
		t.Fatalf("calls %v", h.calls)
	}
	if l, err := c.Locate(ctx, h, tabB, []byte("q")); err != nil || l.TabletID != "b0" {
		t.Fatalf("b: %+v %v", l, err)
	}
	// No such table.
	if _, err := c.Locate(ctx, h, meta.TableID{Instance: "i", Table: "nope"}, nil); !errors.Is(err, ErrNoTablet) {
		t.Fatalf("missing table: %v", err)
	}
	if _, err := c.Locate(ctx, h, meta.TableID{Instance: "z", Table: "z"}, nil); !errors.Is(err, ErrNoTablet) {
		t.Fatalf("table after all: %v", err)
	}
	// An unassigned tablet.
	h.put(loc(tabB, "", "", "b0", "", 40))
	c.RemoveTable(tabB)
	if _, err := c.Locate(ctx, h, tabB, []byte("q")); !errors.Is(err, ErrUnassigned) {
		t.Fatalf("unassigned: %v", err)
	}
	// A METADATA tablet nobody serves: Locate gives up.
	c2 := NewLocationCache(LocationCacheOptions{MaxAttempts: 3})
	h.serving["M1"] = "elsewhere"
	if _, err := c2.Locate(ctx, h, tabA, []byte("a")); !errors.Is(err, tabletdesc.ErrNotServing) {
		t.Fatalf("unserved METADATA: %v", err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := NewLocationCache(LocationCacheOptions{}).Locate(ctx2, h, tabA, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// TestLocationCacheConcurrent exercises the cache from several goroutines
// (run with -race).
func TestLocationCacheConcurrent(t *testing.T) {
	c := NewLocationCache(LocationCacheOptions{Capacity: 16})
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			w := newWorld(r, tabA, tabB)
			for i := 0; i < 2000; i++ {
				tb := w.randTable()
				switch r.IntN(4) {
				case 0:
					w.step()
				case 1:
					c.Insert(w.tablets[tb]...)
				case 2:
					if l, ok := c.Lookup(tb, w.randRow()); ok {
						c.Invalidate(l)
					}
				case 3:
					c.TabletsInRange(tb, w.randRow(), nil)
				}
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	checkIndex(t, c)
}

// TestLocateRangeAcrossAMerge: the tablets of a range are found one after
// another, and the layout may change between two lookups. Here a1 [c, g)
// is cached, then merged with a2 into a12 [c, m): the lookup after a1 finds
// a12, which starts before the point the walk reached. LocateRange must
// not answer the overlapping pair — a reader would read [c, g) twice and
// send rows out of order (seen as "out of order row key" through a
// gateway during a merge) — but walk again over the new layout.
func TestLocateRangeAcrossAMerge(t *testing.T) {
	ctx := context.Background()
	h := newTestHierarchy()
	c := NewLocationCache(LocationCacheOptions{Prefetch: 1})
	if l, err := c.Locate(ctx, h, tabA, []byte("d")); err != nil || l.TabletID != "a1" {
		t.Fatalf("got %+v %v", l, err)
	}
	delete(h.rows, string(loc(tabA, "c", "g", "a1", "", 0).MetadataKey()))
	h.put(loc(tabA, "c", "m", "a12", "u0", 30)) // a2's row key: the merged row replaces it
	locs, err := LocateRange(ctx, c, h, tabA, []byte("c"), []byte("z"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, l := range locs {
		ids = append(ids, l.TabletID)
		if i > 0 && !bytes.Equal(l.Start, locs[i-1].End) {
			t.Errorf("%s starts at %q, the tablet before it ends at %q", l.TabletID, l.Start, locs[i-1].End)
		}
	}
	if want := []string{"a12", "a3", "a4"}; !slices.Equal(ids, want) {
		t.Fatalf("LocateRange over the merged layout = %v, want %v", ids, want)
	}
}

// TestLocateBeforeMetadataExists: a cluster whose root tablet is served
// but whose master has not yet written METADATA's first other tablet (the
// root has no rows): a lookup of a user row is ErrUnassigned, which
// callers retry, and does not recurse past the root; once the row is
// written the same cache finds the row.
func TestLocateBeforeMetadataExists(t *testing.T) {
	ctx := context.Background()
	h := newHierarchy()
	h.put(meta.RootLocation("r1", 1))
	c := NewLocationCache(LocationCacheOptions{})
	_, err := c.Locate(ctx, h, tabA, []byte("a"))
	if !errors.Is(err, ErrUnassigned) {
		t.Fatalf("lookup before METADATA's first tablet: %v, want ErrUnassigned", err)
	}
	if !transientLocate(err) {
		t.Fatalf("%v is not retried", err)
	}
	m1 := meta.Location{Table: meta.MetadataTable, Start: meta.RootTabletEnd(), TabletID: "M1", Server: "m1", Epoch: 2}
	h.put(m1)
	h.metaTabs = []meta.Location{m1}
	h.put(loc(tabA, "", "", "a0", "u0", 10))
	if l, err := c.Locate(ctx, h, tabA, []byte("a")); err != nil || l.TabletID != "a0" {
		t.Fatalf("after METADATA's first tablet was written: %+v %v", l, err)
	}
}
