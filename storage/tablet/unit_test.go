package tablet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestGCPolicyCollects(t *testing.T) {
	const now = int64(1_000_000_000)
	hour := time.Hour
	old := now - 2*hour.Microseconds()
	young := now - hour.Microseconds()/2
	cases := []struct {
		name  string
		p     tabletdesc.GCPolicy
		index int
		ts    int64
		want  bool
	}{
		{"zero keeps", tabletdesc.GCPolicy{}, 100, 0, false},
		{"max versions keeps newest", tabletdesc.GCPolicy{MaxVersions: 2}, 1, old, false},
		{"max versions collects", tabletdesc.GCPolicy{MaxVersions: 2}, 2, young, true},
		{"max age keeps young", tabletdesc.GCPolicy{MaxAge: hour}, 5, young, false},
		{"max age collects old", tabletdesc.GCPolicy{MaxAge: hour}, 0, old, true},
		{"fields are a union", tabletdesc.GCPolicy{MaxVersions: 1, MaxAge: hour}, 0, old, true},
		{"union any", tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{MaxVersions: 3}, {MaxAge: hour}}}, 0, old, true},
		{"union none", tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{MaxVersions: 3}, {MaxAge: hour}}}, 1, young, false},
		{"intersection all", tabletdesc.GCPolicy{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 1}, {MaxAge: hour}}}, 1, old, true},
		{"intersection not all (young)", tabletdesc.GCPolicy{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 1}, {MaxAge: hour}}}, 1, young, false},
		{"intersection not all (newest)", tabletdesc.GCPolicy{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 1}, {MaxAge: hour}}}, 0, old, false},
		{"intersection with a zero policy never", tabletdesc.GCPolicy{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 1}, {}}}, 5, old, false},
		{"nested", tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 2}, {MaxAge: hour}}}, {MaxVersions: 5}}}, 2, old, true},
		{"nested keeps", tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 2}, {MaxAge: hour}}}, {MaxVersions: 5}}}, 3, young, false},
	}
	for _, c := range cases {
		if got := c.p.Collects(c.index, c.ts, now); got != c.want {
			t.Errorf("%s: Collects(%d, %d) = %v, want %v", c.name, c.index, c.ts, got, c.want)
		}
	}
}

// TestGCPolicySuffix checks the property compaction relies on: what a
// policy collects is a suffix of the versions, newest first.
func TestGCPolicySuffix(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var gen func(depth int) tabletdesc.GCPolicy
	gen = func(depth int) tabletdesc.GCPolicy {
		var p tabletdesc.GCPolicy
		switch r.IntN(4) {
		case 0:
			p.MaxVersions = r.IntN(4)
		case 1:
			p.MaxAge = time.Duration(r.IntN(100)) * time.Microsecond
		default:
			if depth < 3 {
				for range 1 + r.IntN(3) {
					if r.IntN(2) == 0 {
						p.Union = append(p.Union, gen(depth+1))
					} else {
						p.Intersection = append(p.Intersection, gen(depth+1))
					}
				}
			}
		}
		return p
	}
	for range 2000 {
		p := gen(0)
		ts := make([]int64, 1+r.IntN(8))
		for i := range ts {
			ts[i] = int64(r.IntN(200))
		}
		slices.Sort(ts)
		slices.Reverse(ts)
		collected := false
		for i, x := range ts {
			c := p.Collects(i, x, 200)
			if collected && !c {
				t.Fatalf("policy %+v collects version %d of %v but not a later one", p, i-1, ts)
			}
			collected = collected || c
		}
	}
}

func set(row, fam, qual string, ts int64, seq uint64, val string) entry {
	return entry{key: cell.EncodeKey(cell.Key{Row: []byte(row), Family: fam, Qualifier: []byte(qual), Timestamp: ts, Seq: seq, Kind: cell.KindSet}), value: []byte(val)}
}

func delCol(row, fam, qual string, start, end int64, seq uint64) entry {
	return entry{key: cell.EncodeKey(cell.Key{Row: []byte(row), Family: fam, Qualifier: []byte(qual), Seq: seq, Kind: cell.KindColumnDelete}), value: cell.EncodeTimeRange(start, end)}
}

func delFam(row, fam string, seq uint64) entry {
	return entry{key: cell.EncodeKey(cell.Key{Row: []byte(row), Family: fam, Seq: seq, Kind: cell.KindFamilyDelete})}
}

func delRow(row string, seq uint64) entry {
	return entry{key: cell.EncodeKey(cell.Key{Row: []byte(row), Seq: seq, Kind: cell.KindRowDelete})}
}

func cellsString(cs []cell.Cell) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "%s:%s@%d=%s ", c.Family, c.Qualifier, c.Timestamp, c.Value)
	}
	return b.String()
}

func TestAssembleRow(t *testing.T) {
	fams := map[string]tabletdesc.Family{"a": {}, "b": {GC: tabletdesc.GCPolicy{MaxVersions: 1}}, "c": {}}
	cases := []struct {
		name    string
		entries []entry
		snap    uint64
		drops   map[string]uint64
		ro      ReadOptions
		want    string
	}{
		{"versions newest first", []entry{set("r", "a", "q", 1, 1, "x"), set("r", "a", "q", 2, 2, "y")}, 9, nil, ReadOptions{},
			"a:q@2=y a:q@1=x "},
		{"duplicate timestamp: higher seq wins, one version", []entry{set("r", "a", "q", 5, 1, "old"), set("r", "a", "q", 5, 3, "new")}, 9, nil, ReadOptions{},
			"a:q@5=new "},
		{"snapshot hides newer seq", []entry{set("r", "a", "q", 5, 1, "old"), set("r", "a", "q", 5, 3, "new")}, 2, nil, ReadOptions{},
			"a:q@5=old "},
		{"column delete range", []entry{set("r", "a", "q", 1, 1, "1"), set("r", "a", "q", 2, 2, "2"), set("r", "a", "q", 3, 3, "3"), delCol("r", "a", "q", 2, 3, 4)}, 9, nil, ReadOptions{},
			"a:q@3=3 a:q@1=1 "},
		{"write after delete with old timestamp survives", []entry{set("r", "a", "q", 2, 1, "1"), delCol("r", "a", "q", 0, 0, 2), set("r", "a", "q", 1, 3, "late")}, 9, nil, ReadOptions{},
			"a:q@1=late "},
		{"delete after dup shadows both", []entry{set("r", "a", "q", 5, 1, "x"), set("r", "a", "q", 5, 2, "y"), delCol("r", "a", "q", 5, 6, 3)}, 9, nil, ReadOptions{},
			""},
		{"family delete", []entry{set("r", "a", "q", 1, 1, "x"), delFam("r", "a", 2), set("r", "a", "z", 1, 3, "z"), set("r", "c", "q", 1, 1, "c")}, 9, nil, ReadOptions{},
			"a:z@1=z c:q@1=c "},
		{"row delete", []entry{delRow("r", 3), set("r", "a", "q", 1, 1, "x"), set("r", "a", "q", 2, 4, "y"), set("r", "c", "q", 1, 2, "c")}, 9, nil, ReadOptions{},
			"a:q@2=y "},
		{"row delete invisible at snapshot", []entry{delRow("r", 3), set("r", "a", "q", 1, 1, "x")}, 2, nil, ReadOptions{},
			"a:q@1=x "},
		{"duplicated row marker", []entry{delRow("r", 3), delRow("r", 3), set("r", "a", "q", 1, 1, "x")}, 9, nil, ReadOptions{},
			""},
		{"gc max versions then filter", []entry{set("r", "b", "q", 1, 1, "1"), set("r", "b", "q", 2, 2, "2")}, 9, nil, ReadOptions{StartTimestamp: 1, EndTimestamp: 2},
			""},
		{"gc counts live versions", []entry{set("r", "b", "q", 1, 1, "1"), set("r", "b", "q", 2, 2, "2"), delCol("r", "b", "q", 2, 3, 3)}, 9, nil, ReadOptions{},
			"b:q@1=1 "},
		{"unknown family dropped", []entry{set("r", "zz", "q", 1, 1, "1"), set("r", "a", "q", 1, 1, "a")}, 9, nil, ReadOptions{},
			"a:q@1=a "},
		{"drop shadows older", []entry{set("r", "a", "q", 1, 1, "old"), set("r", "a", "w", 1, 5, "new")}, 9, map[string]uint64{"a": 3}, ReadOptions{},
			"a:w@1=new "},
		{"max versions and time range", []entry{set("r", "a", "q", 1, 1, "1"), set("r", "a", "q", 2, 2, "2"), set("r", "a", "q", 3, 3, "3"), set("r", "a", "q", 4, 4, "4")}, 9, nil, ReadOptions{EndTimestamp: 4, MaxVersions: 2},
			"a:q@3=3 a:q@2=2 "},
		{"families and columns filter", []entry{set("r", "a", "q", 1, 1, "1"), set("r", "a", "w", 1, 1, "w"), set("r", "c", "q", 1, 1, "c")}, 9, nil, ReadOptions{Families: []string{"c"}, Columns: []Column{{Family: "a", Qualifier: []byte("w")}}},
			"a:w@1=w c:q@1=c "},
	}
	for _, c := range cases {
		es := slices.Clone(c.entries)
		sortEntries(es)
		r, ok, err := assembleRow([]byte("r"), es, resolveParams{snap: c.snap, families: fams, drops: c.drops, now: 100}, c.ro)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := cellsString(r.Cells)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: got %q (ok %v), want %q", c.name, got, ok, c.want)
		}
	}
}

func TestMergingIter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for round := range 200 {
		nsrc := 1 + r.IntN(4)
		var all []entry
		srcs := make([][]entry, nsrc)
		seq := uint64(0)
		for i := range 30 + r.IntN(50) {
			_ = i
			seq++
			e := set(fmt.Sprintf("r%02d", r.IntN(20)), "f", fmt.Sprintf("q%d", r.IntN(3)), int64(r.IntN(5)), seq, "v")
			if r.IntN(10) == 0 {
				e = delRow(fmt.Sprintf("r%02d", r.IntN(20)), seq)
			}
			s := r.IntN(nsrc)
			srcs[s] = append(srcs[s], e)
			all = append(all, e)
			if r.IntN(8) == 0 && nsrc > 1 { // a duplicate in another source
				s2 := (s + 1) % nsrc
				srcs[s2] = append(srcs[s2], e)
				all = append(all, e)
			}
		}
		iters := make([]cell.Iterator, nsrc)
		for i := range srcs {
			sortEntries(srcs[i])
			iters[i] = newSliceIter(srcs[i])
		}
		sortEntries(all)
		var lower, upper []byte
		if r.IntN(2) == 0 {
			lower = cell.RowPrefix(fmt.Appendf(nil, "r%02d", r.IntN(10)))
		}
		if r.IntN(2) == 0 {
			upper = cell.RowPrefix(fmt.Appendf(nil, "r%02d", 10+r.IntN(10)))
		}
		var want []entry
		for _, e := range all {
			if (lower == nil || bytes.Compare(e.key, lower) >= 0) && (upper == nil || bytes.Compare(e.key, upper) < 0) {
				want = append(want, e)
			}
		}
		m := newMergingIter(lower, upper, iters...)
		var got []entry
		for ok := m.First(); ok; ok = m.Next() {
			got = append(got, entry{key: m.Key(), value: m.Value()})
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: forward got %d entries, want %d", round, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].key, want[i].key) {
				t.Fatalf("round %d: entry %d differs", round, i)
			}
		}
		// SeekGE and SeekLT at random keys, then Next.
		for range 20 {
			k := cell.RowPrefix(fmt.Appendf(nil, "r%02d", r.IntN(22)))
			i := sortSearch(want, k)
			ok := m.SeekGE(k)
			if ok != (i < len(want)) || (ok && !bytes.Equal(m.Key(), want[i].key)) {
				t.Fatalf("round %d: SeekGE mismatch", round)
			}
			ok = m.SeekLT(k)
			if ok != (i > 0) || (ok && !bytes.Equal(m.Key(), want[i-1].key)) {
				t.Fatalf("round %d: SeekLT mismatch (ok %v, want index %d)", round, ok, i-1)
			}
			if ok {
				// Next after SeekLT continues forward through
				// the duplicates of the current key.
				for j := i; j < len(want); j++ {
					if !m.Next() || !bytes.Equal(m.Key(), want[j].key) {
						t.Fatalf("round %d: Next after SeekLT mismatch at %d", round, j)
					}
				}
				if m.Next() {
					t.Fatalf("round %d: Next after SeekLT past the end", round)
				}
			}
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func sortSearch(es []entry, k []byte) int {
	i, _ := slices.BinarySearchFunc(es, k, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
	for i > 0 && bytes.Compare(es[i-1].key, k) >= 0 {
		i--
	}
	return i
}

func TestFileCreated(t *testing.T) {
	now := time.Now()
	young := newFileName("t1", now.Add(-time.Second))
	if ts, ok := FileCreated(young); !ok || ts.UnixMicro() != now.Add(-time.Second).UnixMicro() {
		t.Fatalf("FileCreated(%s) = %v, %v", young, ts, ok)
	}
	if _, ok := FileCreated("t1/notours.sst"); ok {
		t.Fatal("FileCreated accepted a name no tablet makes")
	}
}

func TestBlobStateStore(t *testing.T) {
	ctx := context.Background()
	ss := NewBlobStateStore(blob.NewMemory(), "states")
	if _, err := ss.Load(ctx, "t1"); !errors.Is(err, ErrStateNotFound) {
		t.Fatalf("Load of a missing state: %v", err)
	}
	st := tabletdesc.State{ID: "t1", Start: []byte("a"), End: []byte("m\x00"), FlushedSeq: 7,
		Groups: map[string][]tabletdesc.FileMeta{"default": {{Name: "x.sst", SmallestKey: []byte{0, 1}}}}}
	if err := ss.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, err := ss.Load(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.End, st.End) || got.FlushedSeq != 7 || got.Groups["default"][0].Name != "x.sst" {
		t.Fatalf("round trip: %+v", got)
	}
	if err := ss.Save(ctx, tabletdesc.State{ID: "a/b"}); err == nil {
		t.Fatal("saved a state with '/' in its ID")
	}
}
