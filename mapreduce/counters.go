package mapreduce

import (
	"maps"
	"slices"
)

// Counters are named 64-bit counts, summed over attempts. Built-in names
// are the Counter* constants; user counters (MapContext.Count) are kept
// under their own names, which must not start with "mr.".
type Counters map[string]int64

// The built-in counters.
const (
	CounterInputRows         = "mr.input.rows"
	CounterInputBytes        = "mr.input.bytes"
	CounterMapOutputRecords  = "mr.map.output.records"
	CounterMapOutputBytes    = "mr.map.output.bytes"
	CounterCombineIn         = "mr.combine.input.records"
	CounterCombineOut        = "mr.combine.output.records"
	CounterSpilledRecords    = "mr.spilled.records"
	CounterSpilledBytes      = "mr.spilled.bytes"
	CounterShuffleBytes      = "mr.shuffle.bytes"
	CounterReduceGroups      = "mr.reduce.groups"
	CounterReduceInput       = "mr.reduce.input.records"
	CounterOutputRows        = "mr.output.rows"
	CounterOutputCells       = "mr.output.cells"
	CounterOutputBytes       = "mr.output.bytes"
	CounterFailedAttempts    = "mr.attempts.failed"
	CounterKilledAttempts    = "mr.attempts.killed"
	CounterSpeculativeStarts = "mr.attempts.speculative"
	CounterMapAttempts       = "mr.attempts.map"
	CounterReduceAttempts    = "mr.attempts.reduce"
)

// Add adds every counter of o to c.
func (c Counters) Add(o Counters) {
	for k, v := range o {
		c[k] += v
	}
}

// Clone returns a copy.
func (c Counters) Clone() Counters { return maps.Clone(c) }

// Names returns the counter names in order: built-ins first, then user
// counters, each alphabetically.
func (c Counters) Names() []string {
	names := slices.Collect(maps.Keys(c))
	slices.SortFunc(names, func(a, b string) int {
		ab, bb := isBuiltin(a), isBuiltin(b)
		if ab != bb {
			if ab {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	return names
}

func isBuiltin(name string) bool { return len(name) > 3 && name[:3] == "mr." }
