package filter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/storage/cell"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fixture is a row with several families, versions, a binary qualifier, a
// binary value and an empty value, in row order.
var fixture = cell.Row{Key: []byte("com.example/1"), Cells: []cell.Cell{
	c("a", "x", 30, "v30"),
	c("a", "x", 20, "v20"),
	c("a", "x", 10, "v10"),
	c("a", "y", 20, "hello"),
	c("b", "\x00q", 40, "\x00\xff"),
	c("b", "z", 15, ""),
	c("c", "x", 5, "42"),
}}

var all = []string{
	"a:x@30=v30", "a:x@20=v20", "a:x@10=v10", "a:y@20=hello",
	"b:\x00q@40=\x00\xff", "b:z@15=", "c:x@5=42",
}

type applyCase struct {
	name   string
	filter *bigtablepb.RowFilter
	want   []string
}

func runApply(t *testing.T, row cell.Row, cases []applyCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.filter, Limits{})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			got := format(f.Apply(row))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Apply:\n got %q\nwant %q", got, tt.want)
			}
			// ApplyAppend appends the same output after what dst holds.
			sentinel := LabeledCell{Cell: c("s", "s", 1, "sentinel")}
			appended := f.ApplyAppend([]LabeledCell{sentinel}, row)
			if got := format(appended[1:]); len(appended) == 0 || format(appended[:1])[0] != format([]LabeledCell{sentinel})[0] || !slices.Equal(got, tt.want) {
				t.Errorf("ApplyAppend after a cell:\n got %q\nwant the cell, then %q", format(appended), tt.want)
			}
			if f.Match(row) != (len(tt.want) > 0) {
				t.Errorf("Match = %v, want %v", f.Match(row), len(tt.want) > 0)
			}
		})
	}
}

func TestApplySingleFilters(t *testing.T) {
	stripped := []string{"a:x@30=", "a:x@20=", "a:x@10=", "a:y@20=", "b:\x00q@40=", "b:z@15=", "c:x@5="}
	labeled := make([]string, len(all))
	for i, s := range all {
		labeled[i] = s + "[foo]"
	}
	runApply(t, fixture, []applyCase{
		{"no filter", nil, all},
		{"pass_all", pass(), all},
		{"block_all", block(), nil},
		{"sink alone passes everything", sink(), all},

		{"row key regex matches whole key", keyRegex(`com\..*`), all},
		{"row key regex is not a substring match", keyRegex("example"), nil},
		{"row key regex with byte wildcard", keyRegex(`com\.example/\C`), all},

		{"family literal", familyRegex("a"), all[:4]},
		{"family class", familyRegex("[bc]"), all[4:]},
		{"family regex full match", familyRegex("b|cc"), all[4:6]},
		{"empty family regex matches nothing", familyRegex(""), nil},

		{"qualifier literal", qualRegex("x"), []string{all[0], all[1], all[2], all[6]}},
		{"qualifier with NUL byte", qualRegex(`\x00q`), all[4:5]},
		{"dot matches NUL", qualRegex(`.q`), all[4:5]},
		{"qualifier regex full match", qualRegex("q"), nil},

		{"column range closed", colRange("a", "[x", "x]"), all[:3]},
		{"column range open start", colRange("a", "(x", ""), all[3:4]},
		{"column range open end", colRange("a", "", "y)"), all[:3]},
		{"column range unbounded", colRange("b", "", ""), all[4:6]},
		{"column range empty bounds are unbounded", colRange("b", "[", ")"), all[4:6]},
		{"column range empty but valid", colRange("a", "[y", "y)"), nil},
		{"column range open-closed", colRange("a", "(x", "y]"), all[3:4]},
		{"column range other family", colRange("d", "", ""), nil},

		{"timestamp range", tsRange(10, 30), []string{all[1], all[2], all[3], all[5]}},
		{"timestamp range unbounded end", tsRange(20, 0), []string{all[0], all[1], all[3], all[4]}},
		{"timestamp range everything", tsRange(0, 0), all},
		{"timestamp range empty", tsRange(20, 20), nil},

		{"value regex", valueRegex("v.*"), all[:3]},
		{"empty value regex matches empty values", valueRegex(""), all[5:6]},
		{"value regex byte wildcard", valueRegex(`\x00\C`), all[4:5]},
		{"dot matches any byte but newline", valueRegex(`\x00.`), all[4:5]},
		{"value regex full match", valueRegex("v"), nil},

		{"value range closed-open", valRange("[v20", "v30)"), all[1:2]},
		{"value range open start", valRange("(v10", ""), all[:2]},
		{"value range closed end", valRange("", "42]"), all[4:7]},
		{"value range empty end is unbounded", valRange("[v20", "]"), all[:2]},

		{"bitmask", bitmask("\x00\xf0"), all[4:5]},
		{"bitmask length must match", bitmask("\x00"), nil},

		{"row offset", rowOffset(5), all[5:]},
		{"row offset past the end", rowOffset(7), nil},
		{"row offset zero", rowOffset(0), all},
		{"row limit", rowLimit(2), all[:2]},
		{"row limit over size", rowLimit(100), all},
		{"column limit 1", colLimit(1), []string{all[0], all[3], all[4], all[5], all[6]}},
		{"column limit 2", colLimit(2), []string{all[0], all[1], all[3], all[4], all[5], all[6]}},

		{"strip value", strip(), stripped},
		{"label", label("foo"), labeled},
	})
}

func TestApplyCompositions(t *testing.T) {
	runApply(t, fixture, []applyCase{
		{"chain narrows", chain(familyRegex("a"), colLimit(1)), []string{all[0], all[3]}},
		{"chain order matters", chain(colLimit(1), tsRange(0, 25)), []string{all[3], all[5], all[6]}},
		{"chain with block", chain(pass(), block()), nil},
		{
			"interleave keeps duplicates in row order",
			interleave(familyRegex("a"), qualRegex("x")),
			[]string{all[0], all[0], all[1], all[1], all[2], all[2], all[3], all[6]},
		},
		{
			"interleave of labels, copies in branch order",
			interleave(chain(qualRegex("x"), label("l1")), chain(colLimit(1), label("l2"))),
			[]string{
				"a:x@30=v30[l1]", "a:x@30=v30[l2]", "a:x@20=v20[l1]", "a:x@10=v10[l1]", "a:y@20=hello[l2]",
				"b:\x00q@40=\x00\xff[l2]", "b:z@15=[l2]", "c:x@5=42[l1]", "c:x@5=42[l2]",
			},
		},
		{"interleave of blocks", interleave(block(), block()), nil},
		{"row limit counts duplicates", chain(interleave(familyRegex("a"), familyRegex("a")), rowLimit(3)), []string{all[0], all[0], all[1]}},
		{"column limit counts duplicates", chain(interleave(familyRegex("a"), familyRegex("a")), colLimit(1)), []string{all[0], all[3]}},
		{"row offset counts duplicates", chain(interleave(pass(), pass()), rowOffset(12)), []string{all[6], all[6]}},
		{"label then strip keeps the label", chain(label("l"), strip()), []string{"a:x@30=[l]", "a:x@20=[l]", "a:x@10=[l]", "a:y@20=[l]", "b:\x00q@40=[l]", "b:z@15=[l]", "c:x@5=[l]"}},

		{"condition true", cond(familyRegex("c"), chain(familyRegex("a"), strip()), block()), []string{"a:x@30=", "a:x@20=", "a:x@10=", "a:y@20="}},
		{"condition false", cond(familyRegex("d"), block(), familyRegex("c")), all[6:]},
		{"condition runs branches on the original row", cond(familyRegex("a"), familyRegex("b"), nil), all[4:6]},
		{"condition missing true branch", cond(familyRegex("a"), nil, pass()), nil},
		{"condition missing false branch", cond(familyRegex("d"), pass(), nil), nil},
		{"condition missing predicate takes true branch", cond(nil, rowLimit(1), block()), all[:1]},
		{"condition predicate sees only its input", chain(familyRegex("a"), cond(familyRegex("c"), pass(), rowLimit(1))), all[:1]},
		{"condition predicate labels do not leak", cond(label("p"), familyRegex("c"), nil), all[6:]},
		{
			"nested chain of interleave of condition",
			chain(
				keyRegex("com.*"),
				interleave(
					cond(valueRegex("hello"), chain(colRange("a", "[x", "x]"), rowLimit(1)), block()),
					chain(familyRegex("c"), label("c")),
				),
				strip(),
			),
			[]string{"a:x@30=", "c:x@5=[c]"},
		},

		{"sink at the end of a chain", chain(familyRegex("a"), sink()), all[:4]},
		{"sink output skips the rest of the chain", chain(familyRegex("c"), sink(), block()), all[6:]},
		{
			"sink next to an interleave branch",
			chain(interleave(chain(familyRegex("c"), label("s"), sink()), familyRegex("b")), rowLimit(1)),
			[]string{all[4], "c:x@5=42[s]"},
		},
		{"sink in both interleave branches", interleave(chain(familyRegex("c"), sink()), chain(familyRegex("c"), sink())), []string{all[6], all[6]}},
	})
}

// TestSinkExample is the example of data.proto's sink documentation.
func TestSinkExample(t *testing.T) {
	row := cell.Row{Key: []byte("r"), Cells: []cell.Cell{
		c("A", "A", 1, "w"),
		c("A", "B", 2, "x"),
		c("B", "B", 4, "z"),
	}}
	runApply(t, row, []applyCase{{
		"data.proto",
		chain(familyRegex("A"), interleave(pass(), chain(label("foo"), sink())), qualRegex("B")),
		[]string{"A:A@1=w[foo]", "A:B@2=x[foo]", "A:B@2=x"},
	}})
}

func TestApplyEmptyRowAndAliasing(t *testing.T) {
	f, err := Compile(cond(block(), nil, pass()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Apply(cell.Row{Key: []byte("k")}); got != nil {
		t.Errorf("empty row gave %v", got)
	}
	// Apply must not modify its input, even when it strips and labels.
	row := cell.Row{Key: []byte("k"), Cells: []cell.Cell{c("a", "q", 1, "v"), c("a", "q", 0, "w")}}
	f, err = Compile(interleave(chain(label("l"), strip()), colLimit(1)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := format(f.Apply(row))
	want := []string{"a:q@1=[l]", "a:q@1=v", "a:q@0=[l]"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if string(row.Cells[0].Value) != "v" || string(row.Cells[1].Value) != "w" {
		t.Errorf("input row modified: %+v", row.Cells)
	}
}

func TestRowSample(t *testing.T) {
	flips := []float64{0.1, 0.9, 0.3, 0.7}
	i := 0
	next := func() float64 { v := flips[i%len(flips)]; i++; return v }
	f, err := Compile(sample(0.5), Limits{}, WithRand(next))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 4 {
		got = append(got, len(f.Apply(fixture)) == len(fixture.Cells))
	}
	if want := []bool{true, false, true, false}; !slices.Equal(got, want) {
		t.Errorf("samples %v, want %v", got, want)
	}
	// Two samples in an interleave flip independent coins.
	i = 0
	f, err = Compile(interleave(sample(0.5), sample(0.5)), Limits{}, WithRand(next))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Apply(fixture)); n != len(fixture.Cells) {
		t.Errorf("interleave of samples (0.1, 0.9) gave %d cells, want %d", n, len(fixture.Cells))
	}
	// With the default source, a p = 0.5 sample keeps about half the rows.
	f, err = Compile(sample(0.5), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for range 2000 {
		if f.Match(fixture) {
			kept++
		}
	}
	if kept < 800 || kept > 1200 {
		t.Errorf("kept %d of 2000 rows at p = 0.5", kept)
	}
}

func TestCompileErrors(t *testing.T) {
	deep := pass()
	for range 70 {
		deep = chain(pass(), deep)
	}
	tests := []struct {
		name   string
		filter *bigtablepb.RowFilter
		lim    Limits
		field  string
		reason string
	}{
		{"empty chain", chain(), Limits{}, "filter.chain.filters", "at least two"},
		{"chain of one", chain(pass()), Limits{}, "filter.chain.filters", "at least two"},
		{"empty interleave", interleave(), Limits{}, "filter.interleave.filters", "at least two"},
		{"interleave of one", interleave(pass()), Limits{}, "filter.interleave.filters", "at least two"},
		{"bad regex in chain", chain(pass(), valueRegex("(")), Limits{}, "filter.chain.filters[1].value_regex_filter", "invalid RE2"},
		{"empty RowFilter", &bigtablepb.RowFilter{}, Limits{}, "filter", "no filter set"},
		{"empty RowFilter in chain", chain(pass(), &bigtablepb.RowFilter{}), Limits{}, "filter.chain.filters[1]", "no filter set"},
		{"sink in predicate", cond(sink(), pass(), nil), Limits{}, "filter.condition.predicate_filter.sink", "within a condition"},
		{"sink in true branch", cond(pass(), chain(pass(), sink()), nil), Limits{}, "filter.condition.true_filter.chain.filters[1].sink", "within a condition"},
		{"sink in nested false branch", chain(pass(), interleave(cond(pass(), nil, sink()), pass())), Limits{}, "filter.chain.filters[1].interleave.filters[0].condition.false_filter.sink", "within a condition"},
		{"pass_all false", &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_PassAllFilter{}}, Limits{}, "filter.pass_all_filter", "must be true"},
		{"block_all false", &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_BlockAllFilter{}}, Limits{}, "filter.block_all_filter", "must be true"},
		{"sink false", &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Sink{}}, Limits{}, "filter.sink", "must be true"},
		{"strip false", &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_StripValueTransformer{}}, Limits{}, "filter.strip_value_transformer", "must be true"},
		{"empty row key regex", keyRegex(""), Limits{}, "filter.row_key_regex_filter", "must not be empty"},
		{"bad row key regex", keyRegex(`[\C]`), Limits{}, "filter.row_key_regex_filter", "invalid RE2"},
		{"sample 0", sample(0), Limits{}, "filter.row_sample_filter", "between 0.0 and 1.0"},
		{"sample 1", sample(1), Limits{}, "filter.row_sample_filter", "between 0.0 and 1.0"},
		{"sample negative", sample(-0.5), Limits{}, "filter.row_sample_filter", "between 0.0 and 1.0"},
		{"sample NaN", sample(math.NaN()), Limits{}, "filter.row_sample_filter", "between 0.0 and 1.0"},
		{"family regex with colon", familyRegex("a:b"), Limits{}, "filter.family_name_regex_filter", "must not contain ':'"},
		{"bad family regex", familyRegex("("), Limits{}, "filter.family_name_regex_filter", "invalid RE2"},
		{"bad qualifier regex", qualRegex("["), Limits{}, "filter.column_qualifier_regex_filter", "invalid RE2"},
		{"reversed column range", colRange("a", "[z", "a)"), Limits{}, "filter.column_range_filter", "reversed column range"},
		{"reversed value range", valRange("[b", "a]"), Limits{}, "filter.value_range_filter", "reversed value range"},
		{"reversed timestamp range", tsRange(10, 5), Limits{}, "filter.timestamp_range_filter", "reversed timestamp range"},
		{"negative offset", rowOffset(-1), Limits{}, "filter.cells_per_row_offset_filter", "must be >= 0"},
		{"zero row limit", rowLimit(0), Limits{}, "filter.cells_per_row_limit_filter", "must be > 0"},
		{"negative row limit", rowLimit(-3), Limits{}, "filter.cells_per_row_limit_filter", "must be > 0"},
		{"zero column limit", colLimit(0), Limits{}, "filter.cells_per_column_limit_filter", "must be > 0"},
		{"empty label", label(""), Limits{}, "filter.apply_label_transformer", "must match"},
		{"upper-case label", label("Foo"), Limits{}, "filter.apply_label_transformer", "must match"},
		{"label with space", label("a b"), Limits{}, "filter.apply_label_transformer", "must match"},
		{"label too long", label("abcdefghijklmnop"), Limits{}, "filter.apply_label_transformer", "longer than 15"},
		{"two labels in a chain", chain(label("a"), label("b")), Limits{}, "filter.chain.filters[1]", "only one sub-filter"},
		{"two label-carrying sub-filters", chain(interleave(label("a"), pass()), pass(), cond(pass(), label("b"), nil)), Limits{}, "filter.chain.filters[2]", "another is filters[0]"},
		{"bitmask without mask", bitmask(""), Limits{}, "filter.value_bitmask_filter.mask", "required"},
		{"too deep", deep, Limits{}, "filter" + strings.Repeat(".chain.filters[1]", 63) + ".chain.filters[0]", "nested more than 64"},
		{"too many filters", chain(pass(), pass(), pass()), Limits{MaxFilters: 3}, "filter.chain.filters[2]", "more than 3 RowFilters"},
		{"regex too long", valueRegex("abcde"), Limits{MaxRegexBytes: 4}, "filter.value_regex_filter", "limit 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.filter, tt.lim)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile error = %v, want *Error", err)
			}
			if fe.Field != tt.field {
				t.Errorf("field = %q, want %q", fe.Field, tt.field)
			}
			if !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", fe.Reason, tt.reason)
			}
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Errorf("status code = %v, want InvalidArgument", code)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.field) {
				t.Errorf("status message %q does not name the field", msg)
			}
		})
	}
}

func TestCompileField(t *testing.T) {
	_, err := Compile(chain(pass(), rowLimit(0)), Limits{}, WithField("predicate_filter"))
	var fe *Error
	if !errors.As(err, &fe) || fe.Field != "predicate_filter.chain.filters[1].cells_per_row_limit_filter" {
		t.Errorf("error = %v, want one on predicate_filter.chain.filters[1].cells_per_row_limit_filter", err)
	}
}

// Edge cases that are valid, each with what it outputs on the fixture.
func TestCompileAcceptsEdgeCases(t *testing.T) {
	runApply(t, fixture, []applyCase{
		{"empty column range", colRange("a", "(x", "x)"), nil},
		{"empty timestamp range", tsRange(5, 5), nil},
		{"negative timestamp start", tsRange(-5, 0), all},
		{"condition with no branches", cond(pass(), nil, nil), nil},
		{"long chain", chain(pass(), pass(), pass(), pass(), pass(), rowLimit(1)), all[:1]},
	})
	// The label cases: checked for acceptance and output separately,
	// since their outputs are long.
	for _, f := range []*bigtablepb.RowFilter{
		interleave(label("a"), label("b")),
		chain(label("a"), cond(label("b"), rowLimit(1), nil)),
		chain(pass(), interleave(label("a"), block())),
		label("abcdefghijklmno"),
		label("0-9"),
	} {
		if _, err := Compile(f, Limits{}); err != nil {
			t.Errorf("Compile(%v): %v", f, err)
		}
	}
	f, err := Compile(chain(label("a"), cond(label("b"), rowLimit(1), nil)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := format(f.Apply(fixture)); !slices.Equal(got, []string{"a:x@30=v30[a]"}) {
		t.Errorf("got %q", got)
	}
}

func BenchmarkApply(b *testing.B) {
	var cells []cell.Cell
	for q := range 20 {
		for ts := range 5 {
			cells = append(cells, c("f", fmt.Sprintf("q%02d", q), int64(100-ts), "some value of a cell"))
		}
	}
	row := cell.Row{Key: []byte("com.example/page"), Cells: cells}
	for _, bc := range []struct {
		name string
		f    *bigtablepb.RowFilter
	}{
		{"latest version", chain(familyRegex("f"), colLimit(1))},
		{"qualifier and value regex", chain(qualRegex("q1.*"), valueRegex(".*value.*"))},
		{"interleave with labels", interleave(chain(colLimit(1), label("new")), chain(rowOffset(50), strip()))},
	} {
		f, err := Compile(bc.f, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if len(f.Apply(row)) == 0 {
					b.Fatal("no output")
				}
			}
		})
	}
}
