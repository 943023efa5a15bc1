package faultcampaign

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func check(t *testing.T, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, _ := porcupine.CheckOperationsVerbose(RowModel, h, 10*time.Second)
	return res
}

func TestRowModelLinearizable(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 10, Input{Kind: OpPut, Value: "x"}, Output{}),
		op(1, 5, 20, Input{Kind: OpIncr}, Output{N: 1}),
		op(0, 11, 30, Input{Kind: OpCAS, Expect: "", Value: "v1"}, Output{Matched: true}),
		op(2, 12, 40, Input{Kind: OpAppend, Value: "a."}, Output{A: "a."}),
		op(1, 41, 50, Input{Kind: OpRead}, Output{Read: RowState{C: "x", D: "x", V: "v1", W: "v1", N: 1, A: "a."}}),
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("a linearizable history checked %v", r)
	}
}

// An acknowledged increment that a later read does not see, a counter
// counted twice, a half-applied row, a CAS answering wrongly: each is
// illegal.
func TestRowModelAnomalies(t *testing.T) {
	cases := map[string][]porcupine.Operation{
		"lost increment": {
			op(0, 0, 10, Input{Kind: OpIncr}, Output{N: 1}),
			op(0, 11, 20, Input{Kind: OpRead}, Output{Read: RowState{}}),
		},
		"double increment": {
			op(0, 0, 10, Input{Kind: OpIncr}, Output{N: 1}),
			op(0, 11, 20, Input{Kind: OpRead}, Output{Read: RowState{N: 2}}),
		},
		"half-applied put": {
			op(0, 0, 10, Input{Kind: OpPut, Value: "x"}, Output{}),
			op(0, 11, 20, Input{Kind: OpRead}, Output{Read: RowState{C: "x"}}),
		},
		"cas matched twice": {
			op(0, 0, 10, Input{Kind: OpCAS, Expect: "", Value: "a"}, Output{Matched: true}),
			op(1, 11, 20, Input{Kind: OpCAS, Expect: "", Value: "b"}, Output{Matched: true}),
		},
		"stale read after delete": {
			op(0, 0, 10, Input{Kind: OpPut, Value: "x"}, Output{}),
			op(0, 11, 20, Input{Kind: OpDelete}, Output{}),
			op(1, 21, 30, Input{Kind: OpRead}, Output{Read: RowState{C: "x", D: "x"}}),
		},
	}
	for name, h := range cases {
		if r := check(t, h); r != porcupine.Illegal {
			t.Errorf("%s: checked %v, want Illegal", name, r)
		}
	}
}

// An operation of unknown outcome may have happened or not, at any time
// after its call, but only once.
func TestRowModelUnknownOutcome(t *testing.T) {
	inf := int64(math.MaxInt64)
	for _, n := range []int64{0, 1} {
		h := []porcupine.Operation{
			op(0, 0, inf, Input{Kind: OpIncr}, Output{Unknown: true}),
			op(1, 5, 20, Input{Kind: OpRead}, Output{Read: RowState{N: n}}),
		}
		if r := check(t, h); r != porcupine.Ok {
			t.Errorf("unknown increment, read %d: %v", n, r)
		}
	}
	h := []porcupine.Operation{
		op(0, 0, inf, Input{Kind: OpIncr}, Output{Unknown: true}),
		op(1, 5, 20, Input{Kind: OpRead}, Output{Read: RowState{N: 2}}),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Errorf("one unknown increment counted twice: %v", r)
	}
}

// CheckRows names the column group of an anomaly and the operations
// around it.
func TestCheckRowsNamesTheColumns(t *testing.T) {
	ms := time.Millisecond
	events := []Event{
		{Client: 0, Row: "r", In: Input{Kind: OpPut, Value: "x"}, Call: 0, Return: 1 * ms},
		{Client: 0, Row: "r", In: Input{Kind: OpIncr}, Out: Output{N: 1}, Call: 2 * ms, Return: 3 * ms},
		{Client: 1, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{C: "x", D: "x", N: 0}}, Call: 4 * ms, Return: 5 * ms},
		{Client: 1, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{C: "x", D: "x", N: 1}}, Call: 6 * ms, Return: 7 * ms},
	}
	res := CheckRows(events, "", 10*time.Second)
	if len(res) != 1 || res[0].Result != "Illegal" {
		t.Fatalf("got %+v, want row r illegal", res)
	}
	if got := strings.Join(res[0].Columns, " "); got != "n" {
		t.Errorf("illegal columns %q, want n (the read lost the acknowledged increment)", got)
	}
	// The window is of the projection on n: the increment and the read
	// that missed it.
	if w := res[0].Window; len(w) != 2 || !strings.Contains(w[0], "incr → 1") || !strings.Contains(w[1], "read") {
		t.Errorf("window %q: want the increment and the read that missed it", w)
	}
	finals := CheckFinal(events, map[string]RowState{"r": {C: "x", D: "x"}})
	if finals[0].Lost() != 1 || !finals[0].CounterOutsideBounds {
		t.Errorf("final counter 0 after one acknowledged increment: %+v", finals[0])
	}
}
