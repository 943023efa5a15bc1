package jobs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/storage/client"
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

// TestPlanShardsCutsLikePlan: planShards cuts the per-tablet pieces of
// the selection (beamio's Plan with target 0) at the samples; that must
// give exactly what planning the selection at the target at once gives
// (beamio's Plan with the target), on random tablets, samples and
// selections.
func TestPlanShardsCutsLikePlan(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 5))
	key := func() []byte { return []byte(fmt.Sprintf("k%03d", r.IntN(1000))) }
	sorted := func(n int) [][]byte {
		set := map[string]bool{}
		for range n {
			set[string(key())] = true
		}
		var out [][]byte
		for k := range set {
			out = append(out, []byte(k))
		}
		slices.SortFunc(out, bytes.Compare)
		return out
	}
	for trial := range 500 {
		var tablets []beamio.Tablet
		var tabs []client.TabletInfo
		var start []byte
		for _, b := range append(sorted(r.IntN(8)), nil) {
			tablets = append(tablets, beamio.Tablet{Start: start, End: b})
			tabs = append(tabs, client.TabletInfo{Start: start, End: b})
			start = b
		}
		var samples []beamio.Sample
		var off int64
		for _, k := range sorted(r.IntN(30)) {
			off += 1 + r.Int64N(1<<20)
			samples = append(samples, beamio.Sample{Key: k, Offset: off})
		}
		if len(samples) > 0 || r.IntN(2) == 0 {
			samples = append(samples, beamio.Sample{Key: nil, Offset: off + r.Int64N(1<<20)})
		}
		ranges := []keyrange.Restriction{{}}
		if r.IntN(2) == 0 {
			ks := sorted(2 * (1 + r.IntN(3)))
			ranges = nil
			for i := 0; i+1 < len(ks); i += 2 {
				ranges = append(ranges, keyrange.Restriction{Start: ks[i], End: ks[i+1]})
			}
		}
		shards := 1 + r.IntN(6)
		pieces := beamio.PlanSplits(ranges, tablets, samples, 0)
		got := planShards(plan{pieces: pieces, samples: samples}, tabs, shards)
		var total int64
		for _, p := range pieces {
			total += p.Bytes
		}
		want := pieces
		if target := total / int64(4*shards); target > 0 {
			want = beamio.PlanSplits(ranges, tablets, samples, max(target, 64<<10))
		}
		wantGroups := GroupShards(want, shards)
		for i, g := range wantGroups {
			wantGroups[i] = Coalesce(g)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantGroups) {
			t.Fatalf("trial %d: ranges %v, tablets %v, samples %v, %d shards:\n got %v\nwant %v", trial, ranges, tablets, samples, shards, got, wantGroups)
		}
	}
}
