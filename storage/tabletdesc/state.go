package tabletdesc

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/tabuladb/tabula/storage/cell"
)

// FileMeta describes one SSTable of a tablet.
type FileMeta struct {
	Name string `json:"name"` // object name in the store
	Size int64  `json:"size"`
	// SmallestKey and LargestKey are the file's first and last internal
	// keys (of every row it holds, also rows outside the tablet's range
	// when the file is shared with a split sibling).
	SmallestKey []byte `json:"smallest_key,omitempty"`
	LargestKey  []byte `json:"largest_key,omitempty"`
	MaxSeq      uint64 `json:"max_seq"`
	Entries     uint64 `json:"entries"`
}

// State is what a tablet persists: enough to reopen it. It is small and
// saved whole after every change of the file lists (flush, compaction,
// split).
type State struct {
	ID string `json:"id"`
	// Start and End bound the tablet's rows to [Start, End); an empty End
	// is the end of the table.
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"`
	// Groups lists each locality group's SSTables, newest first.
	Groups map[string][]FileMeta `json:"groups,omitempty"`
	// RedoPoint is where replay of the commit log starts; FlushedSeq is
	// the highest sequence number whose entries are in the SSTables:
	// records at or after RedoPoint with higher sequence numbers are
	// replayed.
	RedoPoint  LogPosition `json:"redo_point"`
	FlushedSeq uint64      `json:"flushed_seq"`
	// LastSeq is the highest sequence number used when the state was
	// saved (also by drops); a reopened tablet continues above it.
	LastSeq uint64 `json:"last_seq"`
	// Families are the names of the schema's families when the state was
	// saved, so that Open notices families dropped meanwhile.
	Families []string `json:"families,omitempty"`
	// Drops records families dropped from the schema: name → the sequence
	// number that shadows their older cells (a table-wide family marker),
	// kept until a major compaction removed those cells.
	Drops map[string]uint64 `json:"drops,omitempty"`
	// Parent is the tablet this one was split from, if any.
	Parent string `json:"parent,omitempty"`
	// SplitInto, when set, says the tablet was split into these children
	// (left, right) at SplitKey; it is no longer served.
	SplitInto []string `json:"split_into,omitempty"`
	SplitKey  []byte   `json:"split_key,omitempty"`
	// MergedFrom, when set, says the tablet was made by merging these
	// adjacent tablets (left, right): its files are theirs. METADATA's row
	// of a merged tablet records it until the merge is finished (the
	// left tablet's row deleted).
	MergedFrom []string `json:"merged_from,omitempty"`
}

// Range returns the tablet's row range [Start, End).
func (s State) Range() KeyRange { return KeyRange{Start: s.Start, End: s.End} }

// SharesFiles reports whether some SSTable of the state holds rows outside
// the tablet's range: a split child's files are its parent's until a
// compaction rewrites them, so the tablet's own bytes cannot be read off
// its files' sizes, and a merge would see its sibling's rows again.
func (s State) SharesFiles() bool {
	lo := cell.RowPrefix(s.Start)
	var hi []byte
	if len(s.End) > 0 {
		hi = cell.RowPrefix(s.End)
	}
	for _, fs := range s.Groups {
		for _, f := range fs {
			if bytes.Compare(f.SmallestKey, lo) < 0 || (hi != nil && bytes.Compare(f.LargestKey, hi) >= 0) {
				return true
			}
		}
	}
	return false
}

// Files returns the names of every SSTable the state references.
func (s State) Files() []string {
	var out []string
	for _, g := range slices.Sorted(maps.Keys(s.Groups)) {
		for _, f := range s.Groups[g] {
			out = append(out, f.Name)
		}
	}
	return out
}

// Clone returns a copy of s whose maps and file lists are its own (the
// byte slices of keys are shared: states are never changed in place).
func (s State) Clone() State {
	out := s
	out.Groups = make(map[string][]FileMeta, len(s.Groups))
	for g, fs := range s.Groups {
		out.Groups[g] = slices.Clone(fs)
	}
	out.Families = slices.Clone(s.Families)
	out.Drops = maps.Clone(s.Drops)
	out.SplitInto = slices.Clone(s.SplitInto)
	out.MergedFrom = slices.Clone(s.MergedFrom)
	return out
}

// LogPosition is a place in a tablet server's commit log (storage/commitlog),
// totally ordered by (Segment, Offset): the segment number and the byte
// offset of the record's frame within the segment. The zero LogPosition is
// before every record. A State's RedoPoint is one.
type LogPosition struct {
	Segment uint64
	Offset  int64
}

// Compare returns -1, 0 or +1 as p is before, at or after q.
func (p LogPosition) Compare(q LogPosition) int {
	switch {
	case p.Segment < q.Segment:
		return -1
	case p.Segment > q.Segment:
		return 1
	case p.Offset < q.Offset:
		return -1
	case p.Offset > q.Offset:
		return 1
	}
	return 0
}

// String returns "segment:offset".
func (p LogPosition) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }
