package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// file is an SSTable holding rows first…last.
func file(name, first, last string, maxSeq uint64) tabletdesc.FileMeta {
	return tabletdesc.FileMeta{Name: name, SmallestKey: cell.RowPrefix([]byte(first)), LargestKey: append(cell.RowPrefix([]byte(last)), 0xff), MaxSeq: maxSeq}
}

func TestMergedState(t *testing.T) {
	l := state("L", "", "k", "P")
	l.Groups = map[string][]tabletdesc.FileMeta{"default": {file("l2", "c", "j", 9), file("l1", "a", "b", 5)}}
	l.FlushedSeq, l.LastSeq, l.Families = 9, 9, []string{"f", "g"}
	r := state("R", "k", "", "P")
	r.Groups = map[string][]tabletdesc.FileMeta{"default": {file("r1", "k", "z", 12)}, "lg": {file("r2", "m", "n", 3)}}
	r.FlushedSeq, r.LastSeq, r.Families = 12, 14, []string{"f", "h"}

	m, err := mergedState(l, r, "M")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "M" || len(m.Start) != 0 || len(m.End) != 0 || m.Parent != "" || len(m.SplitInto) != 0 {
		t.Fatalf("merged %+v: want M over every row, no parent, not split", m)
	}
	if !slices.Equal(m.MergedFrom, []string{"L", "R"}) {
		t.Fatalf("MergedFrom %v", m.MergedFrom)
	}
	if got := m.Files(); !slices.Equal(got, []string{"l2", "l1", "r1", "r2"}) {
		t.Fatalf("files %v, want both tablets' (each group in order)", got)
	}
	if m.FlushedSeq != 12 || m.LastSeq != 14 {
		t.Fatalf("sequences %d/%d, want the higher of each", m.FlushedSeq, m.LastSeq)
	}
	if (m.RedoPoint != tabletdesc.LogPosition{}) {
		t.Fatalf("redo point %v: nothing to replay after clean unloads", m.RedoPoint)
	}
	if !slices.Equal(m.Families, []string{"f", "g", "h"}) {
		t.Fatalf("families %v", m.Families)
	}

	for _, tc := range []struct {
		name string
		l, r func() tabletdesc.State
		want string
	}{
		{"not adjacent", func() tabletdesc.State { return l }, func() tabletdesc.State { s := r.Clone(); s.Start = []byte("l"); return s }, "not adjacent"},
		{"right before left", func() tabletdesc.State { return r }, func() tabletdesc.State { return l }, "not adjacent"},
		{"split meanwhile", func() tabletdesc.State { s := l.Clone(); s.SplitInto = []string{"a", "b"}; return s }, func() tabletdesc.State { return r }, "was split"},
		{"family drop pending", func() tabletdesc.State { return l }, func() tabletdesc.State { s := r.Clone(); s.Drops = map[string]uint64{"g": 3}; return s }, "family drop"},
		{"a file reaching into the sibling", func() tabletdesc.State {
			s := l.Clone()
			s.Groups["default"] = append(s.Groups["default"], file("shared", "a", "q", 2))
			return s
		}, func() tabletdesc.State { return r }, "reaches beyond"},
	} {
		_, err := mergedState(tc.l(), tc.r(), "M")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// TestUnfinishedMerges: a committed merge whose left row was not deleted
// is found; a split's overlap is not taken for one.
func TestUnfinishedMerges(t *testing.T) {
	merged := row("t", "M", "", "k", "", "", 0)
	merged.State.MergedFrom = []string{"L", "R"}
	rows := []meta.MetadataEntry{
		row("t", "L", "", "d", "", "s1", 3),
		merged,
		row("t", "X", "k", "", "", "s1", 3),
		// A split committed but not finished: the child before its parent.
		row("u", "C1", "", "d", "P", "s1", 4),
		row("u", "P", "", "", "", "s1", 4),
	}
	got := unfinishedMerges(rows)
	if len(got) != 1 || got[0].State.ID != "L" {
		t.Fatalf("unfinished merges %v, want L's row", got)
	}
	// Finished: nothing.
	if got := unfinishedMerges(rows[1:]); len(got) != 0 {
		t.Fatalf("after the delete: %v", got)
	}
}

// TestMergedRowMutation: the row that commits a merge decodes as the
// merged tablet, unassigned, recording what it was made of.
func TestMergedRowMutation(t *testing.T) {
	st := state("M", "a", "k", "")
	st.MergedFrom = []string{"L", "R"}
	table := meta.TableID{Instance: "i", Table: "t"}
	rm, err := mergedRowMutation(table, st, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	e, err := meta.ParseMetadataRow(rowOf(rm))
	if err != nil {
		t.Fatal(err)
	}
	if e.State.ID != "M" || string(e.State.Start) != "a" || string(e.State.End) != "k" || e.Server != "" || e.Epoch != 0 {
		t.Fatalf("row %+v", e)
	}
	if !slices.Equal(e.State.MergedFrom, []string{"L", "R"}) {
		t.Fatalf("merged_from %v", e.State.MergedFrom)
	}
	if len(e.Events) != 1 || e.Events[0].Kind != meta.EventMerge {
		t.Fatalf("events %+v, want one merge event", e.Events)
	}
}
