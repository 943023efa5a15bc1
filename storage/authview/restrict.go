package authview

import (
	"bytes"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/meta"
)

// RestrictRows intersects a request's row set with the view's rows. An
// empty (or nil) set means every row, as in ReadRowsRequest. It returns
// false when nothing of the view is left, so that the caller returns no
// rows (an empty RowSet would read the whole table).
func RestrictRows(rs *bigtablepb.RowSet, v meta.AuthorizedView) (*bigtablepb.RowSet, bool) {
	view := v.RowRanges()
	out := &bigtablepb.RowSet{}
	if len(rs.GetRowKeys()) == 0 && len(rs.GetRowRanges()) == 0 {
		for _, r := range view {
			out.RowRanges = append(out.RowRanges, rangeProto(r))
		}
		return out, len(out.RowRanges) > 0
	}
	for _, k := range rs.GetRowKeys() {
		if v.CoversRow(k) {
			out.RowKeys = append(out.RowKeys, k)
		}
	}
	for _, rr := range rs.GetRowRanges() {
		for _, r := range view {
			if x, ok := intersect(rr, r); ok {
				out.RowRanges = append(out.RowRanges, x)
			}
		}
	}
	return out, len(out.RowKeys)+len(out.RowRanges) > 0
}

func rangeProto(r meta.KeyRange) *bigtablepb.RowRange {
	out := &bigtablepb.RowRange{}
	if len(r.Start) > 0 {
		out.StartKey = &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: r.Start}
	}
	if r.End != nil {
		out.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: r.End}
	}
	return out
}

// intersect returns the part of the request's range rr inside [r.Start,
// r.End), keeping rr's bound where it is the tighter one; false if empty.
// An empty key bound is unbounded, as in the API.
func intersect(rr *bigtablepb.RowRange, r meta.KeyRange) (*bigtablepb.RowRange, bool) {
	out := &bigtablepb.RowRange{}
	// Start: the later of rr's start and r.Start (closed).
	var start []byte
	startOpen := false
	switch s := rr.GetStartKey().(type) {
	case *bigtablepb.RowRange_StartKeyClosed:
		start = s.StartKeyClosed
	case *bigtablepb.RowRange_StartKeyOpen:
		start, startOpen = s.StartKeyOpen, len(s.StartKeyOpen) > 0
	}
	if c := bytes.Compare(start, r.Start); c < 0 || (c == 0 && !startOpen) {
		start, startOpen = r.Start, false
	}
	if len(start) > 0 {
		if startOpen {
			out.StartKey = &bigtablepb.RowRange_StartKeyOpen{StartKeyOpen: start}
		} else {
			out.StartKey = &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: start}
		}
	}
	// End: the earlier of rr's end and r.End (open); nil is unbounded.
	var end []byte
	endClosed := false
	switch e := rr.GetEndKey().(type) {
	case *bigtablepb.RowRange_EndKeyClosed:
		if len(e.EndKeyClosed) > 0 {
			end, endClosed = e.EndKeyClosed, true
		}
	case *bigtablepb.RowRange_EndKeyOpen:
		if len(e.EndKeyOpen) > 0 {
			end = e.EndKeyOpen
		}
	}
	if r.End != nil && (end == nil || bytes.Compare(r.End, end) <= 0) {
		end, endClosed = r.End, false
	}
	if end != nil {
		if endClosed {
			out.EndKey = &bigtablepb.RowRange_EndKeyClosed{EndKeyClosed: end}
		} else {
			out.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: end}
		}
		// Empty: start after end, or equal unless both closed.
		c := bytes.Compare(start, end)
		if c > 0 || (c == 0 && (startOpen || !endClosed)) {
			return nil, false
		}
	}
	return out, true
}

// ViewFilter returns a filter passing exactly the cells of the view's
// columns: an interleave of disjoint column ranges (so no cell is passed
// twice), a single range, or block_all for a view without columns.
func ViewFilter(v meta.AuthorizedView) *bigtablepb.RowFilter {
	var parts []*bigtablepb.RowFilter
	for _, fam := range sortedFamilies(v) {
		for _, r := range v.QualifierRanges(fam) {
			cr := &bigtablepb.ColumnRange{FamilyName: fam}
			if len(r.Start) > 0 {
				cr.StartQualifier = &bigtablepb.ColumnRange_StartQualifierClosed{StartQualifierClosed: r.Start}
			}
			if r.End != nil {
				cr.EndQualifier = &bigtablepb.ColumnRange_EndQualifierOpen{EndQualifierOpen: r.End}
			}
			parts = append(parts, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: cr}})
		}
	}
	switch len(parts) {
	case 0:
		return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_BlockAllFilter{BlockAllFilter: true}}
	case 1:
		return parts[0]
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: parts}}}
}

// RestrictFilter returns the chain of the view's filter and f (the view's
// alone when f is nil), so that f sees only the view's cells.
func RestrictFilter(f *bigtablepb.RowFilter, v meta.AuthorizedView) *bigtablepb.RowFilter {
	vf := ViewFilter(v)
	if f == nil {
		return vf
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{vf, f}}}}
}

func sortedFamilies(v meta.AuthorizedView) []string {
	out := make([]string, 0, len(v.Families))
	for f := range v.Families {
		out = append(out, f)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
