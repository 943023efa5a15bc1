package assign

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSpanIndex checks the index against pairwise comparison on random
// ranges, unbounded ends included.
func TestSpanIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() string {
		if rng.IntN(8) == 0 {
			return ""
		}
		return fmt.Sprintf("k%02d", rng.IntN(30))
	}
	rangeOf := func(table string) span {
		a, b := key(), key()
		if b != "" && a >= b {
			a, b = b, a
		}
		if a == b && a != "" {
			b = ""
		}
		return span{table: table, start: a, end: b}
	}
	for trial := 0; trial < 2000; trial++ {
		var spans []span
		for i := rng.IntN(6); i > 0; i-- {
			spans = append(spans, rangeOf(fmt.Sprint("t", rng.IntN(2))))
		}
		idx := newSpanIndex(append([]span(nil), spans...))
		q := rangeOf(fmt.Sprint("t", rng.IntN(2)))
		want := false
		for _, s := range spans {
			want = want || s.overlaps(q)
		}
		if got := idx.overlaps(q); got != want {
			t.Fatalf("spans %v, query %v: got %v, want %v", spans, q, got, want)
		}
	}
}

func TestOverlappingMetadataHeld(t *testing.T) {
	// The view holds a parent and one of its children: caught between two
	// reads. Neither is assigned; the range is read again.
	st := State{Live: servers("s1"), Tablets: append(metaTablets(0),
		Tablet{ID: "p", Table: "t", Start: "a", End: "c"},
		Tablet{ID: "c1", Table: "t", Start: "a", End: "b"},
		Tablet{ID: "x", Table: "t", Start: "c", End: "d"})}
	place(&st, "root")
	if got := describe(Plan(st, noMerge)); got != `
  rescan t ["a", "b") (split)
  rescan t ["a", "c") (split)
  assign x to s1 (unassigned)` {
		t.Fatalf("got %s", got)
	}
}
