package filter

// evaluator carries what one Apply shares across the filter tree.
type evaluator struct {
	key  []byte
	rand func() float64
	// sunk collects what reached sink filters, each a sorted cell list.
	sunk [][]LabeledCell
}

// node is a compiled filter. apply returns the cells it outputs for the
// input cells in, both sorted in row order. It never modifies in, and may
// return in itself when it passes every cell unchanged; an empty input always
// gives an empty output.
type node interface {
	apply(ev *evaluator, in []LabeledCell) []LabeledCell
}

type passNode struct{}

func (passNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell { return in }

type blockNode struct{}

func (blockNode) apply(*evaluator, []LabeledCell) []LabeledCell { return nil }

// sinkNode sends its input to the output of the whole read and nothing to
// its parent, as in data.proto's example, where the sink's branch of an
// interleave contributes nothing to the filters after the interleave. The Go
// emulator does not implement sink (it passes all cells); the C++ emulator
// implements it this way.
type sinkNode struct{}

func (sinkNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	if len(in) > 0 {
		ev.sunk = append(ev.sunk, in)
	}
	return nil
}

type chainNode struct{ subs []node }

func (n chainNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	for _, s := range n.subs {
		if len(in) == 0 {
			return nil
		}
		in = s.apply(ev, in)
	}
	return in
}

// interleaveNode runs every branch on a copy of the input and merges the
// outputs back into row order, keeping duplicates: data.proto's "the results
// are pooled, sorted, and combined into a single output row", where a cell
// output by two branches appears twice.
type interleaveNode struct{ subs []node }

func (n interleaveNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	var out []LabeledCell
	for _, s := range n.subs {
		out = merge(out, s.apply(ev, in))
	}
	return out
}

// condNode outputs onTrue's output on the input if pred outputs any cell, and
// onFalse's otherwise. A nil pred passes everything.
type condNode struct {
	pred, onTrue, onFalse node
}

func (n condNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	if len(in) == 0 {
		return nil
	}
	if n.pred == nil || len(n.pred.apply(ev, in)) > 0 {
		return n.onTrue.apply(ev, in)
	}
	return n.onFalse.apply(ev, in)
}

type rowKeyRegexNode struct{ re *bytesRegexp }

func (n rowKeyRegexNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	if n.re.Match(ev.key) {
		return in
	}
	return nil
}

// rowSampleNode passes the whole row with probability p. Each evaluation
// flips its own coin, so two samples in one filter are independent, as in
// the emulator.
type rowSampleNode struct{ p float64 }

func (n rowSampleNode) apply(ev *evaluator, in []LabeledCell) []LabeledCell {
	if len(in) == 0 {
		return nil
	}
	if ev.rand() < n.p {
		return in
	}
	return nil
}

// keepIf returns the cells of in for which keep holds, reusing in when it
// holds for all of them.
func keepIf(in []LabeledCell, keep func(*LabeledCell) bool) []LabeledCell {
	for i := range in {
		if keep(&in[i]) {
			continue
		}
		out := make([]LabeledCell, i, len(in)-1)
		copy(out, in[:i])
		for j := i + 1; j < len(in); j++ {
			if keep(&in[j]) {
				out = append(out, in[j])
			}
		}
		return out
	}
	return in
}

// keepColumnsIf is keepIf for a condition on the column only, evaluated once
// per run of cells of the same column.
func keepColumnsIf(in []LabeledCell, keep func(*LabeledCell) bool) []LabeledCell {
	var last *LabeledCell
	lastKeep := false
	return keepIf(in, func(c *LabeledCell) bool {
		if last == nil || !sameColumn(&last.Cell, &c.Cell) {
			last, lastKeep = c, keep(c)
		}
		return lastKeep
	})
}

type familyRegexNode struct{ re *bytesRegexp }

func (n familyRegexNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	var lastFam string
	lastKeep, seen := false, false
	return keepIf(in, func(c *LabeledCell) bool {
		if !seen || c.Family != lastFam {
			seen, lastFam, lastKeep = true, c.Family, n.re.MatchString(c.Family)
		}
		return lastKeep
	})
}

type qualifierRegexNode struct{ re *bytesRegexp }

func (n qualifierRegexNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepColumnsIf(in, func(c *LabeledCell) bool { return n.re.Match(c.Qualifier) })
}

type columnRangeNode struct {
	family     string
	start, end bound
}

func (n columnRangeNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepColumnsIf(in, func(c *LabeledCell) bool {
		return c.Family == n.family && inRange(c.Qualifier, n.start, n.end)
	})
}

// timestampRangeNode passes cells with start <= timestamp < end.
type timestampRangeNode struct{ start, end int64 }

func (n timestampRangeNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepIf(in, func(c *LabeledCell) bool { return c.Timestamp >= n.start && c.Timestamp < n.end })
}

type valueRegexNode struct{ re *bytesRegexp }

func (n valueRegexNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepIf(in, func(c *LabeledCell) bool { return n.re.Match(c.Value) })
}

type valueRangeNode struct{ start, end bound }

func (n valueRangeNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepIf(in, func(c *LabeledCell) bool { return inRange(c.Value, n.start, n.end) })
}

// bitmaskNode passes cells whose value has every bit of mask set; a value of
// another length never matches (data.proto).
type bitmaskNode struct{ mask []byte }

func (n bitmaskNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	return keepIf(in, func(c *LabeledCell) bool {
		if len(c.Value) != len(n.mask) {
			return false
		}
		for i, m := range n.mask {
			if c.Value[i]&m != m {
				return false
			}
		}
		return true
	})
}

// rowOffsetNode skips the first n cells; copies from an interleave count
// separately (data.proto).
type rowOffsetNode struct{ n int }

func (n rowOffsetNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	if len(in) <= n.n {
		return nil
	}
	return in[n.n:]
}

type rowLimitNode struct{ n int }

func (n rowLimitNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	if len(in) <= n.n {
		return in
	}
	return in[:n.n:n.n]
}

// columnLimitNode keeps the first n cells of each column, the newest n
// versions since a column's cells come newest first.
type columnLimitNode struct{ n int }

func (n columnLimitNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	run := 0
	var last *LabeledCell
	return keepIf(in, func(c *LabeledCell) bool {
		if last == nil || !sameColumn(&last.Cell, &c.Cell) {
			run = 0
		}
		last = c
		run++
		return run <= n.n
	})
}

// stripNode replaces every value with the empty value; labels stay. (The Go
// emulator drops labels when it strips, which loses information the client
// asked for; the service keeps them.)
type stripNode struct{}

func (stripNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	out := make([]LabeledCell, len(in))
	for i, c := range in {
		c.Value = nil
		out[i] = c
	}
	return out
}

// labelNode sets the label of every cell. The one-label-per-chain rule
// checked by Compile guarantees no cell reaches a second label, so setting
// and appending are the same; setting keeps the output within the service's
// one label per cell whatever happens.
type labelNode struct{ labels []string }

func (n labelNode) apply(_ *evaluator, in []LabeledCell) []LabeledCell {
	out := make([]LabeledCell, len(in))
	for i, c := range in {
		c.Labels = n.labels
		out[i] = c
	}
	return out
}
