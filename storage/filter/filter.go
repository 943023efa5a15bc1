// Package filter evaluates Cloud Bigtable's google.bigtable.v2.RowFilter over
// one row at a time.
//
// Compile validates a RowFilter once per request and pre-compiles its
// regular expressions; Apply then runs it over each row the read produces. A
// row is presented as cell.Row with its cells in Cloud Bigtable's order
// (family ↑, qualifier ↑, timestamp ↓), and the result is that row's output
// cells in the same order, each with the labels apply_label_transformer
// attached to it. PushDown extracts the part of a filter storage can apply
// before it builds the row (families, a timestamp range, versions per
// column) without changing the result.
//
// The semantics are Cloud Bigtable's as documented in data.proto and the
// client libraries; where the documentation is silent, the behaviour of the
// official emulator (cloud.google.com/go/bigtable/bttest) is followed, except
// where that emulator is known to disagree with the service. Each such
// decision is stated at the code that makes it. In short:
//
//   - Regex filters are RE2, full match, over raw bytes (RE2's Latin-1
//     mode): '.' is any byte other than '\n', \C is any byte, \xHH is the
//     byte HH (see bytesRegexp).
//   - Chains and interleaves need at least two filters; a condition without
//     predicate takes its true branch; a missing true or false branch
//     outputs nothing; an empty RowFilter message is an error.
//   - A sink sends its input to the read's output and nothing to its parent;
//     it is refused inside a condition.
//   - Interleave keeps duplicates; row and column limits and the row offset
//     count each copy.
//   - An empty range bound is no bound; a reversed range is an error.
//   - Labels must match [a-z0-9-]{1,15}; a chain may have only one
//     sub-filter that can label (cells carry at most one label).
//   - Limits: cells_per_row_limit and cells_per_column_limit > 0,
//     cells_per_row_offset >= 0, row_sample_filter in (0, 1).
package filter

import (
	"bytes"
	"math/rand/v2"
	"regexp"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/storage/cell"
)

// Default limits, used for the zero fields of Limits. They bound the work one
// request can make a server do to compile its filter; real filters, even
// those the HBase adapter generates, stay far below them.
const (
	DefaultMaxDepth      = 64
	DefaultMaxFilters    = 4096
	DefaultMaxRegexBytes = 64 << 10
)

// Limits bound the size of a filter Compile accepts. A zero field means the
// corresponding default.
type Limits struct {
	// MaxDepth is the deepest nesting of chain, interleave and condition.
	MaxDepth int
	// MaxFilters is the number of RowFilter messages in the whole tree.
	MaxFilters int
	// MaxRegexBytes is the length of each regular expression.
	MaxRegexBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxFilters <= 0 {
		l.MaxFilters = DefaultMaxFilters
	}
	if l.MaxRegexBytes <= 0 {
		l.MaxRegexBytes = DefaultMaxRegexBytes
	}
	return l
}

// Option changes how Compile builds a Filter.
type Option func(*config)

type config struct {
	field string
	rand  func() float64
}

// WithField names the request field the filter came from, the root of the
// field paths in errors: "filter" (the default) for ReadRows,
// "predicate_filter" for CheckAndMutateRow.
func WithField(name string) Option { return func(c *config) { c.field = name } }

// WithRand sets the source of row_sample_filter's coin flips: a function
// returning numbers uniformly distributed in [0, 1). The default is
// math/rand/v2's Float64. Tests inject a deterministic source.
func WithRand(f func() float64) Option { return func(c *config) { c.rand = f } }

// LabeledCell is one output cell: a cell of the input row, possibly with its
// value stripped, and the labels apply_label_transformer gave it (nil when
// none). Cloud Bigtable applies at most one label to a cell, so Labels has at
// most one element; it is a slice because the wire format is.
type LabeledCell struct {
	cell.Cell
	Labels []string
}

// Filter is a compiled RowFilter. It is immutable and safe for concurrent
// use (provided the random source given with WithRand is).
type Filter struct {
	root node
	rand func() float64
	// pass is true when the filter is known to output its input unchanged
	// (no filter, pass_all), so Apply can skip the evaluation.
	pass bool
	pb   *bigtablepb.RowFilter
}

// Compile validates f and returns it compiled. A nil f is the filter that
// passes every cell, as an unset ReadRowsRequest.filter is. An invalid filter
// returns an *Error naming the offending field.
func Compile(f *bigtablepb.RowFilter, lim Limits, opts ...Option) (*Filter, error) {
	cfg := config{field: "filter", rand: rand.Float64}
	for _, o := range opts {
		o(&cfg)
	}
	out := &Filter{rand: cfg.rand, pb: f}
	if f == nil {
		out.root, out.pass = passNode{}, true
		return out, nil
	}
	c := compiler{lim: lim.withDefaults()}
	root, _, err := c.compile(f, cfg.field, 1, false)
	if err != nil {
		return nil, err
	}
	out.root = root
	_, out.pass = root.(passNode)
	return out, nil
}

// Proto returns the RowFilter the Filter was compiled from (nil for none).
func (f *Filter) Proto() *bigtablepb.RowFilter { return f.pb }

// Apply runs the filter over row and returns the output cells, ordered as
// row.Cells are, with labels attached. row.Cells must be in row order
// (family ↑, qualifier ↑, timestamp ↓), as storage produces them; the per
// column filters and the interleave merge rely on it. Duplicates are possible: an interleave
// whose branches both output a cell outputs it twice, as Cloud Bigtable does;
// copies of the same cell keep the order of the branches that produced them.
// The output shares the byte slices of row, and cells share their Labels
// slices; none of them may be modified while the other is in use. Apply returns nil when no cell passes, and an empty row
// always yields nil, so a caller may drop rows that storage left empty.
func (f *Filter) Apply(row cell.Row) []LabeledCell {
	if len(row.Cells) == 0 {
		return nil
	}
	in := make([]LabeledCell, len(row.Cells))
	for i, c := range row.Cells {
		in[i] = LabeledCell{Cell: c}
	}
	if f.pass {
		return in
	}
	ev := evaluator{key: row.Key, rand: f.rand}
	out := f.root.apply(&ev, in)
	if len(ev.sunk) == 0 {
		if len(out) == 0 {
			return nil
		}
		return out
	}
	// Cells that reached a sink go straight to the output, next to what
	// the filter as a whole produced.
	res := []LabeledCell(nil)
	for _, s := range ev.sunk {
		res = merge(res, s)
	}
	res = merge(res, out)
	if len(res) == 0 {
		return nil
	}
	return res
}

// ApplyAppend is Apply with the output appended to dst and returned (dst
// unchanged when no cell passes). A caller that is done with the output
// before its next call reuses one buffer (ApplyAppend(buf[:0], row)), and
// then a filter that passes every cell allocates nothing.
func (f *Filter) ApplyAppend(dst []LabeledCell, row cell.Row) []LabeledCell {
	if f.pass {
		for _, c := range row.Cells {
			dst = append(dst, LabeledCell{Cell: c})
		}
		return dst
	}
	return append(dst, f.Apply(row)...)
}

// Match reports whether the filter outputs any cell for row: the predicate of
// CheckAndMutateRow and of a condition filter.
func (f *Filter) Match(row cell.Row) bool {
	return len(f.Apply(row)) > 0
}

// labelPattern is what Cloud Bigtable accepts as a label (data.proto:
// "at most 15 characters in length, and match the RE2 pattern [a-z0-9\-]+").
// The emulator checks the pattern unanchored, so it accepts "Foo-1"; we check
// the whole label, as the service does.
var labelPattern = regexp.MustCompile(`^[a-z0-9\-]+$`)

const maxLabelLen = 15

// merge merges two sorted cell lists into one; of equal cells, those of a
// come first.
func merge(a, b []LabeledCell) []LabeledCell {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]LabeledCell, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if cell.CompareCells(b[j].Cell, a[i].Cell) < 0 {
			out = append(out, b[j])
			j++
		} else {
			out = append(out, a[i])
			i++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

func sameColumn(a, b *cell.Cell) bool {
	return a.Family == b.Family && bytes.Equal(a.Qualifier, b.Qualifier)
}
