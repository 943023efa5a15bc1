package meta

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// randBytes returns short strings over an alphabet rich in the bytes the
// escaping treats specially, so that prefixes and escapes collide often.
func randBytes(r *rand.Rand, maxLen int) []byte {
	alphabet := []byte{0x00, 0x01, 0x02, 0xFF, 'a', 'b'}
	b := make([]byte, r.IntN(maxLen+1))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return b
}

func randTable(r *rand.Rand) TableID {
	if r.IntN(8) == 0 {
		return MetadataTable
	}
	inst := string(randBytes(r, 3))
	if inst == "" {
		inst = "i"
	}
	return TableID{Instance: inst, Table: string(randBytes(r, 3))}
}

// compareModel orders (table, end row) as METADATA must: by instance, by
// table, then by end row with "" (the last tablet) after every other.
func compareModel(t1 TableID, e1 []byte, t2 TableID, e2 []byte) int {
	if c := bytes.Compare([]byte(t1.Instance), []byte(t2.Instance)); c != 0 {
		return c
	}
	if c := bytes.Compare([]byte(t1.Table), []byte(t2.Table)); c != 0 {
		return c
	}
	switch {
	case len(e1) == 0 && len(e2) == 0:
		return 0
	case len(e1) == 0:
		return 1
	case len(e2) == 0:
		return -1
	}
	return bytes.Compare(e1, e2)
}

func TestMetadataRowKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50000; i++ {
		t1, t2 := randTable(r), randTable(r)
		if r.IntN(3) == 0 {
			t2 = t1
		}
		e1, e2 := randBytes(r, 5), randBytes(r, 5)
		if r.IntN(4) == 0 && len(e1) > 0 {
			e2 = e1[:r.IntN(len(e1))] // a prefix
		}
		k1, k2 := MetadataRowKey(t1, e1), MetadataRowKey(t2, e2)
		got, want := bytes.Compare(k1, k2), compareModel(t1, e1, t2, e2)
		if got != want {
			t.Fatalf("(%q,%q) vs (%q,%q): keys compare %d, want %d\n%x\n%x", t1, e1, t2, e2, got, want, k1, k2)
		}
		// The table's range holds its keys and no other table's.
		s, e := MetadataTableRange(t1)
		in := bytes.Compare(k2, s) >= 0 && bytes.Compare(k2, e) < 0
		if in != (t1 == t2) {
			t.Fatalf("key of (%q,%q) in range of %q: %v", t2, e2, t1, in)
		}
	}
}

func TestMetadataRowKeyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		tab, end := randTable(r), randBytes(r, 8)
		k := MetadataRowKey(tab, end)
		gt, ge, err := ParseMetadataRowKey(k)
		if err != nil {
			t.Fatalf("(%q,%q): %v", tab, end, err)
		}
		if gt != tab || !bytes.Equal(ge, end) || (len(end) == 0) != (ge == nil) {
			t.Fatalf("(%q,%q) decoded as (%q,%q)", tab, end, gt, ge)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {'a', 0, 1}, {'a', 0, 1, 'b', 0, 1}, {'a', 0, 1, 'b', 0, 1, 3},
		{'a', 0, 1, 'b', 0, 1, 2, 0}, {'a', 0, 1, 'b', 0, 1, 1, 0, 1}, {'a', 0, 1, 'b', 0, 1, 1, 'x', 0}, {'a', 0, 7}} {
		if _, _, err := ParseMetadataRowKey(bad); !errors.Is(err, ErrMalformedMetadata) {
			t.Errorf("%x: got %v, want ErrMalformedMetadata", bad, err)
		}
	}
}

// TestMetadataLookup builds the METADATA keys of several tables split at
// random rows and checks that the first key at or after
// MetadataLookupKey(table, row) is the tablet holding row.
func TestMetadataLookup(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 200; round++ {
		type tab struct {
			id     TableID
			splits [][]byte // sorted, distinct, non-empty
		}
		var tabs []tab
		var keys [][]byte
		seen := map[TableID]bool{}
		for n := 1 + r.IntN(4); len(tabs) < n; {
			id := randTable(r)
			if seen[id] {
				continue
			}
			seen[id] = true
			set := map[string]bool{}
			for i := r.IntN(12); i > 0; i-- {
				if s := randBytes(r, 4); len(s) > 0 {
					set[string(s)] = true
				}
			}
			var splits [][]byte
			for s := range set {
				splits = append(splits, []byte(s))
			}
			slices.SortFunc(splits, bytes.Compare)
			tabs = append(tabs, tab{id, splits})
			for _, s := range splits {
				keys = append(keys, MetadataRowKey(id, s))
			}
			keys = append(keys, MetadataRowKey(id, nil))
		}
		slices.SortFunc(keys, bytes.Compare)
		for _, tb := range tabs {
			probes := slices.Clone(tb.splits) // rows equal to end rows are the hard case
			for i := 0; i < 20; i++ {
				probes = append(probes, randBytes(r, 5))
			}
			probes = append(probes, nil)
			for _, row := range probes {
				lk := MetadataLookupKey(tb.id, row)
				i := sort.Search(len(keys), func(i int) bool { return bytes.Compare(keys[i], lk) >= 0 })
				if i == len(keys) {
					t.Fatalf("%q row %q: no key after the lookup key", tb.id, row)
				}
				gt, end, err := ParseMetadataRowKey(keys[i])
				if err != nil || gt != tb.id {
					t.Fatalf("%q row %q: found (%q, %q) %v", tb.id, row, gt, end, err)
				}
				// The tablet ending at end holds row: end > row, and the
				// previous split (its start) ≤ row.
				j := sort.Search(len(tb.splits), func(j int) bool { return bytes.Compare(tb.splits[j], row) > 0 })
				var want []byte
				if j < len(tb.splits) {
					want = tb.splits[j]
				}
				if !bytes.Equal(end, want) {
					t.Fatalf("%q row %q: found tablet ending %q, want %q", tb.id, row, end, want)
				}
			}
		}
	}
}

func TestRootTabletRange(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	rootEnd := RootTabletEnd()
	root := RootLocation("s1:1", 3)
	if !root.IsRoot() || root.TabletID != RootTabletID {
		t.Fatalf("RootLocation %+v", root)
	}
	for i := 0; i < 20000; i++ {
		row := randBytes(r, 6)
		// Every row describing a METADATA tablet, and every lookup of one,
		// is in the root tablet's range.
		for _, k := range [][]byte{MetadataRowKey(MetadataTable, row), MetadataLookupKey(MetadataTable, row)} {
			if !root.Contains(k) {
				t.Fatalf("METADATA key %x not in the root range (end %x)", k, rootEnd)
			}
		}
		// Every user table's row is after it.
		u := randTable(r)
		if u == MetadataTable {
			continue
		}
		for _, k := range [][]byte{MetadataRowKey(u, row), MetadataLookupKey(u, row)} {
			if bytes.Compare(k, rootEnd) < 0 {
				t.Fatalf("user key %x (%q) before the root's end %x", k, u, rootEnd)
			}
		}
	}
	// The root's own key would lie in its range: it is not a METADATA row,
	// its parent is the lock service.
	if !root.Contains(root.MetadataKey()) {
		t.Fatal("root key outside the root")
	}
}

// fullState returns a state with every field set; the test fails when
// State gains a field this file does not know, so that StateMutation is
// taught about it.
func fullState(t *testing.T) tabletdesc.State {
	st := tabletdesc.State{
		ID:    "t-17",
		Start: []byte("a\x00b"),
		End:   []byte("m\xff\x00"),
		Groups: map[string][]tabletdesc.FileMeta{
			"default": {{Name: "tables/i/t/1.sst", Size: 100, SmallestKey: []byte{0, 1}, LargestKey: []byte{9}, MaxSeq: 7, Entries: 3}},
			"mem":     {{Name: "tables/i/t/2.sst", Size: 5}, {Name: "tables/i/t/3.sst", Size: 6}},
		},
		RedoPoint:  tabletdesc.LogPosition{Segment: 4, Offset: 1 << 40},
		FlushedSeq: 99,
		LastSeq:    120,
		Families:   []string{"f", "g"},
		Drops:      map[string]uint64{"old": 50},
		Parent:     "t-3",
		SplitInto:  []string{"t-18", "t-19"},
		SplitKey:   []byte("h\x00"),
		MergedFrom: []string{"t-1", "t-2"},
	}
	v := reflect.ValueOf(st)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("fullState leaves tabletdesc.State.%s zero: teach StateMutation and parseStateCell the new field", v.Type().Field(i).Name)
		}
	}
	return st
}

// openMetadataTablet opens a tablet of METADATA over the whole key space.
func openMetadataTablet(t *testing.T) *tablet.Tablet {
	t.Helper()
	store := blob.NewMemory()
	tb, err := tablet.Open(context.Background(), tablet.Options{
		ID: "meta-test", Schema: tabletdesc.Schema{Families: MetadataFamilies()},
		Store: store, Dir: "m", StateStore: tablet.NewBlobStateStore(store, "states"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func TestMetadataRowThroughTablet(t *testing.T) {
	ctx := context.Background()
	tb := openMetadataTablet(t)
	table := TableID{Instance: "i", Table: "web"}
	st := fullState(t)
	apply := func(rm cell.RowMutation, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Apply(ctx, rm); err != nil {
			t.Fatal(err)
		}
	}
	apply(StateMutation(table, st, 1000))
	apply(LocationMutation(table, st.End, "old:1", 4, 1000), nil)
	apply(LocationMutation(table, st.End, "host:7", 5, 2000), nil)
	apply(EventMutation(table, st.End, Event{Time: 1000, Kind: EventLoad, Server: "old:1", Epoch: 4}))
	apply(EventMutation(table, st.End, Event{Time: 2000, Kind: EventLoad, Server: "host:7", Epoch: 5, Detail: "moved"}))
	apply(EventMutation(table, st.End, Event{Time: 1500, Kind: EventSplit, Detail: "from t-3"}))

	row, ok, err := tb.ReadRow(ctx, MetadataRowKey(table, st.End), tablet.ReadOptions{})
	if err != nil || !ok {
		t.Fatalf("read: %v %v", ok, err)
	}
	e, err := ParseMetadataRow(row)
	if err != nil {
		t.Fatal(err)
	}
	if e.Table != table || !reflect.DeepEqual(e.State, st) {
		t.Fatalf("state round trip:\n got %+v\nwant %+v", e.State, st)
	}
	want := Location{Table: table, Start: st.Start, End: st.End, TabletID: st.ID, Server: "host:7", Epoch: 5}
	if loc, err := ParseLocation(row); err != nil || !reflect.DeepEqual(loc, want) {
		t.Fatalf("location %+v %v, want %+v", loc, err, want)
	}
	wantEv := []Event{
		{Time: 2000, Kind: EventLoad, Server: "host:7", Epoch: 5, Detail: "moved"},
		{Time: 1000, Kind: EventLoad, Server: "old:1", Epoch: 4},
		{Time: 1500, Kind: EventSplit, Detail: "from t-3"},
	}
	if !reflect.DeepEqual(e.Events, wantEv) {
		t.Fatalf("events %+v, want %+v", e.Events, wantEv)
	}

	// A smaller state replaces the whole family: dropped groups and fields go.
	small := tabletdesc.State{ID: st.ID, Start: st.Start, End: st.End, Groups: map[string][]tabletdesc.FileMeta{"default": {{Name: "x.sst"}}}, LastSeq: 200}
	apply(StateMutation(table, small, 3000))
	row, _, err = tb.ReadRow(ctx, MetadataRowKey(table, st.End), tablet.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e, err = ParseMetadataRow(row); err != nil || !reflect.DeepEqual(e.State, small) || e.Server != "host:7" {
		t.Fatalf("after replace: %+v %v", e, err)
	}
}

func TestMetadataStateRoundTripLastTablet(t *testing.T) {
	// The last tablet (empty end) and the first (empty start) decode with
	// nil rows; a row of the root tablet's table decodes too.
	for _, table := range []TableID{{Instance: "i", Table: "t"}, MetadataTable} {
		st := tabletdesc.State{ID: "x"}
		rm, err := StateMutation(table, st, 5)
		if err != nil {
			t.Fatal(err)
		}
		row := cell.Row{Key: rm.Row}
		for _, m := range rm.Mutations {
			if m.Kind == cell.SetCell {
				row.Cells = append(row.Cells, cell.Cell{Family: m.Family, Qualifier: m.Qualifier, Timestamp: m.Timestamp, Value: m.Value})
			}
		}
		slices.SortFunc(row.Cells, func(a, b cell.Cell) int { return cell.CompareColumns(a.Family, a.Qualifier, b.Family, b.Qualifier) })
		e, err := ParseMetadataRow(row)
		if err != nil || e.Table != table || !reflect.DeepEqual(e.State, st) {
			t.Fatalf("%q: %+v %v", table, e, err)
		}
	}
}

func TestParseMetadataRowErrors(t *testing.T) {
	key := MetadataRowKey(TableID{Instance: "i", Table: "t"}, []byte("e"))
	for _, c := range []cell.Cell{
		{Family: FamilyLoc, Qualifier: []byte(QualEpoch), Value: []byte{1}},
		{Family: FamilyState, Qualifier: []byte(QualRedo), Value: []byte{1, 2}},
		{Family: FamilyState, Qualifier: []byte(QualFilesPrefix + "g"), Value: []byte("{")},
		{Family: FamilyLog, Qualifier: []byte(EventLoad), Value: []byte("nope")},
	} {
		if _, err := ParseMetadataRow(cell.Row{Key: key, Cells: []cell.Cell{c}}); !errors.Is(err, ErrMalformedMetadata) {
			t.Errorf("%s:%s=%q: got %v", c.Family, c.Qualifier, c.Value, err)
		}
	}
	// Unknown columns are ignored.
	if _, err := ParseMetadataRow(cell.Row{Key: key, Cells: []cell.Cell{{Family: "future", Value: []byte("?")}, {Family: FamilyState, Qualifier: []byte("future")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := EventMutation(TableID{}, nil, Event{}); err == nil {
		t.Fatal("event without kind accepted")
	}
}

// FuzzParseMetadataRowKey checks that the decoder never panics, accepts
// only canonical keys, and that decoding and encoding are inverse.
func FuzzParseMetadataRowKey(f *testing.F) {
	f.Add(MetadataRowKey(TableID{Instance: "i", Table: "t"}, []byte("row")))
	f.Add(MetadataRowKey(MetadataTable, nil))
	f.Add(MetadataLookupKey(TableID{Instance: "i\x00", Table: "t"}, []byte("\x00\xff")))
	f.Add(RootTabletEnd())
	f.Fuzz(func(t *testing.T, key []byte) {
		tab, end, err := ParseMetadataRowKey(key)
		if err != nil {
			if !errors.Is(err, ErrMalformedMetadata) {
				t.Fatalf("error %v does not match ErrMalformedMetadata", err)
			}
			return
		}
		if re := MetadataRowKey(tab, end); !bytes.Equal(re, key) {
			t.Fatalf("%x decodes to (%q, %q) which encodes to %x", key, tab, end, re)
		}
	})
}

// FuzzParseMetadataRow feeds arbitrary cell values to the row decoder.
func FuzzParseMetadataRow(f *testing.F) {
	f.Add(uint8(1), "epoch", []byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(uint8(2), "files:default", []byte(`[{"name":"a.sst","size":3}]`))
	f.Add(uint8(2), "redo", make([]byte, 16))
	f.Add(uint8(3), "load", []byte(`{"server":"h:1"}`))
	key := MetadataRowKey(TableID{Instance: "i", Table: "t"}, []byte("e"))
	f.Fuzz(func(t *testing.T, fam uint8, qual string, value []byte) {
		family := []string{"x", FamilyLoc, FamilyState, FamilyLog}[fam%4]
		row := cell.Row{Key: key, Cells: []cell.Cell{{Family: family, Qualifier: []byte(qual), Timestamp: 1, Value: value}}}
		if _, err := ParseMetadataRow(row); err != nil && !errors.Is(err, ErrMalformedMetadata) {
			t.Fatalf("error %v does not match ErrMalformedMetadata", err)
		}
	})
}

// MetadataKeyTable finds the table of row keys, lookup keys and range
// bounds, and refuses keys without two whole components.
func TestMetadataKeyTable(t *testing.T) {
	users := TableID{Instance: "i", Table: "users\x00x"}
	start, end := MetadataTableRange(users)
	for _, key := range [][]byte{MetadataRowKey(users, []byte("m")), MetadataRowKey(users, nil), MetadataLookupKey(users, []byte("k\x00")), start} {
		got, s, e, ok := MetadataKeyTable(key)
		if !ok || got != users || string(s) != string(start) || string(e) != string(end) {
			t.Errorf("MetadataKeyTable(%q) = %v %q %q %v, want %v", key, got, s, e, ok, users)
		}
		if string(key) < string(s) || string(key) >= string(e) {
			t.Errorf("key %q outside its table's range [%q, %q)", key, s, e)
		}
	}
	if got, _, _, ok := MetadataKeyTable(MetadataLookupKey(MetadataTable, MetadataRowKey(users, nil))); !ok || got != MetadataTable {
		t.Errorf("a root lookup key: %v %v, want METADATA", got, ok)
	}
	for _, key := range [][]byte{nil, []byte("i"), start[:len(start)-1], end[len(end)-1:]} {
		if _, _, _, ok := MetadataKeyTable(key); ok {
			t.Errorf("MetadataKeyTable(%q) ok", key)
		}
	}
}
