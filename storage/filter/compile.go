package filter

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
)

// compiler validates a RowFilter tree and builds its nodes.
type compiler struct {
	lim   Limits
	count int
}

// compile returns the node for f found at path, nested depth levels deep,
// and whether its output can carry a label (for the one-label-per-chain
// rule). inCondition is set inside any part of a condition, where a sink is
// not allowed.
func (c *compiler) compile(f *bigtablepb.RowFilter, path string, depth int, inCondition bool) (node, bool, error) {
	c.count++
	if c.count > c.lim.MaxFilters {
		return nil, false, errorf(path, "filter has more than %d RowFilters (limit)", c.lim.MaxFilters)
	}
	if depth > c.lim.MaxDepth {
		return nil, false, errorf(path, "filter is nested more than %d levels deep (limit)", c.lim.MaxDepth)
	}
	if f == nil || f.Filter == nil {
		// An unknown filter type (a newer API than ours) decodes to an
		// empty oneof too: refusing it beats silently passing cells the
		// client meant to exclude. The Go emulator passes all cells here.
		return nil, false, errorf(path, "RowFilter has no filter set")
	}
	switch x := f.Filter.(type) {
	case *bigtablepb.RowFilter_Chain_:
		return c.chain(x.Chain.GetFilters(), path+".chain", depth, inCondition)
	case *bigtablepb.RowFilter_Interleave_:
		return c.interleave(x.Interleave.GetFilters(), path+".interleave", depth, inCondition)
	case *bigtablepb.RowFilter_Condition_:
		return c.condition(x.Condition, path+".condition", depth)
	case *bigtablepb.RowFilter_Sink:
		if !x.Sink {
			return nil, false, errorf(path+".sink", "must be true if set")
		}
		if inCondition {
			// data.proto: a sink "cannot be used within the
			// predicate_filter, true_filter, or false_filter of a
			// Condition".
			return nil, false, errorf(path+".sink", "sink cannot be used within a condition")
		}
		return sinkNode{}, false, nil
	case *bigtablepb.RowFilter_PassAllFilter:
		if !x.PassAllFilter {
			return nil, false, errorf(path+".pass_all_filter", "must be true if set")
		}
		return passNode{}, false, nil
	case *bigtablepb.RowFilter_BlockAllFilter:
		if !x.BlockAllFilter {
			return nil, false, errorf(path+".block_all_filter", "must be true if set")
		}
		return blockNode{}, false, nil
	case *bigtablepb.RowFilter_RowKeyRegexFilter:
		p := path + ".row_key_regex_filter"
		if len(x.RowKeyRegexFilter) == 0 {
			// No row has an empty key, so an empty pattern can only be
			// a mistake; the emulator rejects it the same way.
			return nil, false, errorf(p, "must not be empty")
		}
		re, err := c.regex(p, x.RowKeyRegexFilter)
		if err != nil {
			return nil, false, err
		}
		return rowKeyRegexNode{re}, false, nil
	case *bigtablepb.RowFilter_RowSampleFilter:
		pr := x.RowSampleFilter
		if !(pr > 0 && pr < 1) {
			// The emulator's bounds. p = 0 and p = 1 would be block_all
			// and pass_all, which the client should have sent instead.
			return nil, false, errorf(path+".row_sample_filter", "must be between 0.0 and 1.0 exclusive, got %v", pr)
		}
		return rowSampleNode{pr}, false, nil
	case *bigtablepb.RowFilter_FamilyNameRegexFilter:
		p := path + ".family_name_regex_filter"
		if strings.Contains(x.FamilyNameRegexFilter, ":") {
			// data.proto: "the regex must not contain the ':' character,
			// even if it is not being used as a literal".
			return nil, false, errorf(p, "must not contain ':'")
		}
		re, err := c.regex(p, []byte(x.FamilyNameRegexFilter))
		if err != nil {
			return nil, false, err
		}
		return familyRegexNode{re}, false, nil
	case *bigtablepb.RowFilter_ColumnQualifierRegexFilter:
		re, err := c.regex(path+".column_qualifier_regex_filter", x.ColumnQualifierRegexFilter)
		if err != nil {
			return nil, false, err
		}
		return qualifierRegexNode{re}, false, nil
	case *bigtablepb.RowFilter_ColumnRangeFilter:
		n, err := columnRange(x.ColumnRangeFilter, path+".column_range_filter")
		if err != nil {
			return nil, false, err
		}
		return n, false, nil
	case *bigtablepb.RowFilter_TimestampRangeFilter:
		n, err := timestampRange(x.TimestampRangeFilter, path+".timestamp_range_filter")
		if err != nil {
			return nil, false, err
		}
		return n, false, nil
	case *bigtablepb.RowFilter_ValueRegexFilter:
		re, err := c.regex(path+".value_regex_filter", x.ValueRegexFilter)
		if err != nil {
			return nil, false, err
		}
		return valueRegexNode{re}, false, nil
	case *bigtablepb.RowFilter_ValueRangeFilter:
		n, err := valueRange(x.ValueRangeFilter, path+".value_range_filter")
		if err != nil {
			return nil, false, err
		}
		return n, false, nil
	case *bigtablepb.RowFilter_CellsPerRowOffsetFilter:
		if x.CellsPerRowOffsetFilter < 0 {
			return nil, false, errorf(path+".cells_per_row_offset_filter", "must be >= 0, got %d", x.CellsPerRowOffsetFilter)
		}
		if x.CellsPerRowOffsetFilter == 0 {
			return passNode{}, false, nil
		}
		return rowOffsetNode{int(x.CellsPerRowOffsetFilter)}, false, nil
	case *bigtablepb.RowFilter_CellsPerRowLimitFilter:
		// Zero is refused as the emulator refuses it: a limit of no
		// cells is block_all.
		if x.CellsPerRowLimitFilter <= 0 {
			return nil, false, errorf(path+".cells_per_row_limit_filter", "must be > 0, got %d", x.CellsPerRowLimitFilter)
		}
		return rowLimitNode{int(x.CellsPerRowLimitFilter)}, false, nil
	case *bigtablepb.RowFilter_CellsPerColumnLimitFilter:
		if x.CellsPerColumnLimitFilter <= 0 {
			return nil, false, errorf(path+".cells_per_column_limit_filter", "must be > 0, got %d", x.CellsPerColumnLimitFilter)
		}
		return columnLimitNode{int(x.CellsPerColumnLimitFilter)}, false, nil
	case *bigtablepb.RowFilter_StripValueTransformer:
		// The Go emulator strips even when the flag is false; a false
		// boolean filter is refused everywhere else, so it is here too.
		if !x.StripValueTransformer {
			return nil, false, errorf(path+".strip_value_transformer", "must be true if set")
		}
		return stripNode{}, false, nil
	case *bigtablepb.RowFilter_ApplyLabelTransformer:
		l := x.ApplyLabelTransformer
		p := path + ".apply_label_transformer"
		if len(l) > maxLabelLen {
			return nil, false, errorf(p, "label %q is longer than %d characters", l, maxLabelLen)
		}
		if !labelPattern.MatchString(l) {
			return nil, false, errorf(p, `label %q must match RE2 [a-z0-9\-]+`, l)
		}
		return labelNode{[]string{l}}, true, nil
	case *bigtablepb.RowFilter_ValueBitmaskFilter:
		p := path + ".value_bitmask_filter"
		if len(x.ValueBitmaskFilter.GetMask()) == 0 {
			return nil, false, errorf(p+".mask", "is required")
		}
		return bitmaskNode{x.ValueBitmaskFilter.GetMask()}, false, nil
	}
	return nil, false, errorf(path, "unsupported filter type %T", f.Filter)
}

func (c *compiler) chain(fs []*bigtablepb.RowFilter, path string, depth int, inCondition bool) (node, bool, error) {
	if len(fs) < 2 {
		// Cloud Bigtable refuses an empty chain (the HBase adapter had to
		// stop sending one), and the emulator refuses any chain of fewer
		// than two filters; we follow the emulator so that clients tested
		// against it see the same answer here.
		return nil, false, errorf(path+".filters", "a chain must contain at least two filters, got %d", len(fs))
	}
	subs := make([]node, 0, len(fs))
	labelAt := -1
	for i, sf := range fs {
		p := fmt.Sprintf("%s.filters[%d]", path, i)
		n, hasLabel, err := c.compile(sf, p, depth+1, inCondition)
		if err != nil {
			return nil, false, err
		}
		if hasLabel {
			if labelAt >= 0 {
				// data.proto: "a Chain may have no more than one
				// sub-filter which contains a apply_label_transformer",
				// because a cell carries at most one label.
				return nil, false, errorf(p, "a chain may have only one sub-filter containing apply_label_transformer (another is filters[%d])", labelAt)
			}
			labelAt = i
		}
		switch n := n.(type) {
		case passNode:
			continue
		case chainNode:
			// A chain in a chain is the same as its filters spliced
			// in; flat chains let PushDown see all leading filters.
			subs = append(subs, n.subs...)
		default:
			subs = append(subs, n)
		}
	}
	switch len(subs) {
	case 0:
		return passNode{}, false, nil
	case 1:
		return subs[0], labelAt >= 0, nil
	}
	return chainNode{subs}, labelAt >= 0, nil
}

func (c *compiler) interleave(fs []*bigtablepb.RowFilter, path string, depth int, inCondition bool) (node, bool, error) {
	if len(fs) < 2 {
		return nil, false, errorf(path+".filters", "an interleave must contain at least two filters, got %d", len(fs))
	}
	subs := make([]node, len(fs))
	anyLabel := false
	for i, sf := range fs {
		n, hasLabel, err := c.compile(sf, fmt.Sprintf("%s.filters[%d]", path, i), depth+1, inCondition)
		if err != nil {
			return nil, false, err
		}
		subs[i] = n
		anyLabel = anyLabel || hasLabel
	}
	return interleaveNode{subs}, anyLabel, nil
}

func (c *compiler) condition(cond *bigtablepb.RowFilter_Condition, path string, depth int) (node, bool, error) {
	var n condNode
	// A missing predicate is no filter, which passes every cell, so the
	// true branch is taken for every row: the emulator's reading, and the
	// same meaning an absent filter has everywhere else.
	if pf := cond.GetPredicateFilter(); pf != nil {
		p, _, err := c.compile(pf, path+".predicate_filter", depth+1, true)
		if err != nil {
			return nil, false, err
		}
		n.pred = p
	}
	// data.proto: a missing true_filter or false_filter outputs nothing.
	anyLabel := false
	branch := func(f *bigtablepb.RowFilter, p string) (node, error) {
		if f == nil {
			return blockNode{}, nil
		}
		b, hasLabel, err := c.compile(f, p, depth+1, true)
		anyLabel = anyLabel || hasLabel
		return b, err
	}
	var err error
	if n.onTrue, err = branch(cond.GetTrueFilter(), path+".true_filter"); err != nil {
		return nil, false, err
	}
	if n.onFalse, err = branch(cond.GetFalseFilter(), path+".false_filter"); err != nil {
		return nil, false, err
	}
	return n, anyLabel, nil
}

func (c *compiler) regex(path string, pattern []byte) (*bytesRegexp, error) {
	re, err := compileBytesRegexp(pattern, c.lim.MaxRegexBytes)
	if err != nil {
		return nil, errorf(path, "%v", err)
	}
	return re, nil
}

// bound is one end of a byte-string range; nil value means unbounded.
type bound struct {
	value []byte
	open  bool
}

// makeRange checks a range's bounds. An empty bound is no bound, as the C++
// emulator (written against the service) reads it and as empty row keys are
// read in row ranges: a client that sends end_qualifier_open = "" means
// "unbounded", never "nothing". A start after the end is an error (the C++
// emulator's "reversed range"); the Go emulator returns no cells instead.
func makeRange(start, end bound, path, what string) (bound, bound, error) {
	if len(start.value) == 0 {
		start = bound{}
	}
	if len(end.value) == 0 {
		end = bound{}
	}
	if start.value != nil && end.value != nil && bytes.Compare(start.value, end.value) > 0 {
		return start, end, errorf(path, "reversed %s: start %q is after end %q", what, start.value, end.value)
	}
	return start, end, nil
}

func inRange(v []byte, start, end bound) bool {
	if start.value != nil {
		c := bytes.Compare(v, start.value)
		if c < 0 || (c == 0 && start.open) {
			return false
		}
	}
	if end.value != nil {
		c := bytes.Compare(v, end.value)
		if c > 0 || (c == 0 && end.open) {
			return false
		}
	}
	return true
}

func columnRange(r *bigtablepb.ColumnRange, path string) (node, error) {
	var start, end bound
	switch q := r.GetStartQualifier().(type) {
	case *bigtablepb.ColumnRange_StartQualifierClosed:
		start = bound{q.StartQualifierClosed, false}
	case *bigtablepb.ColumnRange_StartQualifierOpen:
		start = bound{q.StartQualifierOpen, true}
	}
	switch q := r.GetEndQualifier().(type) {
	case *bigtablepb.ColumnRange_EndQualifierClosed:
		end = bound{q.EndQualifierClosed, false}
	case *bigtablepb.ColumnRange_EndQualifierOpen:
		end = bound{q.EndQualifierOpen, true}
	}
	start, end, err := makeRange(start, end, path, "column range")
	if err != nil {
		return nil, err
	}
	// An empty family_name matches no family (none is empty); that is an
	// empty result, not an error, in both emulators.
	return columnRangeNode{family: r.GetFamilyName(), start: start, end: end}, nil
}

func valueRange(r *bigtablepb.ValueRange, path string) (node, error) {
	var start, end bound
	switch v := r.GetStartValue().(type) {
	case *bigtablepb.ValueRange_StartValueClosed:
		start = bound{v.StartValueClosed, false}
	case *bigtablepb.ValueRange_StartValueOpen:
		start = bound{v.StartValueOpen, true}
	}
	switch v := r.GetEndValue().(type) {
	case *bigtablepb.ValueRange_EndValueClosed:
		end = bound{v.EndValueClosed, false}
	case *bigtablepb.ValueRange_EndValueOpen:
		end = bound{v.EndValueOpen, true}
	}
	start, end, err := makeRange(start, end, path, "value range")
	if err != nil {
		return nil, err
	}
	return valueRangeNode{start: start, end: end}, nil
}

// timestampRange checks a [start, end) range in microseconds, end 0 meaning
// no upper bound. Timestamps are compared exactly: Tabula stores microsecond
// timestamps, and a table with millisecond granularity only holds multiples
// of 1000, on which truncating the bounds (as the C++ emulator does) changes
// nothing for the bounds clients send.
func timestampRange(r *bigtablepb.TimestampRange, path string) (node, error) {
	start, end := r.GetStartTimestampMicros(), r.GetEndTimestampMicros()
	if end != 0 && start > end {
		return nil, errorf(path, "reversed timestamp range: start %d is after end %d", start, end)
	}
	if end == 0 {
		end = math.MaxInt64
	}
	return timestampRangeNode{start: start, end: end}, nil
}
