package agg

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/tabuladb/tabula/scripts/value"
)

var (
	intT    = value.IntType
	floatT  = value.FloatType
	stringT = value.StringType
)

func spec(kind string, param int, elem *value.Type, weight *value.Type, index ...*value.Type) *Spec {
	s := &Spec{Name: "t", Kind: kind, Param: param, Elem: value.Field{Type: elem}}
	if weight != nil {
		s.Weight = &value.Field{Type: weight}
	}
	for _, ix := range index {
		s.Index = append(s.Index, value.Field{Type: ix})
	}
	return s
}

type emit struct {
	key []value.Value
	v   value.Value
	w   value.Value
}

// render gives a table's entries as text, to compare tables.
func render(t *Table) []string {
	var out []string
	rt := t.Spec().ResultType()
	for _, e := range t.Entries() {
		s := ""
		for i, k := range e.Key {
			s += "[" + value.Format(t.Spec().Index[i].Type, k) + "]"
		}
		out = append(out, s+" "+value.Format(rt, e.Value))
	}
	return out
}

// roundTrip encodes a table and decodes it into a fresh one.
func roundTrip(tb testing.TB, t *Table) *Table {
	b, err := t.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	u := New(t.Spec())
	if err := u.UnmarshalBinary(b); err != nil {
		tb.Fatal(err)
	}
	return u
}

// splitMerge emits es into k tables (contiguous parts), round-trips each
// through bytes and merges them.
func splitMerge(tb testing.TB, s *Spec, es []emit, cuts ...int) *Table {
	merged := New(s)
	prev := 0
	for _, c := range append(cuts, len(es)) {
		part := New(s)
		for _, e := range es[prev:c] {
			part.Emit(e.key, e.v, e.w)
		}
		prev = c
		if err := merged.Merge(roundTrip(tb, part)); err != nil {
			tb.Fatal(err)
		}
	}
	return merged
}

func single(s *Spec, es []emit) *Table {
	t := New(s)
	for _, e := range es {
		t.Emit(e.key, e.v, e.w)
	}
	return t
}

func ints(ns ...int64) []emit {
	es := make([]emit, len(ns))
	for i, n := range ns {
		es[i] = emit{v: value.MakeInt(n), w: value.MakeInt(n % 7)}
	}
	return es
}

// TestExactTables checks each exact kind against hand-computed results, and
// that merging round-tripped partials gives the same.
func TestExactTables(t *testing.T) {
	str := func(s string) value.Value { return value.MakeString(s) }
	cases := []struct {
		name string
		spec *Spec
		es   []emit
		want []string
	}{
		{"sum int", spec(Sum, 0, intT, nil), ints(1, 2, 3, 4, 5, -6), []string{" 9"}},
		{"sum float", spec(Sum, 0, floatT, nil), []emit{{v: value.MakeFloat(0.5)}, {v: value.MakeFloat(0.25)}}, []string{" 0.75"}},
		{"sum indexed", spec(Sum, 0, intT, nil, stringT), []emit{
			{key: []value.Value{str("b")}, v: value.MakeInt(1)},
			{key: []value.Value{str("a")}, v: value.MakeInt(2)},
			{key: []value.Value{str("b")}, v: value.MakeInt(3)},
		}, []string{`["a"] 2`, `["b"] 4`}},
		{"mean", spec(Mean, 0, intT, nil), ints(1, 2, 3, 4), []string{" 2.5"}},
		{"collection", spec(Collection, 0, stringT, nil), []emit{{v: str("x")}, {v: str("y")}}, []string{` {"x", "y"}`}},
		{"maximum", spec(Maximum, 3, stringT, intT), []emit{
			{v: str("a"), w: value.MakeInt(5)}, {v: str("b"), w: value.MakeInt(9)}, {v: str("c"), w: value.MakeInt(1)},
			{v: str("d"), w: value.MakeInt(9)}, {v: str("e"), w: value.MakeInt(7)},
		}, []string{` {{value: "b", weight: 9}, {value: "d", weight: 9}, {value: "e", weight: 7}}`}},
		{"minimum", spec(Minimum, 2, stringT, floatT), []emit{
			{v: str("a"), w: value.MakeFloat(5)}, {v: str("b"), w: value.MakeFloat(-1)}, {v: str("c"), w: value.MakeFloat(2)},
		}, []string{` {{value: "b", weight: -1.0}, {value: "c", weight: 2.0}}`}},
		{"top", spec(Top, 2, stringT, intT), []emit{
			{v: str("a"), w: value.MakeInt(1)}, {v: str("b"), w: value.MakeInt(1)}, {v: str("a"), w: value.MakeInt(1)},
			{v: str("c"), w: value.MakeInt(5)}, {v: str("b"), w: value.MakeInt(1)}, {v: str("a"), w: value.MakeInt(1)},
		}, []string{` {{value: "c", weight: 5}, {value: "a", weight: 3}}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := render(single(c.spec, c.es)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("single run: got %q, want %q", got, c.want)
			}
			for cut := 0; cut <= len(c.es); cut++ {
				if got := render(splitMerge(t, c.spec, c.es, cut)); !reflect.DeepEqual(got, c.want) {
					t.Errorf("merged at %d: got %q, want %q", cut, got, c.want)
				}
			}
		})
	}
}

// TestMergeEqualsSingleRun checks, on random streams, that merged partials
// of the exact kinds equal the single run (collections up to order).
func TestMergeEqualsSingleRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var es []emit
	for range 5000 {
		es = append(es, emit{
			key: []value.Value{value.MakeInt(int64(rng.IntN(20)))},
			v:   value.MakeString(fmt.Sprintf("v%d", rng.IntN(300))),
			w:   value.MakeInt(int64(rng.IntN(1000))),
		})
	}
	for _, s := range []*Spec{
		spec(Maximum, 5, stringT, intT, intT),
		spec(Minimum, 5, stringT, intT, intT),
		spec(Top, 3, stringT, intT, intT),
		spec(Collection, 0, stringT, nil, intT),
		spec(Unique, 100, stringT, nil, intT),
	} {
		want := render(single(s, es))
		got := render(splitMerge(t, s, es, 100, 2500, 2501, 4000))
		if s.Kind == Collection {
			sort.Strings(want) // merged collections keep each part's order
			sort.Strings(got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: merged %v\nsingle %v", s.Kind, got, want)
		}
	}
}

// TestSampleMerge checks that a merged sample holds n values per group,
// all of them emitted to that group.
func TestSampleMerge(t *testing.T) {
	s := spec(Sample, 10, intT, nil, intT)
	var es []emit
	for i := range 3000 {
		es = append(es, emit{key: []value.Value{value.MakeInt(int64(i % 3))}, v: value.MakeInt(int64(i))})
	}
	entries := splitMerge(t, s, es, 1000, 1001, 2500).Entries()
	if len(entries) != 3 {
		t.Fatalf("%d groups", len(entries))
	}
	for _, e := range entries {
		vals := e.Value.Array().Elems
		seen := map[int64]bool{}
		for _, v := range vals {
			if v.N%3 != e.Key[0].N || seen[v.N] {
				t.Errorf("group %d: value %d duplicated or from another group", e.Key[0].N, v.N)
			}
			seen[v.N] = true
		}
		if len(vals) != 10 {
			t.Errorf("group %d has %d samples", e.Key[0].N, len(vals))
		}
	}
}

// TestTopApproximate checks the Misra-Gries bound once a top table sees
// more distinct values than it holds.
func TestTopApproximate(t *testing.T) {
	s := spec(Top, 5, intT, intT)
	rng := rand.New(rand.NewPCG(1, 2))
	exact := map[int64]int64{}
	var es []emit
	total := 0
	for range 200000 {
		// A few heavy hitters over a long tail of 50000 values.
		v := int64(rng.IntN(50000))
		if rng.IntN(4) == 0 {
			v = int64(rng.IntN(5))
		}
		exact[v]++
		total++
		es = append(es, emit{v: value.MakeInt(v), w: value.MakeInt(1)})
	}
	got := splitMerge(t, s, es, 50000, 120000).Entries()[0].Value.Array().Elems
	bound := float64(total) / float64(max(10*5, 100)+1)
	for i, e := range got {
		v, c := e.Tuple().Fields[0].N, e.Tuple().Fields[1].N
		if v >= 5 {
			t.Errorf("entry %d is %d, not a heavy hitter", i, v)
		}
		if float64(exact[v]-c) > 2*bound || c > exact[v] {
			t.Errorf("count of %d = %d, exact %d, bound %.0f", v, c, exact[v], bound)
		}
	}
}

// TestUniqueAccuracy checks the HyperLogLog estimate.
func TestUniqueAccuracy(t *testing.T) {
	s := spec(Unique, 10000, stringT, nil)
	for _, n := range []int{0, 1, 10, 1000, 100000} {
		var es []emit
		for i := range n {
			es = append(es, emit{v: value.MakeString(fmt.Sprint("k", i))}, emit{v: value.MakeString(fmt.Sprint("k", i))})
		}
		tab := splitMerge(t, s, es, len(es)/3)
		got := int64(0)
		if entries := tab.Entries(); len(entries) > 0 {
			got = entries[0].Value.N
		}
		if math.Abs(float64(got-int64(n))) > 0.02*float64(n) {
			t.Errorf("unique of %d distinct: %d", n, got)
		}
	}
}

// TestQuantileAccuracy checks that n-tiles are within DDSketch's relative
// error of the exact ones, with the exact minimum and maximum.
func TestQuantileAccuracy(t *testing.T) {
	s := spec(Quantile, 5, floatT, nil)
	rng := rand.New(rand.NewPCG(3, 4))
	var es []emit
	var vals []float64
	for range 20000 {
		f := rng.ExpFloat64() * 1000
		vals = append(vals, f)
		es = append(es, emit{v: value.MakeFloat(f)})
	}
	slices.Sort(vals)
	got := splitMerge(t, s, es, 7000).Entries()[0].Value.Array().Elems
	if len(got) != 5 {
		t.Fatalf("got %d n-tiles", len(got))
	}
	if got[0].Float() != vals[0] || got[4].Float() != vals[len(vals)-1] {
		t.Errorf("min/max = %v/%v, want %v/%v", got[0].Float(), got[4].Float(), vals[0], vals[len(vals)-1])
	}
	for i := 1; i < 4; i++ {
		exact := vals[int(float64(i)/4*float64(len(vals)-1))]
		if math.Abs(got[i].Float()-exact) > 0.02*exact {
			t.Errorf("quantile %d/4 = %v, exact %v", i, got[i].Float(), exact)
		}
	}
	// int elements come back as ints
	is := spec(Quantile, 3, intT, nil)
	r := render(single(is, ints(10, 20, 30, 40, 50)))
	if !reflect.DeepEqual(r, []string{" {10, 30, 50}"}) {
		t.Errorf("int quantiles: %v", r)
	}
}

// TestSample checks that a sample holds n distinct emitted values, is
// deterministic, and is roughly uniform.
func TestSample(t *testing.T) {
	s := spec(Sample, 100, intT, nil)
	var es []emit
	for i := range 10000 {
		es = append(es, emit{v: value.MakeInt(int64(i))})
	}
	a, b := render(single(s, es)), render(single(s, es))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("sampling is not deterministic")
	}
	got := single(s, es).Entries()[0].Value.Array().Elems
	seen := map[int64]bool{}
	low := 0
	for _, v := range got {
		seen[v.N] = true
		if v.N < 5000 {
			low++
		}
	}
	if len(got) != 100 || len(seen) != 100 {
		t.Fatalf("sample has %d values, %d distinct", len(got), len(seen))
	}
	if low < 30 || low > 70 {
		t.Errorf("%d of 100 sampled values in the lower half", low)
	}
}

// TestEmitCopies checks that tables do not keep the caller's memory.
func TestEmitCopies(t *testing.T) {
	buf := []byte("abc")
	s := spec(Collection, 0, value.BytesType, nil, value.BytesType)
	tab := New(s)
	str := string(buf) // a copy, like the VM's zero-copy strings would not be
	tab.Emit([]value.Value{value.MakeString(str)}, value.MakeString(str), value.Value{})
	if got := render(tab); !reflect.DeepEqual(got, []string{`[B"abc"] {B"abc"}`}) {
		t.Fatalf("got %q", got)
	}
	if tab.Size() <= 0 {
		t.Errorf("Size() = %d after an emit", tab.Size())
	}
}

// TestCorruptState checks that malformed partials are errors.
func TestCorruptState(t *testing.T) {
	s := spec(Maximum, 2, stringT, intT, stringT)
	tab := New(s)
	tab.Emit([]value.Value{value.MakeString("k")}, value.MakeString("v"), value.MakeInt(3))
	good, _ := tab.MarshalBinary()
	for i := range good {
		if err := New(s).UnmarshalBinary(good[:i]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated at %d: got %v", i, err)
		}
	}
	if err := New(spec(Maximum, 3, stringT, intT, stringT)).UnmarshalBinary(good); !errors.Is(err, ErrCorrupt) {
		t.Errorf("other spec: got %v", err)
	}
	if err := New(s).UnmarshalBinary(append(good, 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: got %v", err)
	}
	if err := New(s).Merge(New(spec(Sum, 0, intT, nil))); err == nil {
		t.Error("merged tables of different specs")
	}
}

// FuzzUnmarshal feeds arbitrary bytes to the decoder of every table kind:
// it must fail cleanly or produce a table that encodes and finalizes.
func FuzzUnmarshal(f *testing.F) {
	specs := []*Spec{
		spec(Collection, 0, value.ArrayOf(stringT), nil, intT),
		spec(Sum, 0, intT, nil, stringT),
		spec(Mean, 0, floatT, nil),
		spec(Maximum, 3, stringT, intT),
		spec(Top, 3, stringT, floatT),
		spec(Unique, 10, stringT, nil),
		spec(Quantile, 4, floatT, nil),
		spec(Sample, 3, value.TupleOf(value.Field{Name: "a", Type: intT}, value.Field{Name: "b", Type: value.MapOf(stringT, value.BoolType)}), nil),
	}
	for i, s := range specs {
		tab := New(s)
		for j := range 20 {
			var v value.Value
			switch s.Elem.Type.Kind {
			case value.Int:
				v = value.MakeInt(int64(j))
			case value.Float:
				v = value.MakeFloat(float64(j) * 1.5)
			case value.String:
				v = value.MakeString(fmt.Sprint(j))
			default:
				v = value.Zero(s.Elem.Type)
			}
			key := make([]value.Value, len(s.Index))
			for k, ix := range s.Index {
				key[k] = value.Zero(ix.Type)
			}
			tab.Emit(key, v, value.MakeInt(int64(j)))
			if s.Weight != nil && s.Weight.Type.Kind == value.Float {
				tab.Emit(key, v, value.MakeFloat(float64(j)))
			}
		}
		b, _ := tab.MarshalBinary()
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		s := specs[int(which)%len(specs)]
		tab := New(s)
		if err := tab.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		tab.Entries()
		if _, err := tab.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	})
}
