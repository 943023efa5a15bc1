package faultcampaign

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A write of unknown outcome whose token an answer shows ends its window
// at that answer's return; one nothing shows, an unknown increment or
// delete, and a write whose token another write also carries stay open
// and are left out of the first check.
func TestReduceUnknownBoundsShownWrites(t *testing.T) {
	ms := time.Millisecond
	unknown := Output{Unknown: true}
	events := []Event{
		{Client: 0, In: Input{Kind: OpPut, Value: "p1"}, Out: unknown, Call: 1 * ms, Return: -1},                       // shown at 30
		{Client: 1, In: Input{Kind: OpPut, Value: "p2"}, Out: unknown, Call: 2 * ms, Return: -1},                       // never shown
		{Client: 2, In: Input{Kind: OpIncr}, Out: unknown, Call: 3 * ms, Return: -1},                                   // no token
		{Client: 3, In: Input{Kind: OpDelete}, Out: unknown, Call: 4 * ms, Return: -1},                                 // no token
		{Client: 4, In: Input{Kind: OpAppend, Value: "/t1"}, Out: unknown, Call: 5 * ms, Return: -1},                   // shown by an append's answer at 20
		{Client: 5, In: Input{Kind: OpCAS, Expect: "", Value: "v1"}, Out: unknown, Call: 6 * ms, Return: -1},           // shown by a matched CAS at 25
		{Client: 6, In: Input{Kind: OpPut, Value: "dup"}, Out: unknown, Call: 7 * ms, Return: -1},                      // its token is not its own
		{Client: 7, In: Input{Kind: OpPut, Value: "dup"}, Call: 8 * ms, Return: 9 * ms},                                // the other "dup"
		{Client: 8, In: Input{Kind: OpPut, Value: "p9"}, Failed: true, Call: 9 * ms, Return: 10 * ms},                  // failed: left out
		{Client: 9, In: Input{Kind: OpAppend, Value: "/t2"}, Out: Output{A: "/t1/t2"}, Call: 11 * ms, Return: 20 * ms}, // shows t1
		{Client: 10, In: Input{Kind: OpCAS, Expect: "v1", Value: "v2"}, Out: Output{Matched: true}, Call: 21 * ms, Return: 25 * ms},
		{Client: 11, In: Input{Kind: OpRead}, Out: Output{Read: RowState{C: "p1", D: "p1", V: "v2", W: "v2", A: "/t1/t2"}}, Call: 26 * ms, Return: 30 * ms},
		{Client: 12, In: Input{Kind: OpRead}, Out: Output{Read: RowState{C: "dup", D: "dup", V: "v2", W: "v2", A: "/t1/t2"}}, Call: 31 * ms, Return: 35 * ms},
	}
	bounded, likely := reduceUnknown(events)
	if len(bounded) != len(events)-1 {
		t.Fatalf("%d operations bounded, want every one but the failed", len(bounded))
	}
	returns := map[string]int64{}
	for _, o := range bounded {
		in := o.Input.(Input)
		returns[fmt.Sprintf("%v %s", in.Kind, in.Value)] = o.Return
	}
	inf := int64(math.MaxInt64)
	for k, want := range map[string]int64{
		"put p1":     int64(30 * ms),
		"put p2":     inf,
		"incr ":      inf,
		"delete ":    inf,
		"append /t1": int64(20 * ms),
		"cas v1":     int64(25 * ms),
		"put dup":    int64(9 * ms), // the acknowledged one; the unknown one is checked below
		"append /t2": int64(20 * ms),
		"cas v2":     int64(25 * ms),
		"read ":      int64(35 * ms),
		"put p9":     0, // absent
	} {
		if got := returns[k]; got != want {
			t.Errorf("%s: return %d, want %d", k, got, want)
		}
	}
	for _, o := range bounded {
		if o.ClientId == 6 && o.Return != inf {
			t.Errorf("the unknown put of a token two writes carry got return %d, want its window open", o.Return)
		}
	}
	var left []int
	for _, o := range likely {
		if o.Output.(Output).Unknown {
			left = append(left, o.ClientId)
		}
	}
	if fmt.Sprint(left) != "[0 4 5]" {
		t.Errorf("unknown writes kept for the first check: clients %v, want [0 4 5] (the ones an answer showed)", left)
	}
}

// Forty increments of unknown outcome overlapping on one row, none of
// them applied: the first check, without them, decides the history at
// once. (The unreduced history makes porcupine try each at every point
// after its call.)
func TestCheckRowsUnknownIncrementsNotApplied(t *testing.T) {
	ms := time.Millisecond
	var events []Event
	n := int64(0)
	for i := range 40 {
		events = append(events, Event{Client: 100 + i, Row: "r", In: Input{Kind: OpIncr}, Out: Output{Unknown: true}, Call: time.Duration(i) * ms, Return: -1})
	}
	for i := range 200 {
		at := time.Duration(50+2*i) * ms
		if i%2 == 0 {
			n++
			events = append(events, Event{Client: 0, Row: "r", In: Input{Kind: OpIncr}, Out: Output{N: n}, Call: at, Return: at + ms})
		} else {
			events = append(events, Event{Client: 1, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{N: n}}, Call: at, Return: at + ms})
		}
	}
	res := CheckRows(events, "", time.Minute)
	if len(res) != 1 || res[0].Result != "Ok" || res[0].TakenAsNotApplied != 40 || res[0].Unknown != 40 {
		t.Fatalf("got %+v, want Ok with the 40 unknown increments taken as not applied", res)
	}
}

// When an unknown write did take effect, the first check fails and the
// whole history, windows bounded, is checked: linearizable. An
// acknowledged write lost beside unknown ones is still an anomaly.
func TestCheckRowsUnknownWritesApplied(t *testing.T) {
	ms := time.Millisecond
	applied := []Event{
		{Client: 0, Row: "r", In: Input{Kind: OpIncr}, Out: Output{Unknown: true}, Call: 0, Return: -1},
		{Client: 1, Row: "r", In: Input{Kind: OpPut, Value: "x"}, Out: Output{Unknown: true}, Call: 1 * ms, Return: -1},
		{Client: 2, Row: "r", In: Input{Kind: OpDelete}, Out: Output{Unknown: true}, Call: 2 * ms, Return: -1},
		{Client: 3, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{C: "x", D: "x", N: 1}}, Call: 10 * ms, Return: 11 * ms},
		{Client: 3, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{N: 1}}, Call: 12 * ms, Return: 13 * ms},
	}
	res := CheckRows(applied, "", time.Minute)
	if len(res) != 1 || res[0].Result != "Ok" || res[0].TakenAsNotApplied != 0 {
		t.Fatalf("unknown increment, put and delete applied: got %+v, want Ok, none taken as not applied", res)
	}
	lost := []Event{
		{Client: 0, Row: "r", In: Input{Kind: OpIncr}, Out: Output{Unknown: true}, Call: 0, Return: -1},
		{Client: 1, Row: "r", In: Input{Kind: OpPut, Value: "y"}, Out: Output{Unknown: true}, Call: 1 * ms, Return: -1},
		{Client: 2, Row: "r", In: Input{Kind: OpPut, Value: "x"}, Call: 2 * ms, Return: 3 * ms},
		{Client: 3, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{}}, Call: 10 * ms, Return: 11 * ms},
	}
	if res := CheckRows(lost, "", time.Minute); len(res) != 1 || res[0].Result != "Illegal" {
		t.Fatalf("acknowledged put lost beside unknown writes: got %+v, want Illegal", res)
	}
	// A write shown by a read and gone from the next with nothing that
	// could remove it in between: bounding its window must not hide it.
	undone := []Event{
		{Client: 0, Row: "r", In: Input{Kind: OpAppend, Value: "/t"}, Out: Output{Unknown: true}, Call: 0, Return: -1},
		{Client: 1, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{A: "/t"}}, Call: 5 * ms, Return: 6 * ms},
		{Client: 1, Row: "r", In: Input{Kind: OpRead}, Out: Output{Read: RowState{}}, Call: 7 * ms, Return: 8 * ms},
	}
	if res := CheckRows(undone, "", time.Minute); len(res) != 1 || res[0].Result != "Illegal" {
		t.Fatalf("an append seen, then gone: got %+v, want Illegal", res)
	}
}
