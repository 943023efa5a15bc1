package filter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
)

func TestPushDownHints(t *testing.T) {
	tests := []struct {
		name       string
		filter     *bigtablepb.RowFilter
		families   []string // want Hints.Families (nil = unknown)
		famOK      []string // families Hints.Family must accept
		famNot     []string // families Hints.Family must refuse
		start, end int64
		versions   int
	}{
		{name: "no filter"},
		{name: "interleave gives nothing", filter: interleave(familyRegex("a"), familyRegex("b")), famOK: []string{"a", "b", "c"}},
		{name: "literal family", filter: familyRegex("a"), families: []string{"a"}, famOK: []string{"a"}, famNot: []string{"b", "aa"}},
		{name: "family regex", filter: familyRegex("a|b"), famOK: []string{"a", "b"}, famNot: []string{"c"}},
		{
			name:     "chain of family, timestamps and version limit",
			filter:   chain(familyRegex("a"), tsRange(1000, 5000), colLimit(2), valueRegex("x")),
			families: []string{"a"}, famOK: []string{"a"}, famNot: []string{"b"},
			start: 1000, end: 5000, versions: 2,
		},
		{
			name:     "per-cell filters commute, ranges intersect",
			filter:   chain(tsRange(1000, 0), qualRegex("x"), familyRegex("b"), keyRegex("r.*"), tsRange(0, 3000), colLimit(1)),
			families: []string{"b"}, famOK: []string{"b"}, famNot: []string{"a"},
			start: 1000, end: 3000,
		},
		{
			name:     "column range restricts its family",
			filter:   chain(colRange("c", "[x", ""), familyRegex("c|d")),
			families: []string{"c"}, famOK: []string{"c"}, famNot: []string{"d"},
		},
		{
			name:     "disjoint families",
			filter:   chain(familyRegex("a"), colRange("b", "", "")),
			families: []string{}, famNot: []string{"a", "b"},
		},
		{
			name:   "version limit after a transformer",
			filter: chain(strip(), label("l"), colLimit(3)), famOK: []string{"a"},
			versions: 3,
		},
		{
			name:   "nothing after a condition",
			filter: chain(cond(pass(), pass(), nil), familyRegex("a")), famOK: []string{"b"},
		},
		{
			name:   "timestamps before a limit, not after",
			filter: chain(colLimit(1), tsRange(5, 10)), famOK: []string{"a"},
			versions: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.filter, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			h := f.PushDown()
			if !slices.Equal(h.Families, tt.families) || (h.Families == nil) != (tt.families == nil) {
				t.Errorf("Families = %q, want %q", h.Families, tt.families)
			}
			for _, fam := range tt.famOK {
				if h.Family != nil && !h.Family(fam) {
					t.Errorf("Family(%q) = false, want true", fam)
				}
			}
			for _, fam := range tt.famNot {
				if h.Family == nil || h.Family(fam) {
					t.Errorf("Family(%q) accepted, want refused", fam)
				}
			}
			if h.TimestampStart != tt.start || h.TimestampEnd != tt.end {
				t.Errorf("timestamps [%d, %d), want [%d, %d)", h.TimestampStart, h.TimestampEnd, tt.start, tt.end)
			}
			if h.CellsPerColumn != tt.versions {
				t.Errorf("CellsPerColumn = %d, want %d", h.CellsPerColumn, tt.versions)
			}
		})
	}
}

// TestPushDownPreservesResults checks the Hints contract on random filters
// and rows: applying the filter to the row restricted by its hints gives the
// same output as applying it to the whole row, and so does restricting by
// family or by timestamp alone.
func TestPushDownPreservesResults(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	g := &generator{r: r, maxDepth: 3}
	restricted := 0
	for i := range 3000 {
		pb, _, _ := g.filter(0, genState{}, false, false)
		// Leading per-cell filters are what pushdown works on: put some
		// in front of half the filters.
		if i%4 != 0 {
			fs := []*bigtablepb.RowFilter{}
			for range 1 + r.IntN(3) {
				fs = append(fs, leadingFilter(g))
			}
			pb = chain(append(fs, pb)...)
		}
		seed := r.Uint64()
		f, err := Compile(pb, Limits{}, WithRand(rand.New(rand.NewPCG(seed, 0)).Float64))
		if err != nil {
			t.Fatalf("generated filter %v: %v", pb, err)
		}
		h := f.PushDown()
		famOnly := Hints{Family: h.Family}
		tsOnly := Hints{TimestampStart: h.TimestampStart, TimestampEnd: h.TimestampEnd}
		row := randomRow(r, fmt.Sprintf("r%d", i), 12)
		for _, hh := range []Hints{h, famOnly, tsOnly} {
			// Row sampling must flip the same coins on both rows.
			fa, _ := Compile(pb, Limits{}, WithRand(rand.New(rand.NewPCG(seed, 0)).Float64))
			fb, _ := Compile(pb, Limits{}, WithRand(rand.New(rand.NewPCG(seed, 0)).Float64))
			want := format(fa.Apply(row))
			in := make([]LabeledCell, len(row.Cells))
			for j, x := range row.Cells {
				in[j] = LabeledCell{Cell: x}
			}
			small := row
			small.Cells = nil
			for _, x := range hh.Restrict(in) {
				small.Cells = append(small.Cells, x.Cell)
			}
			if len(small.Cells) < len(row.Cells) {
				restricted++
			}
			if got := format(fb.Apply(small)); !slices.Equal(got, want) {
				t.Fatalf("filter %v\nhints %+v\nrow %q\nfull row gives %q\nrestricted row %q gives %q",
					pb, hh, format(in), want, format(hh.Restrict(in)), got)
			}
		}
	}
	// The property is only meaningful if the hints restrict often.
	if restricted < 1000 {
		t.Errorf("hints restricted only %d rows", restricted)
	}
}

// leadingFilter returns one of the filters PushDown looks at when they open
// a chain.
func leadingFilter(g *generator) *bigtablepb.RowFilter {
	r := g.r
	switch r.IntN(9) {
	case 0:
		return familyRegex(pick(r, []string{"a", "b", "[ab]", "b|c"}))
	case 1, 2:
		lo := 1000 * int64(r.IntN(6))
		return tsRange(lo, pick(r, []int64{0, lo + 1000, lo + 3000}))
	case 3, 4:
		return colLimit(int32(1 + r.IntN(2)))
	case 5:
		lo, hi := g.bounds(genQualifiers)
		return colRange(pick(r, genFamilies), lo, hi)
	case 6:
		return pick(r, []*bigtablepb.RowFilter{qualRegex("x|y"), valueRegex("a.*"), keyRegex("r.*")})
	case 7:
		return pick(r, []*bigtablepb.RowFilter{strip(), pass()})
	}
	return bitmask("a")
}
