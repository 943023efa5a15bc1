package cell

import (
	"encoding/binary"
	"fmt"

	"github.com/axiomhq/hyperloglog"
)

// Aggregator is the function an aggregate column family folds the cells of
// one column and timestamp with (Cloud Bigtable's Type.Aggregate over Int64
// input). The values are stored in catalog entries (as JSON numbers), so
// they never change. The zero value is "not an aggregate family".
type Aggregator uint8

// The aggregators of Cloud Bigtable's aggregate column families.
const (
	NoAggregator Aggregator = 0
	// Sum adds the inputs (two's-complement wrap-around on overflow, as
	// int64 addition). State: 8-byte big-endian int64.
	Sum Aggregator = 1
	// Min keeps the smallest input. State: 8-byte big-endian int64.
	Min Aggregator = 2
	// Max keeps the largest input. State: 8-byte big-endian int64.
	Max Aggregator = 3
	// HLLUniqueCount estimates the number of distinct inputs with
	// HyperLogLog++. Cloud Bigtable does not publish its state format
	// ("State: TBD" in google.bigtable.admin.v2.Type); Tabula's state is
	// the binary encoding of github.com/axiomhq/hyperloglog's sketch
	// (precision 14, sparse), which HLLEstimate decodes.
	HLLUniqueCount Aggregator = 4
)

// hllPrecision is the precision of every HLLUniqueCount state (the second
// byte of the sketch's encoding).
const hllPrecision = 14

// String names the aggregator as the Cloud Bigtable API does.
func (a Aggregator) String() string {
	switch a {
	case NoAggregator:
		return "none"
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case HLLUniqueCount:
		return "hllpp_unique_count"
	}
	return fmt.Sprintf("aggregator(%d)", uint8(a))
}

// Valid reports whether a is one of the aggregators above (NoAggregator
// included).
func (a Aggregator) Valid() bool { return a <= HLLUniqueCount }

// InputState returns the aggregate state holding the one Int64 input v: what
// an AddToCell of v merges into its cell.
func (a Aggregator) InputState(v int64) ([]byte, error) {
	switch a {
	case Sum, Min, Max:
		return binary.BigEndian.AppendUint64(nil, uint64(v)), nil
	case HLLUniqueCount:
		sk := hyperloglog.New14()
		sk.Insert(binary.BigEndian.AppendUint64(nil, uint64(v)))
		return sk.MarshalBinary()
	}
	return nil, fmt.Errorf("cell: %v is not an aggregator", a)
}

// ValidateState checks that b is a well-formed state of a.
func (a Aggregator) ValidateState(b []byte) error {
	switch a {
	case Sum, Min, Max:
		if len(b) != 8 {
			return fmt.Errorf("a %s state is an 8-byte big-endian int64, got %d bytes", a, len(b))
		}
		return nil
	case HLLUniqueCount:
		var sk hyperloglog.Sketch
		if err := sk.UnmarshalBinary(b); err != nil {
			return fmt.Errorf("not a HyperLogLog++ state: %v", err)
		}
		// Sketches of different precisions do not merge.
		if b[1] != hllPrecision {
			return fmt.Errorf("a HyperLogLog++ state has precision %d, got %d", hllPrecision, b[1])
		}
		return nil
	}
	return fmt.Errorf("%v is not an aggregator", a)
}

// Merge folds two states of a into one. The aggregators are commutative and
// associative, so the order in which a column's cells are folded — at write,
// read or compaction — does not change the result. It returns an error for
// a malformed state (ValidateState refuses those before they are stored).
func (a Aggregator) Merge(x, y []byte) ([]byte, error) {
	switch a {
	case Sum, Min, Max:
		if len(x) != 8 || len(y) != 8 {
			return nil, fmt.Errorf("cell: %s states must be 8 bytes, got %d and %d", a, len(x), len(y))
		}
		u, v := int64(binary.BigEndian.Uint64(x)), int64(binary.BigEndian.Uint64(y))
		var r int64
		switch a {
		case Sum:
			r = u + v
		case Min:
			r = min(u, v)
		default:
			r = max(u, v)
		}
		return binary.BigEndian.AppendUint64(nil, uint64(r)), nil
	case HLLUniqueCount:
		var sx, sy hyperloglog.Sketch
		if err := sx.UnmarshalBinary(x); err != nil {
			return nil, fmt.Errorf("cell: HyperLogLog++ state: %w", err)
		}
		if err := sy.UnmarshalBinary(y); err != nil {
			return nil, fmt.Errorf("cell: HyperLogLog++ state: %w", err)
		}
		if err := sx.Merge(&sy); err != nil {
			return nil, fmt.Errorf("cell: merging HyperLogLog++ states: %w", err)
		}
		return sx.MarshalBinary()
	}
	return nil, fmt.Errorf("cell: %v is not an aggregator", a)
}

// HLLEstimate returns the distinct-count estimate of a HLLUniqueCount state
// (Cloud Bigtable's "special state conversion" of the aggregator to Int64).
func HLLEstimate(state []byte) (uint64, error) {
	var sk hyperloglog.Sketch
	if err := sk.UnmarshalBinary(state); err != nil {
		return 0, fmt.Errorf("cell: HyperLogLog++ state: %w", err)
	}
	return sk.Estimate(), nil
}

// Folder merges many states of one aggregator into one, keeping the
// accumulator decoded between merges: folding n HLL states costs n decodes
// and one encode, where n Merge calls would encode n times.
type Folder struct {
	agg Aggregator
	n   int64
	sk  *hyperloglog.Sketch
	err error
}

// NewFolder starts a fold from the state first.
func (a Aggregator) NewFolder(first []byte) *Folder {
	f := &Folder{agg: a}
	switch a {
	case Sum, Min, Max:
		if len(first) != 8 {
			f.err = fmt.Errorf("cell: %s states must be 8 bytes, got %d", a, len(first))
			return f
		}
		f.n = int64(binary.BigEndian.Uint64(first))
	case HLLUniqueCount:
		f.sk = new(hyperloglog.Sketch)
		if err := f.sk.UnmarshalBinary(first); err != nil {
			f.err = fmt.Errorf("cell: HyperLogLog++ state: %w", err)
		}
	default:
		f.err = fmt.Errorf("cell: %v is not an aggregator", a)
	}
	return f
}

// Add merges the state s into the fold. After an error the fold stays
// failed and State returns the error.
func (f *Folder) Add(s []byte) {
	if f.err != nil {
		return
	}
	switch f.agg {
	case Sum, Min, Max:
		if len(s) != 8 {
			f.err = fmt.Errorf("cell: %s states must be 8 bytes, got %d", f.agg, len(s))
			return
		}
		v := int64(binary.BigEndian.Uint64(s))
		switch f.agg {
		case Sum:
			f.n += v
		case Min:
			f.n = min(f.n, v)
		default:
			f.n = max(f.n, v)
		}
	case HLLUniqueCount:
		var o hyperloglog.Sketch
		if err := o.UnmarshalBinary(s); err != nil {
			f.err = fmt.Errorf("cell: HyperLogLog++ state: %w", err)
			return
		}
		if err := f.sk.Merge(&o); err != nil {
			f.err = fmt.Errorf("cell: merging HyperLogLog++ states: %w", err)
		}
	}
}

// State returns the folded state, in the aggregator's encoding.
func (f *Folder) State() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.agg == HLLUniqueCount {
		return f.sk.MarshalBinary()
	}
	return binary.BigEndian.AppendUint64(nil, uint64(f.n)), nil
}
