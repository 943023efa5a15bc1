package tabletdesc

import "bytes"

// KeyRange is the row range [Start, End): Start is inclusive (empty: the
// first row of the table), End exclusive, and an empty End — nil or zero
// length alike — is unbounded, the end of the table. It is the one
// definition of "the rows of a tablet" (State.Start/End, a METADATA
// location's range, a request's row range): compare ranges with its methods
// rather than by hand, so that the unbounded end is handled the same
// everywhere.
type KeyRange struct {
	Start, End []byte
}

// Unbounded reports whether the range runs to the end of the table.
func (r KeyRange) Unbounded() bool { return len(r.End) == 0 }

// Contains reports whether row lies in the range.
func (r KeyRange) Contains(row []byte) bool {
	// Written out rather than calling EndsAfter, to stay within the
	// inliner's budget: routing lookups call it for every request.
	return bytes.Compare(row, r.Start) >= 0 && (len(r.End) == 0 || bytes.Compare(row, r.End) < 0)
}

// EndsAfter reports whether the range's end lies after row (row < End, or
// End unbounded): whether rows up to and including row may lie in the range.
func (r KeyRange) EndsAfter(row []byte) bool {
	return len(r.End) == 0 || bytes.Compare(row, r.End) < 0
}

// SingleRow reports whether the range holds exactly one row key: End is
// Start followed by a zero byte (how a request's row key becomes a range).
func (r KeyRange) SingleRow() bool {
	n := len(r.Start)
	return len(r.End) == n+1 && r.End[n] == 0 && bytes.Equal(r.End[:n], r.Start)
}

// Empty reports whether the range holds no row: End is bounded and not
// after Start.
func (r KeyRange) Empty() bool {
	return len(r.End) > 0 && bytes.Compare(r.Start, r.End) >= 0
}

// Overlaps reports whether r and o share a row: each begins before the
// other ends. (Two empty ranges at the same place, or an empty range inside
// a non-empty one, count as overlapping.)
func (r KeyRange) Overlaps(o KeyRange) bool {
	return r.EndsAfter(o.Start) && o.EndsAfter(r.Start)
}

// Covers reports whether every row of o is in r: r begins at or before o
// and ends at or after it.
func (r KeyRange) Covers(o KeyRange) bool {
	return bytes.Compare(r.Start, o.Start) <= 0 && CompareEnds(o.End, r.End) <= 0
}

// Intersect returns the rows of both r and o: the later start and the
// earlier end. The result is Empty when they do not overlap. It shares its
// byte slices with r and o.
func (r KeyRange) Intersect(o KeyRange) KeyRange {
	out := r
	if bytes.Compare(o.Start, r.Start) > 0 {
		out.Start = o.Start
	}
	if CompareEnds(o.End, r.End) < 0 {
		out.End = o.End
	}
	return out
}

// CompareEnds orders two range ends, the unbounded (empty) end last:
// it returns -1, 0 or +1 as a ends before, with or after b.
func CompareEnds(a, b []byte) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	return bytes.Compare(a, b)
}
