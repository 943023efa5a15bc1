package jobs

import (
	"bytes"
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
