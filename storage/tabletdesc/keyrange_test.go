package tabletdesc

import (
	"bytes"
	"testing"
)

func b(s string) []byte {
	if s == "-" {
		return nil
	}
	return []byte(s)
}

func TestKeyRangeContains(t *testing.T) {
	for _, tc := range []struct {
		start, end, row string
		want            bool
	}{
		{"", "", "", true}, // the whole table
		{"", "", "zzz", true},
		{"b", "d", "a", false},
		{"b", "d", "b", true}, // start inclusive
		{"b", "d", "c\xff", true},
		{"b", "d", "d", false}, // end exclusive
		{"b", "", "\xff\xff", true},
		{"b", "-", "b", true}, // nil end: unbounded
		{"-", "b", "", true},
	} {
		r := KeyRange{Start: b(tc.start), End: b(tc.end)}
		if got := r.Contains([]byte(tc.row)); got != tc.want {
			t.Errorf("[%q, %q).Contains(%q) = %v", tc.start, tc.end, tc.row, got)
		}
	}
}

func TestKeyRangeEmptyAndUnbounded(t *testing.T) {
	for _, tc := range []struct {
		start, end       string
		empty, unbounded bool
	}{
		{"", "", false, true},
		{"a", "-", false, true},
		{"a", "", false, true},
		{"a", "b", false, false},
		{"b", "b", true, false},
		{"c", "b", true, false},
		{"", "a", false, false},
	} {
		r := KeyRange{Start: b(tc.start), End: b(tc.end)}
		if r.Empty() != tc.empty || r.Unbounded() != tc.unbounded {
			t.Errorf("[%q, %q): Empty %v Unbounded %v, want %v %v", tc.start, tc.end, r.Empty(), r.Unbounded(), tc.empty, tc.unbounded)
		}
	}
}

func TestCompareEnds(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"-", "", 0},
		{"", "a", 1},
		{"a", "-", -1},
		{"a", "b", -1},
		{"b", "a", 1},
		{"a", "a", 0},
	} {
		if got := CompareEnds(b(tc.a), b(tc.b)); got != tc.want {
			t.Errorf("CompareEnds(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestKeyRangeAgainstRows checks Overlaps, Covers and Intersect against
// their definitions over explicit sets of rows, for every pair of ranges
// over a small alphabet (including empty and unbounded ones).
func TestKeyRangeAgainstRows(t *testing.T) {
	keys := []string{"", "a", "b", "c", "d"}
	rows := []string{"", "a", "a\x00", "b", "b\x00", "c", "c\x00", "d", "d\x00", "z"}
	var ranges []KeyRange
	for _, s := range keys {
		for _, e := range keys {
			ranges = append(ranges, KeyRange{Start: b(s), End: b(e)})
		}
		ranges = append(ranges, KeyRange{Start: b(s)}) // nil end
	}
	in := func(r KeyRange) map[string]bool {
		out := make(map[string]bool)
		for _, row := range rows {
			if r.Contains([]byte(row)) {
				out[row] = true
			}
		}
		return out
	}
	for _, r := range ranges {
		for _, o := range ranges {
			rs, os := in(r), in(o)
			shared, covered := false, true
			for row := range os {
				if rs[row] {
					shared = true
				} else {
					covered = false
				}
			}
			if !r.Empty() && !o.Empty() && r.Overlaps(o) != shared {
				t.Errorf("[%q, %q).Overlaps([%q, %q)) = %v, rows shared %v", r.Start, r.End, o.Start, o.End, r.Overlaps(o), shared)
			}
			if r.Overlaps(o) != o.Overlaps(r) {
				t.Errorf("Overlaps not symmetric for [%q, %q) and [%q, %q)", r.Start, r.End, o.Start, o.End)
			}
			if !o.Empty() && r.Covers(o) != covered {
				t.Errorf("[%q, %q).Covers([%q, %q)) = %v, rows covered %v", r.Start, r.End, o.Start, o.End, r.Covers(o), covered)
			}
			x := r.Intersect(o)
			xs := in(x)
			for _, row := range rows {
				if xs[row] != (rs[row] && os[row]) {
					t.Errorf("[%q, %q) ∩ [%q, %q) = [%q, %q): row %q in it %v", r.Start, r.End, o.Start, o.End, x.Start, x.End, row, xs[row])
				}
			}
			// Every range starts at one of the sample rows, so a range
			// that is not Empty holds a sample row.
			if x.Empty() == shared {
				t.Errorf("[%q, %q) ∩ [%q, %q) = [%q, %q): Empty %v, rows shared %v", r.Start, r.End, o.Start, o.End, x.Start, x.End, x.Empty(), shared)
			}
		}
	}
}

func TestLogPositionCompare(t *testing.T) {
	ps := []LogPosition{{}, {Segment: 0, Offset: 7}, {Segment: 1, Offset: 0}, {Segment: 1, Offset: 3}, {Segment: 2, Offset: 0}}
	for i, p := range ps {
		for j, q := range ps {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := p.Compare(q); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", p, q, got, want)
			}
		}
	}
	if s := (LogPosition{Segment: 3, Offset: 42}).String(); s != "3:42" {
		t.Errorf("String %q", s)
	}
}

func TestSchemaGroupsAndClone(t *testing.T) {
	s := Schema{
		Families:       map[string]Family{"a": {}, "b": {LocalityGroup: "mem"}, "c": {Name: "c", GC: GCPolicy{MaxVersions: 1}}},
		LocalityGroups: map[string]LocalityGroup{"mem": {InMemory: true, Compression: ZstdCompression}},
	}
	if g, ok := s.GroupOf("a"); !ok || g != DefaultLocalityGroup {
		t.Errorf("GroupOf(a) = %q, %v", g, ok)
	}
	if g, ok := s.GroupOf("b"); !ok || g != "mem" {
		t.Errorf("GroupOf(b) = %q, %v", g, ok)
	}
	if _, ok := s.GroupOf("x"); ok {
		t.Error("GroupOf(x) found a family")
	}
	if gs := s.Groups(); len(gs) != 2 || !gs["mem"] || !gs[DefaultLocalityGroup] {
		t.Errorf("Groups %v", gs)
	}
	if g := s.Group("mem"); g.Name != "mem" || !g.InMemory || g.Compression != ZstdCompression {
		t.Errorf("Group(mem) %+v", g)
	}
	if g := s.Group("other"); g != (LocalityGroup{Name: "other"}) {
		t.Errorf("Group(other) %+v", g)
	}
	c := s.Clone()
	if c.Families["a"].Name != "a" || c.Families["c"].GC.MaxVersions != 1 {
		t.Errorf("Clone families %+v", c.Families)
	}
	c.Families["d"] = Family{}
	c.LocalityGroups["x"] = LocalityGroup{}
	if len(s.Families) != 3 || len(s.LocalityGroups) != 1 {
		t.Error("Clone shares its maps")
	}
	if err := (Schema{Families: map[string]Family{"f": {Name: "g"}}}).Validate(); err == nil {
		t.Error("Validate accepted a family listed under another name")
	}
	if err := (Schema{Families: map[string]Family{"bad:name": {}}}).Validate(); err == nil {
		t.Error("Validate accepted a bad family name")
	}
	for c, want := range map[Compression]string{NoCompression: "none", SnappyCompression: "snappy", ZstdCompression: "zstd", 9: "compression(9)"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q", uint8(c), c.String())
		}
	}
}

func TestStateCloneAndFiles(t *testing.T) {
	st := State{ID: "t", Start: []byte("a"), Groups: map[string][]FileMeta{"z": {{Name: "z1"}}, "default": {{Name: "d1"}, {Name: "d2"}}},
		Drops: map[string]uint64{"f": 3}, Families: []string{"f"}, SplitInto: []string{"l", "r"}}
	if got := st.Files(); len(got) != 3 || got[0] != "d1" || got[1] != "d2" || got[2] != "z1" {
		t.Errorf("Files %v (want by group name, newest first within a group)", got)
	}
	c := st.Clone()
	c.Groups["default"][0].Name = "changed"
	c.Drops["g"] = 1
	c.Families[0] = "x"
	c.SplitInto[0] = "x"
	if st.Groups["default"][0].Name != "d1" || len(st.Drops) != 1 || st.Families[0] != "f" || st.SplitInto[0] != "l" {
		t.Errorf("Clone shares state: %+v", st)
	}
	if r := st.Range(); !bytes.Equal(r.Start, []byte("a")) || !r.Unbounded() {
		t.Errorf("Range %+v", r)
	}
}
