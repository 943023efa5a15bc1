package faultcampaign

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// RowResult is the outcome of checking one row's history.
type RowResult struct {
	Row     string
	Ops     int    // operations in the checked history
	Unknown int    // of them, writes of unknown outcome
	Result  string // porcupine's: Ok, Illegal or Unknown (check timed out)
	// TakenAsNotApplied is, for a history found linearizable without
	// them, the writes of unknown outcome that no answer showed
	// (reduceUnknown).
	TakenAsNotApplied int
	Visualized        string // the visualisation written for an illegal history
	// Columns names, for an illegal history, the column groups whose
	// projection alone is illegal: "c,d" (put, delete), "v,w" (cas), "n"
	// (incr), "a" (append).
	Columns []string
	// Window is, for the first illegal column group, the last operations
	// of the shortest illegal prefix of its history (by call time): where
	// to look.
	Window []string
}

// columnGroups are the independent parts of a row: each is written by its
// own operations, so a history's projection on one is checked alone to
// name the part that went wrong.
var columnGroups = []struct {
	name  string
	kinds []OpKind
	mask  func(RowState) RowState
}{
	{"c,d", []OpKind{OpPut, OpDelete}, func(s RowState) RowState { return RowState{C: s.C, D: s.D} }},
	{"v,w", []OpKind{OpCAS}, func(s RowState) RowState { return RowState{V: s.V, W: s.W} }},
	{"n", []OpKind{OpIncr}, func(s RowState) RowState { return RowState{N: s.N} }},
	{"a", []OpKind{OpAppend}, func(s RowState) RowState { return RowState{A: s.A} }},
}

// project keeps the operations of one column group and the reads, masked.
func project(events []Event, kinds []OpKind, mask func(RowState) RowState) []Event {
	var out []Event
	for _, e := range events {
		switch {
		case e.In.Kind == OpRead:
			e.Out.Read = mask(e.Out.Read)
			out = append(out, e)
		case slices.Contains(kinds, e.In.Kind):
			out = append(out, e)
		}
	}
	return out
}

// Final is a row's state read after the faults healed, against what the
// clients were told.
type Final struct {
	Row                  string
	State                RowState
	AckedIncr, UnkIncr   int
	MissingAppends       []string // tokens of acknowledged appends not in the final value
	DuplicateAppends     []string // tokens present more than once
	CounterOutsideBounds bool     // N not in [acked, acked+unknown]
}

// Lost returns the acknowledged writes the final state lost.
func (f Final) Lost() int {
	n := len(f.MissingAppends)
	if f.State.N < int64(f.AckedIncr) {
		n += f.AckedIncr - int(f.State.N)
	}
	return n
}

// Operations converts a row's events to porcupine's form: failed
// operations are dropped (they had no effect), unknown ones end at
// infinity.
func Operations(events []Event) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, e := range events {
		if e.Failed {
			continue
		}
		ret := int64(e.Return)
		if e.Out.Unknown {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: e.Client, Input: e.In, Call: int64(e.Call), Output: e.Out, Return: ret})
	}
	return ops
}

// Writes of unknown outcome are what makes a row's check hard: each is
// open from its call to the end of the history, and porcupine tries it
// at every point after (a server paused for seconds leaves dozens on a
// row, and such a row's check did not finish in two minutes). Two
// reductions keep the check exact:
//
//   - A write of unknown outcome whose token a successful answer shows (a
//     read's c, d, v, w or a; an append's new value; a matched CAS's
//     expected value) took effect before that answer was given, in every
//     valid linearization, since no other write carries its token: its
//     window ends at the earliest such answer's return.
//   - The writes of unknown outcome that nothing showed — and unknown
//     increments and deletes, which carry no token — may not have been
//     applied at all: a first check leaves them out. A history
//     linearizable so is linearizable (an unknown outcome allows "not
//     applied"); otherwise the whole history is checked, with the
//     windows bounded, which decides as the unreduced one would.

// reduceUnknown returns a row's history with the windows of its unknown
// writes bounded as above (bounded), and the same without the unknown
// writes no answer showed (likely).
func reduceUnknown(events []Event) (bounded, likely []porcupine.Operation) {
	writers := map[string]int{} // token → writes carrying it
	for _, e := range events {
		if t := writeToken(e.In); t != "" && !e.Failed {
			writers[t]++
		}
	}
	shownBy := map[string]time.Duration{} // token → earliest return of an answer showing it
	show := func(t string, at time.Duration) {
		if t == "" {
			return
		}
		if prev, ok := shownBy[t]; !ok || at < prev {
			shownBy[t] = at
		}
	}
	for _, e := range events {
		if e.Failed || e.Out.Unknown {
			continue
		}
		switch e.In.Kind {
		case OpRead:
			show(e.Out.Read.C, e.Return)
			show(e.Out.Read.D, e.Return)
			show(e.Out.Read.V, e.Return)
			show(e.Out.Read.W, e.Return)
			for _, t := range strings.Split(e.Out.Read.A, "/") {
				show(t, e.Return)
			}
		case OpAppend:
			for _, t := range strings.Split(e.Out.A, "/") {
				show(t, e.Return)
			}
		case OpCAS:
			if e.Out.Matched {
				show(e.In.Expect, e.Return)
			}
		}
	}
	bounded = Operations(events)
	for i, e := range nonFailed(events) { // as Operations keeps them
		if e.Out.Unknown {
			t := writeToken(e.In)
			at, shown := shownBy[t]
			if !shown || writers[t] != 1 {
				continue // left out of likely: taken as not applied
			}
			if at > e.Call {
				bounded[i].Return = int64(at)
			}
		}
		likely = append(likely, bounded[i])
	}
	return bounded, likely
}

// nonFailed is events without the failed ones, as Operations keeps them.
func nonFailed(events []Event) []Event {
	var out []Event
	for _, e := range events {
		if !e.Failed {
			out = append(out, e)
		}
	}
	return out
}

// writeToken is the token a write leaves in the row ("" for increments,
// deletes and reads).
func writeToken(in Input) string {
	switch in.Kind {
	case OpPut, OpCAS:
		return in.Value
	case OpAppend:
		return strings.TrimPrefix(in.Value, "/")
	}
	return ""
}

// ByRow groups events by row.
func ByRow(events []Event) map[string][]Event {
	out := map[string][]Event{}
	for _, e := range events {
		out[e.Row] = append(out[e.Row], e)
	}
	return out
}

// ByLibrary groups events by the client library of their worker: the
// worker name's part before its dash ("official-2" → "official"). The
// final reads are left out.
func ByLibrary(events []Event) map[string][]Event {
	out := map[string][]Event{}
	for _, e := range events {
		if e.Worker == "final" {
			continue
		}
		lib, _, _ := strings.Cut(e.Worker, "-")
		out[lib] = append(out[lib], e)
	}
	return out
}

// CheckRows checks each row's history with porcupine, writing the
// visualisation of an illegal one into dir.
func CheckRows(events []Event, dir string, timeout time.Duration) []RowResult {
	rows := ByRow(events)
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []RowResult
	for _, row := range keys {
		ops := Operations(rows[row])
		r := RowResult{Row: row, Ops: len(ops)}
		for _, o := range ops {
			if o.Output.(Output).Unknown {
				r.Unknown++
			}
		}
		bounded, likely := reduceUnknown(rows[row])
		if len(likely) < len(bounded) {
			if res, _ := porcupine.CheckOperationsVerbose(RowModel, likely, timeout); res == porcupine.Ok {
				r.Result = string(res)
				r.TakenAsNotApplied = len(bounded) - len(likely)
				out = append(out, r)
				continue
			}
		}
		res, info := porcupine.CheckOperationsVerbose(RowModel, bounded, timeout)
		r.Result = string(res)
		if res == porcupine.Illegal {
			for _, g := range columnGroups {
				evs := project(rows[row], g.kinds, g.mask)
				if pr, _ := porcupine.CheckOperationsVerbose(RowModel, Operations(evs), timeout); pr == porcupine.Illegal {
					r.Columns = append(r.Columns, g.name)
					if r.Window == nil {
						r.Window = illegalWindow(evs, timeout, 16)
					}
				}
			}
		}
		if res != porcupine.Ok && dir != "" {
			path := filepath.Join(dir, "porcupine-"+sanitize(row)+".html")
			if err := porcupine.VisualizePath(RowModel, info, path); err == nil {
				r.Visualized = path
			}
		}
		out = append(out, r)
	}
	return out
}

// illegalWindow finds the shortest illegal prefix of evs (in call order)
// by bisection and describes its last n operations.
func illegalWindow(evs []Event, timeout time.Duration, n int) []string {
	evs = slices.Clone(evs)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Call < evs[j].Call })
	illegal := func(k int) bool {
		r, _ := porcupine.CheckOperationsVerbose(RowModel, Operations(evs[:k]), timeout)
		return r == porcupine.Illegal
	}
	lo, hi := 1, len(evs)
	for lo < hi {
		m := (lo + hi) / 2
		if illegal(m) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	var out []string
	for _, e := range evs[max(0, lo-n):lo] {
		if e.Failed {
			continue
		}
		ret := "unknown"
		if !e.Out.Unknown {
			ret = fmt.Sprintf("%.3fs", e.Return.Seconds())
		}
		out = append(out, fmt.Sprintf("%.3fs–%s client %d %s: %s", e.Call.Seconds(), ret, e.Client, e.Worker, RowModel.DescribeOperation(e.In, e.Out)))
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// CheckFinal compares each row's final state with the acknowledged
// increments and appends of its history.
func CheckFinal(events []Event, finals map[string]RowState) []Final {
	rows := ByRow(events)
	var out []Final
	keys := make([]string, 0, len(finals))
	for k := range finals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, row := range keys {
		f := Final{Row: row, State: finals[row]}
		for _, e := range rows[row] {
			switch {
			case e.In.Kind == OpIncr && e.OK():
				f.AckedIncr++
			case e.In.Kind == OpIncr && e.Out.Unknown:
				f.UnkIncr++
			case e.In.Kind == OpAppend && e.OK():
				switch strings.Count(f.State.A, e.In.Value+"/") + boolInt(strings.HasSuffix(f.State.A, e.In.Value)) {
				case 0:
					f.MissingAppends = append(f.MissingAppends, e.In.Value)
				case 1:
				default:
					f.DuplicateAppends = append(f.DuplicateAppends, e.In.Value)
				}
			}
		}
		f.CounterOutsideBounds = f.State.N < int64(f.AckedIncr) || f.State.N > int64(f.AckedIncr+f.UnkIncr)
		out = append(out, f)
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteHistory writes the events as text, one per line, in call order.
func WriteHistory(path string, events []Event) error {
	sorted := append([]Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var b strings.Builder
	for _, e := range sorted {
		ret := "unknown"
		if e.Return >= 0 {
			ret = fmt.Sprintf("%.3fs", e.Return.Seconds())
		}
		state := "ok"
		if e.Failed {
			state = "failed"
		} else if e.Out.Unknown {
			state = "unknown"
		}
		fmt.Fprintf(&b, "%.3fs %s %s client=%d %s row=%s %s", e.Call.Seconds(), ret, state, e.Client, e.Worker, e.Row,
			RowModel.DescribeOperation(e.In, e.Out))
		if e.Err != "" {
			fmt.Fprintf(&b, " err=%q", e.Err)
		}
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
