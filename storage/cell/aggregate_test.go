package cell

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func be(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func TestAggregatorMergeInt64(t *testing.T) {
	for _, c := range []struct {
		agg  Aggregator
		x, y int64
		want int64
	}{
		{Sum, 5, 10, 15},
		{Sum, -7, 3, -4},
		{Sum, math.MaxInt64, 1, math.MinInt64}, // int64 addition wraps
		{Min, 5, -10, -10},
		{Min, 3, 3, 3},
		{Max, 5, -10, 5},
		{Max, math.MinInt64, math.MaxInt64, math.MaxInt64},
	} {
		st, err := c.agg.InputState(c.x)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.agg.Merge(st, be(c.y))
		if err != nil {
			t.Fatalf("%v(%d, %d): %v", c.agg, c.x, c.y, err)
		}
		if g := int64(binary.BigEndian.Uint64(got)); g != c.want {
			t.Errorf("%v(%d, %d) = %d, want %d", c.agg, c.x, c.y, g, c.want)
		}
	}
	if _, err := Sum.Merge(be(1), []byte{1}); err == nil {
		t.Error("Sum.Merge of a 1-byte state: no error")
	}
	if err := Max.ValidateState(make([]byte, 7)); err == nil {
		t.Error("Max.ValidateState of 7 bytes: no error")
	}
}

func TestAggregatorHLL(t *testing.T) {
	// Two states over overlapping inputs merge to the count of the union.
	a, b := []byte(nil), []byte(nil)
	add := func(st []byte, v int64) []byte {
		one, err := HLLUniqueCount.InputState(v)
		if err != nil {
			t.Fatal(err)
		}
		if st == nil {
			return one
		}
		m, err := HLLUniqueCount.Merge(st, one)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for v := range int64(300) {
		a = add(a, v)
	}
	for v := int64(200); v < 500; v++ {
		b = add(b, v)
	}
	m, err := HLLUniqueCount.Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := HLLUniqueCount.ValidateState(m); err != nil {
		t.Fatalf("merged state: %v", err)
	}
	n, err := HLLEstimate(m)
	if err != nil {
		t.Fatal(err)
	}
	if n < 490 || n > 510 { // HLL++ is within ~1% at this size; 500 distinct
		t.Errorf("estimate of 500 distinct inputs = %d", n)
	}
	if err := HLLUniqueCount.ValidateState([]byte("not a sketch")); err == nil {
		t.Error("ValidateState of garbage: no error")
	}
	if _, err := HLLUniqueCount.Merge(m, be(3)); err == nil {
		t.Error("Merge with an 8-byte int: no error")
	}
}

func TestValidateAggregateMutations(t *testing.T) {
	l := DefaultLimits()
	for _, c := range []struct {
		m     Mutation
		field string
	}{
		{Add("f", []byte("q"), -1, 1), "mutations[0].add_to_cell.timestamp"},
		{Mutation{Kind: AddToCell, Family: "f", Value: []byte{1, 2}}, "mutations[0].add_to_cell.input"},
		{Merge("f", []byte("q"), -5, be(1)), "mutations[0].merge_to_cell.timestamp"},
		{Merge("", []byte("q"), 5, be(1)), "mutations[0].merge_to_cell.family_name"},
	} {
		err := l.ValidateRowMutation(RowMutation{Row: []byte("r"), Mutations: []Mutation{c.m}})
		var ia *InvalidArgumentError
		if !errors.As(err, &ia) || ia.Field != c.field {
			t.Errorf("%+v: got %v, want an error naming %s", c.m, err, c.field)
		}
	}
	if err := l.ValidateRowMutation(RowMutation{Row: []byte("r"), Mutations: []Mutation{Add("f", nil, 0, 7), Merge("f", []byte("q"), 1000, be(1))}}); err != nil {
		t.Errorf("valid aggregate mutations: %v", err)
	}
}

// TestFolder: a fold of many states equals the chain of pairwise merges,
// for every aggregator; a malformed state fails the fold.
func TestFolder(t *testing.T) {
	for _, a := range []Aggregator{Sum, Min, Max, HLLUniqueCount} {
		var states [][]byte
		for _, v := range []int64{5, -3, 12, 5, 0, -40, 7} {
			s, err := a.InputState(v)
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, s)
		}
		chain := states[0]
		f := a.NewFolder(states[0])
		for _, s := range states[1:] {
			var err error
			if chain, err = a.Merge(chain, s); err != nil {
				t.Fatal(err)
			}
			f.Add(s)
		}
		got, err := f.State()
		if err != nil {
			t.Fatalf("%v: %v", a, err)
		}
		if a == HLLUniqueCount {
			g, _ := HLLEstimate(got)
			w, _ := HLLEstimate(chain)
			if g != w || g != 6 {
				t.Errorf("hll fold estimate %d, chain %d, want 6", g, w)
			}
		} else if !bytes.Equal(got, chain) {
			t.Errorf("%v: fold %x, chain %x", a, got, chain)
		}
		bad := a.NewFolder(states[0])
		bad.Add([]byte{1})
		if _, err := bad.State(); err == nil {
			t.Errorf("%v: a fold with a 1-byte state succeeded", a)
		}
	}
}
