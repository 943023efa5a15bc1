package jobs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/beamio/keyrange"
)

func TestGroupShards(t *testing.T) {
	piece := func(s, e string, b int64) keyrange.Restriction {
		return keyrange.Restriction{Start: []byte(s), End: []byte(e), Bytes: b}
	}
	pieces := []keyrange.Restriction{piece("", "b", 100), piece("b", "c", 100), piece("c", "d", 100), piece("d", "e", 300), piece("e", "", 100)}
	got := GroupShards(pieces, 3)
	// 700 bytes in 3 shards: by the middle byte of each piece.
	var flat []keyrange.Restriction
	for i, g := range got {
		var sum int64
		for _, p := range g {
			sum += p.Bytes
		}
		t.Logf("shard %d: %v (%d bytes)", i, g, sum)
		flat = append(flat, g...)
	}
	if len(flat) != len(pieces) {
		t.Fatalf("%d pieces after grouping, want %d", len(flat), len(pieces))
	}
	for i := range pieces {
		if !bytes.Equal(flat[i].Start, pieces[i].Start) {
			t.Fatalf("grouping reordered the pieces: %v", got)
		}
	}
	if len(got[0]) != 2 || len(got[1]) != 2 || len(got[2]) != 1 {
		t.Fatalf("groups %v, want [a b] [c d] [e]", got)
	}
	// More shards than pieces: some are empty, none is lost.
	got = GroupShards(pieces[:2], 5)
	n := 0
	for _, g := range got {
		n += len(g)
	}
	if len(got) != 5 || n != 2 {
		t.Fatalf("2 pieces in 5 shards: %v", got)
	}
	// No sizes: by count.
	unsized := []keyrange.Restriction{piece("", "b", 0), piece("b", "c", 0), piece("c", "", 0)}
	got = GroupShards(unsized, 3)
	for i, g := range got {
		if len(g) != 1 {
			t.Fatalf("unsized: shard %d has %v", i, g)
		}
	}
}

func TestCoalesce(t *testing.T) {
	piece := func(s, e string, b int64) keyrange.Restriction {
		return keyrange.Restriction{Start: []byte(s), End: []byte(e), Bytes: b}
	}
	str := func(rs []keyrange.Restriction) string {
		var out string
		for _, r := range rs {
			out += fmt.Sprintf("[%s,%s)%d ", r.Start, r.End, r.Bytes)
		}
		return out
	}
	for _, c := range []struct {
		in   []keyrange.Restriction
		want string
	}{
		{nil, ""},
		{[]keyrange.Restriction{piece("a", "b", 1)}, "[a,b)1 "},
		// Adjoining pieces become one; a gap keeps them apart.
		{[]keyrange.Restriction{piece("a", "b", 1), piece("b", "c", 2), piece("d", "e", 4), piece("e", "", 8)}, "[a,c)3 [d,)12 "},
		// From the start of the table.
		{[]keyrange.Restriction{piece("", "b", 1), piece("b", "c", 2)}, "[,c)3 "},
		// Nothing adjoins a range running to the end of the table.
		{[]keyrange.Restriction{piece("x", "", 1), piece("", "b", 2)}, "[x,)1 [,b)2 "},
	} {
		if got := str(Coalesce(c.in)); got != c.want {
			t.Errorf("Coalesce(%s) = %s, want %s", str(c.in), got, c.want)
		}
	}
}
