package agg

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"github.com/axiomhq/hyperloglog"

	"github.com/tabuladb/tabula/scripts/value"
)

// ---- unique ----

// hllPrecision gives 2^14 registers: a standard error of 0.8%, 16 KiB when
// dense, and exact-looking (sparse) counts for small sets.
const hllPrecision = 14

// uniqueState estimates the number of distinct values with HyperLogLog++
// over the values' encodings. Sawzall's unique(n) used n as the size of its
// sample; here the sketch has a fixed precision and n only documents the
// expected magnitude.
type uniqueState struct {
	spec *Spec
	sk   *hyperloglog.Sketch
	buf  []byte
	// charged is the memory accounted so far; a dense sketch holds 2^p bytes.
	charged int64
}

func newUniqueState(s *Spec) *uniqueState {
	sk, err := hyperloglog.NewSketch(hllPrecision, true)
	if err != nil {
		panic(err) // the precision is a valid constant
	}
	return &uniqueState{spec: s, sk: sk}
}

func (s *uniqueState) add(v, _ value.Value) int64 {
	s.buf = value.Append(s.buf[:0], s.spec.Elem.Type, v)
	s.sk.Insert(s.buf)
	// Sparse sketches grow a few bytes per distinct value, up to the dense
	// size: charge 4 bytes per insert until that bound.
	if s.charged < 1<<hllPrecision {
		s.charged += 4
		return 4
	}
	return 0
}

func (s *uniqueState) merge(o state) { _ = s.sk.Merge(o.(*uniqueState).sk) }

func (s *uniqueState) appendTo(dst []byte) []byte {
	b, err := s.sk.MarshalBinary()
	if err != nil {
		panic(err) // marshalling an in-memory sketch does not fail
	}
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func (s *uniqueState) decode(src []byte) ([]byte, error) {
	n, rest, err := readCount(src)
	if err != nil {
		return nil, err
	}
	// Byte 1 of the encoding is the precision; sketches of other precisions
	// do not merge.
	if n < 2 || rest[1] != hllPrecision {
		return nil, errors.New("not a sketch of precision 14")
	}
	sk := new(hyperloglog.Sketch)
	if err := sk.UnmarshalBinary(rest[:n]); err != nil {
		return nil, err
	}
	s.sk = sk
	s.charged = int64(n)
	return rest[n:], nil
}

func (s *uniqueState) result() value.Value { return value.MakeInt(int64(s.sk.Estimate())) }

// ---- quantile ----

const (
	// quantileAccuracy is DDSketch's relative accuracy: every quantile
	// returned is within 1% of a true value.
	quantileAccuracy = 0.01
	// quantileBins bounds each store, so that a hostile partial cannot make
	// the decoder allocate without limit; 2048 bins at 1% cover values over
	// about 17 orders of magnitude before the smallest ones collapse.
	quantileBins = 2048
)

var quantileMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(quantileAccuracy)
	if err != nil {
		panic(err)
	}
	return m
}()

func quantileStore() store.Store { return store.NewCollapsingLowestDenseStore(quantileBins) }

// quantileState is a DDSketch with exact count, sum, minimum and maximum;
// it returns the n-tiles of what was emitted: the minimum, n-2 inner
// quantiles and the maximum, as Sawzall's quantile table does.
type quantileState struct {
	spec *Spec
	sk   *ddsketch.DDSketchWithExactSummaryStatistics
}

func newQuantileState(s *Spec) *quantileState {
	return &quantileState{spec: s, sk: ddsketch.NewDDSketchWithExactSummaryStatistics(quantileMapping, quantileStore)}
}

func (s *quantileState) add(v, _ value.Value) int64 {
	f := number(s.spec.Elem.Type, v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0 // a sketch of magnitudes has no place for these
	}
	_ = s.sk.Add(f) // out-of-range magnitudes are dropped
	return 0
}

func (s *quantileState) merge(o state) { _ = s.sk.MergeWith(o.(*quantileState).sk) }

func (s *quantileState) appendTo(dst []byte) []byte {
	var b []byte
	s.sk.Encode(&b, true)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func (s *quantileState) decode(src []byte) ([]byte, error) {
	n, rest, err := readCount(src)
	if err != nil {
		return nil, err
	}
	sk, err := ddsketch.DecodeDDSketchWithExactSummaryStatistics(rest[:n], quantileStore, quantileMapping)
	if err != nil {
		return nil, err
	}
	s.sk = sk
	return rest[n:], nil
}

func (s *quantileState) result() value.Value {
	n := s.spec.Param
	out := make([]value.Value, n)
	for i := range out {
		var q float64
		if !s.sk.IsEmpty() {
			var err error
			switch i {
			case 0:
				q, err = s.sk.GetMinValue()
			case n - 1:
				q, err = s.sk.GetMaxValue()
			default:
				q, err = s.sk.GetValueAtQuantile(float64(i) / float64(n-1))
			}
			if err != nil {
				q = math.NaN()
			}
		}
		if s.spec.Elem.Type.Kind == value.Int {
			out[i] = value.MakeInt(int64(math.Round(q)))
		} else {
			out[i] = value.MakeFloat(q)
		}
	}
	return value.Value{R: &value.ArrayVal{Elems: out}}
}
