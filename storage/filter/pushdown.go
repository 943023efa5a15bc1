package filter

import (
	"math"
	"slices"
)

// Hints are restrictions storage may apply while it assembles a row, before
// Apply runs, without changing what Apply outputs. With R the full row and R'
// the row restricted by the hints,
//
//	Apply(R') == Apply(R)
//
// holds cell for cell, provided the restrictions are applied as follows:
//
//   - Family and Timestamp may each be applied or ignored, independently: a
//     cell they drop is one the filter would drop first anyway.
//   - CellsPerColumn may be applied only together with both Family and the
//     timestamp range, counted on the cells that survive them (the newest
//     CellsPerColumn of each column within the range).
//   - A row left without cells may be skipped entirely: Apply of an empty
//     row is empty.
//
// The zero Hints restrict nothing.
type Hints struct {
	// Family reports whether cells of a family may reach the output. Nil
	// means every family may.
	Family func(family string) bool
	// Families, when non-nil, is the complete sorted list of families
	// that may reach the output; nil means unknown (check Family).
	Families []string
	// TimestampStart and TimestampEnd bound the timestamps that may reach
	// the output: TimestampStart <= ts < TimestampEnd. The zero Hints have
	// TimestampEnd 0, read as no upper bound.
	TimestampStart, TimestampEnd int64
	// CellsPerColumn, if > 0, is how many versions of each column the
	// filter can use at most (see above for when it may be applied).
	CellsPerColumn int
}

// Restrict applies all the hints to row cells, as storage would, and returns
// the cells kept. It is the reference the storage layer's own pushdown must
// agree with; tests use it to check the Hints contract.
func (h Hints) Restrict(cells []LabeledCell) []LabeledCell {
	end := h.TimestampEnd
	if end == 0 {
		end = math.MaxInt64
	}
	var out []LabeledCell
	run := 0
	for i := range cells {
		c := &cells[i]
		if h.Family != nil && !h.Family(c.Family) {
			continue
		}
		if c.Timestamp < h.TimestampStart || c.Timestamp >= end {
			continue
		}
		if len(out) == 0 || !sameColumn(&out[len(out)-1].Cell, &c.Cell) {
			run = 0
		}
		run++
		if h.CellsPerColumn > 0 && run > h.CellsPerColumn {
			continue
		}
		out = append(out, *c)
	}
	return out
}

// PushDown returns the hints for the filter. It looks at the filters that
// open the top-level chain (or the filter itself when it is not a chain):
// per-cell filters commute with each other, so every family, column-range
// and timestamp restriction among them can be applied first; a
// cells_per_column_limit directly after an exactly applicable run of them
// bounds the versions storage needs to read. Everything else ends the
// search: an interleave or condition could use cells the leading filters
// would not give it.
func (f *Filter) PushDown() Hints {
	var h Hints
	if f.pass {
		return h
	}
	steps := []node{f.root}
	if ch, ok := f.root.(chainNode); ok {
		steps = ch.subs
	}
	var famPreds []func(string) bool
	var families []string // nil = not a known finite set
	known := false
	exact := true // the run so far is exactly Family ∧ timestamp range
	start, end := int64(0), int64(math.MaxInt64)
	addFamilies := func(fs []string) {
		if !known {
			families, known = slices.Clone(fs), true
			return
		}
		families = slices.DeleteFunc(families, func(s string) bool { return !slices.Contains(fs, s) })
	}
loop:
	for _, s := range steps {
		switch n := s.(type) {
		case passNode, rowKeyRegexNode, stripNode, labelNode:
			// These change no cell's presence by column or time: a row
			// key regex passes all cells or none, the transformers keep
			// every cell.
		case familyRegexNode:
			famPreds = append(famPreds, n.re.MatchString)
			if n.re.hasLiteral {
				addFamilies([]string{n.re.literal})
			}
		case columnRangeNode:
			fam := n.family
			famPreds = append(famPreds, func(s string) bool { return s == fam })
			addFamilies([]string{fam})
			if n.start.value != nil || n.end.value != nil {
				exact = false
			}
		case timestampRangeNode:
			start, end = max(start, n.start), min(end, n.end)
		case qualifierRegexNode, valueRegexNode, valueRangeNode, bitmaskNode:
			exact = false
		case columnLimitNode:
			if exact {
				h.CellsPerColumn = n.n
			}
			break loop
		default:
			break loop
		}
	}
	if len(famPreds) > 0 {
		h.Family = func(s string) bool {
			for _, p := range famPreds {
				if !p(s) {
					return false
				}
			}
			return true
		}
	}
	if known {
		slices.Sort(families)
		families = slices.Compact(families)
		if families == nil {
			families = []string{}
		}
		h.Families = families
	}
	h.TimestampStart = start
	if end != math.MaxInt64 {
		// end is never 0 here (an end of 0 in the request is stored as
		// MaxInt64), so it cannot be misread as unbounded. Two ranges
		// may intersect to end <= start: an empty range, meaning no
		// cell is needed.
		h.TimestampEnd = end
	}
	return h
}
