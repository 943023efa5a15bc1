package filter

import (
	"math/rand/v2"
	"slices"
	"strings"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/storage/cell"
)

// Random rows and random valid filters, for the property and differential
// tests. Values are drawn from small alphabets so that regexes and ranges hit
// often.

var (
	genFamilies   = []string{"a", "b", "c"}
	genQualifiers = []string{"x", "y", "xy", "yx", "z"}
	// Two values are not UTF-8 and one is a UTF-8 '§': regexes match
	// bytes (RE2's Latin-1 mode, in Tabula and in the emulator alike).
	genValues = []string{"", "a", "b", "ab", "ba", "aab", "1", "10", "2", "\xc2\xa7", "a\xff", "\xfe"}
)

// randomRow returns a row of up to maxCells distinct cells in row order, with
// timestamps that are multiples of 1000 (the emulator's granularity).
func randomRow(r *rand.Rand, key string, maxCells int) cell.Row {
	type col struct {
		fam, qual string
		ts        int64
	}
	seen := map[col]bool{}
	var cells []cell.Cell
	for range 1 + r.IntN(maxCells) {
		k := col{pick(r, genFamilies), pick(r, genQualifiers), 1000 * int64(1+r.IntN(6))}
		if seen[k] {
			continue
		}
		seen[k] = true
		cells = append(cells, c(k.fam, k.qual, k.ts, pick(r, genValues)))
	}
	slices.SortFunc(cells, func(a, b cell.Cell) int { return cell.CompareCells(a, b) })
	return cell.Row{Key: []byte(key), Cells: cells}
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// genState describes the cells flowing at a point of a generated filter, so
// the generator can avoid combinations whose result the Go emulator leaves
// unspecified or gets wrong (see emulatorSafe).
type genState struct {
	labeled   bool // cells may carry a label
	stripped  bool // values may have been stripped
	distinct  bool // may hold copies of a cell that differ in label or value
	oneFamily bool // all cells belong to one family
}

type generator struct {
	r *rand.Rand
	// emulatorSafe restricts the filters to those the Go emulator
	// evaluates as Cloud Bigtable does, and whose result is deterministic
	// there:
	//   - no sink, value_bitmask_filter or row_sample_filter (the emulator
	//     passes all cells for the first two; the last is random);
	//   - no strip_value_transformer after a label (the emulator drops the
	//     label when it strips);
	//   - cells_per_row_limit/offset only on cells of one family (the
	//     emulator walks families in map order) and no per-row or
	//     per-column limit over distinguishable duplicates (the emulator
	//     orders duplicates with an unstable sort).
	emulatorSafe bool
	maxDepth     int
}

// filter returns a valid filter, the state of its output, and whether its
// output can carry a label. noLabel forbids labels (a chain may have only one
// sub-filter containing one); inCond forbids sinks.
func (g *generator) filter(depth int, st genState, noLabel, inCond bool) (*bigtablepb.RowFilter, genState, bool) {
	r := g.r
	if depth < g.maxDepth && r.IntN(3) == 0 {
		switch r.IntN(3) {
		case 0: // chain
			n := 2 + r.IntN(3)
			fs := make([]*bigtablepb.RowFilter, n)
			hasLabel := false
			for i := range fs {
				var l bool
				fs[i], st, l = g.filter(depth+1, st, noLabel || hasLabel, inCond)
				hasLabel = hasLabel || l
			}
			return chain(fs...), st, hasLabel
		case 1: // interleave
			n := 2 + r.IntN(2)
			fs := make([]*bigtablepb.RowFilter, n)
			out := genState{oneFamily: st.oneFamily, distinct: st.distinct}
			hasLabel := false
			for i := range fs {
				var bst genState
				var l bool
				fs[i], bst, l = g.filter(depth+1, st, noLabel, inCond)
				hasLabel = hasLabel || l
				out.labeled = out.labeled || bst.labeled
				out.stripped = out.stripped || bst.stripped
				out.distinct = out.distinct || bst.distinct || bst.labeled || bst.stripped
			}
			return interleave(fs...), out, hasLabel
		default: // condition
			var pred *bigtablepb.RowFilter
			if r.IntN(8) != 0 {
				pred, _, _ = g.filter(depth+1, st, false, true)
			}
			out := genState{oneFamily: st.oneFamily}
			hasLabel := false
			branch := func() *bigtablepb.RowFilter {
				if r.IntN(6) == 0 {
					return nil
				}
				f, bst, l := g.filter(depth+1, st, noLabel, true)
				hasLabel = hasLabel || l
				out.labeled = out.labeled || bst.labeled
				out.stripped = out.stripped || bst.stripped
				out.distinct = out.distinct || bst.distinct
				return f
			}
			onTrue := branch()
			onFalse := branch()
			return cond(pred, onTrue, onFalse), out, hasLabel
		}
	}
	for {
		switch r.IntN(20) {
		case 0:
			return pass(), st, false
		case 1:
			return block(), st, false
		case 2:
			return keyRegex(pick(r, []string{"r.*", ".*a", "r[ab]", "ra+b*", "r(a|bb)?.*"})), st, false
		case 3:
			f := pick(r, []string{"a", "b", "c", "[ab]", "a|c", ".*", "d"})
			st.oneFamily = st.oneFamily || len(f) == 1
			return familyRegex(f), st, false
		case 4:
			return qualRegex(pick(r, []string{"x", "x.*", ".*y", "[xy]+", "z|xy", ".?y."})), st, false
		case 5:
			if st.stripped && g.emulatorSafe {
				continue // fine, but every value is empty: dull
			}
			return valueRegex(pick(r, []string{"a.*", ".*b", "[ab]+", "1|2", "", ".", "a?b?", `\xc2.`, "[^a]+", `.\xff`, "\xc2\xa7", ".."})), st, false
		case 6:
			lo, hi := g.bounds(genQualifiers)
			st.oneFamily = true
			return colRange(pick(r, genFamilies), lo, hi), st, false
		case 7:
			lo := 1000 * int64(r.IntN(7))
			hi := int64(0)
			if r.IntN(3) != 0 {
				hi = lo + 1000*int64(r.IntN(5))
			}
			return tsRange(lo, hi), st, false
		case 8:
			lo, hi := g.bounds(genValues[1:])
			return valRange(lo, hi), st, false
		case 9, 10:
			if g.emulatorSafe && (st.distinct || !st.oneFamily) {
				continue
			}
			if r.IntN(2) == 0 {
				return rowOffset(int32(r.IntN(4))), st, false
			}
			return rowLimit(int32(1 + r.IntN(4))), st, false
		case 11:
			if g.emulatorSafe && st.distinct {
				continue
			}
			return colLimit(int32(1 + r.IntN(3))), st, false
		case 12:
			if g.emulatorSafe && st.labeled {
				continue
			}
			st.stripped = true
			return strip(), st, false
		case 13, 14:
			if noLabel {
				continue
			}
			st.labeled = true
			return label(pick(r, []string{"l1", "l2", "l3"})), st, true
		case 15:
			if g.emulatorSafe || inCond {
				continue
			}
			return sink(), st, false
		case 16:
			if g.emulatorSafe {
				continue
			}
			return sample(pick(r, []float64{0.3, 0.5, 0.9})), st, false
		case 17:
			if g.emulatorSafe {
				continue
			}
			return bitmask(pick(r, []string{"a", "`", "0", "a`"})), st, false
		default:
			// Per-cell filters again, the common case in real
			// filters.
			f := pick(r, []string{"a", "b", "c"})
			st.oneFamily = true
			return familyRegex(f), st, false
		}
	}
}

// bounds returns two bounds in colRange notation, ordered, non-empty, each
// closed, open or absent.
func (g *generator) bounds(alphabet []string) (string, string) {
	lo, hi := pick(g.r, alphabet), pick(g.r, alphabet)
	if strings.Compare(lo, hi) > 0 {
		lo, hi = hi, lo
	}
	switch g.r.IntN(4) {
	case 0:
		lo = ""
	case 1:
		lo = "(" + lo
	default:
		lo = "[" + lo
	}
	switch g.r.IntN(4) {
	case 0:
		hi = ""
	case 1:
		hi += "]"
	default:
		hi += ")"
	}
	return lo, hi
}
