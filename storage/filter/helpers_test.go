package filter

import (
	"fmt"
	"strings"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/storage/cell"
)

// Builders for RowFilter protos, to keep test tables readable.

func chain(fs ...*bigtablepb.RowFilter) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: fs}}}
}

func interleave(fs ...*bigtablepb.RowFilter) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: fs}}}
}

func cond(pred, onTrue, onFalse *bigtablepb.RowFilter) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Condition_{Condition: &bigtablepb.RowFilter_Condition{
		PredicateFilter: pred, TrueFilter: onTrue, FalseFilter: onFalse,
	}}}
}

func pass() *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_PassAllFilter{PassAllFilter: true}}
}

func block() *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_BlockAllFilter{BlockAllFilter: true}}
}

func sink() *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Sink{Sink: true}}
}

func keyRegex(p string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: []byte(p)}}
}

func familyRegex(p string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: p}}
}

func qualRegex(p string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte(p)}}
}

func valueRegex(p string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte(p)}}
}

func sample(p float64) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_RowSampleFilter{RowSampleFilter: p}}
}

func tsRange(start, end int64) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &bigtablepb.TimestampRange{
		StartTimestampMicros: start, EndTimestampMicros: end,
	}}}
}

// colRange builds a column range; start and end are "[q", "(q", "q]", "q)"
// or "" for unbounded.
func colRange(family, start, end string) *bigtablepb.RowFilter {
	r := &bigtablepb.ColumnRange{FamilyName: family}
	switch {
	case strings.HasPrefix(start, "["):
		r.StartQualifier = &bigtablepb.ColumnRange_StartQualifierClosed{StartQualifierClosed: []byte(start[1:])}
	case strings.HasPrefix(start, "("):
		r.StartQualifier = &bigtablepb.ColumnRange_StartQualifierOpen{StartQualifierOpen: []byte(start[1:])}
	}
	switch {
	case strings.HasSuffix(end, "]"):
		r.EndQualifier = &bigtablepb.ColumnRange_EndQualifierClosed{EndQualifierClosed: []byte(end[:len(end)-1])}
	case strings.HasSuffix(end, ")"):
		r.EndQualifier = &bigtablepb.ColumnRange_EndQualifierOpen{EndQualifierOpen: []byte(end[:len(end)-1])}
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnRangeFilter{ColumnRangeFilter: r}}
}

// valRange builds a value range with colRange's bound notation.
func valRange(start, end string) *bigtablepb.RowFilter {
	r := &bigtablepb.ValueRange{}
	switch {
	case strings.HasPrefix(start, "["):
		r.StartValue = &bigtablepb.ValueRange_StartValueClosed{StartValueClosed: []byte(start[1:])}
	case strings.HasPrefix(start, "("):
		r.StartValue = &bigtablepb.ValueRange_StartValueOpen{StartValueOpen: []byte(start[1:])}
	}
	switch {
	case strings.HasSuffix(end, "]"):
		r.EndValue = &bigtablepb.ValueRange_EndValueClosed{EndValueClosed: []byte(end[:len(end)-1])}
	case strings.HasSuffix(end, ")"):
		r.EndValue = &bigtablepb.ValueRange_EndValueOpen{EndValueOpen: []byte(end[:len(end)-1])}
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRangeFilter{ValueRangeFilter: r}}
}

func rowOffset(n int32) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerRowOffsetFilter{CellsPerRowOffsetFilter: n}}
}

func rowLimit(n int32) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerRowLimitFilter{CellsPerRowLimitFilter: n}}
}

func colLimit(n int32) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: n}}
}

func strip() *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_StripValueTransformer{StripValueTransformer: true}}
}

func label(l string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ApplyLabelTransformer{ApplyLabelTransformer: l}}
}

func bitmask(m string) *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueBitmaskFilter{ValueBitmaskFilter: &bigtablepb.ValueBitmask{Mask: []byte(m)}}}
}

// c builds a cell.
func c(family, qualifier string, ts int64, value string) cell.Cell {
	return cell.Cell{Family: family, Qualifier: []byte(qualifier), Timestamp: ts, Value: []byte(value)}
}

// format renders output cells as "family:qualifier@ts=value" with the
// labels in brackets, one string per cell, for comparison in tests.
func format(cells []LabeledCell) []string {
	out := make([]string, 0, len(cells))
	for _, x := range cells {
		s := fmt.Sprintf("%s:%s@%d=%s", x.Family, x.Qualifier, x.Timestamp, x.Value)
		if len(x.Labels) > 0 {
			s += "[" + strings.Join(x.Labels, ",") + "]"
		}
		out = append(out, s)
	}
	return out
}
