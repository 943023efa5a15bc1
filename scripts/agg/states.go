package agg

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/scripts/value"
)

var errShort = errors.New("truncated state")

func readUvarint(src []byte) (uint64, []byte, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 {
		return 0, nil, errShort
	}
	return n, src[k:], nil
}

// readCount reads an element count, which cannot exceed the bytes left
// since every element takes at least one.
func readCount(src []byte) (int, []byte, error) {
	n, rest, err := readUvarint(src)
	if err != nil {
		return 0, nil, err
	}
	if n > uint64(len(rest)) {
		return 0, nil, errors.New("count exceeds the bytes left")
	}
	return int(n), rest, nil
}

func readFloat(src []byte) (float64, []byte, error) {
	if len(src) < 8 {
		return 0, nil, errShort
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(src)), src[8:], nil
}

func appendFloat(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

// number converts an int or float value to float64.
func number(t *value.Type, v value.Value) float64 {
	if t.Kind == value.Float {
		return v.Float()
	}
	return float64(v.N)
}

// ---- collection ----

type collectionState struct {
	t    *value.Type
	vals []value.Value
}

func (s *collectionState) add(v, _ value.Value) int64 {
	s.vals = append(s.vals, value.Clone(s.t, v))
	return value.Size(s.t, v) + 16
}

func (s *collectionState) merge(o state) {
	s.vals = append(s.vals, o.(*collectionState).vals...)
}

func (s *collectionState) appendTo(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s.vals)))
	for _, v := range s.vals {
		dst = value.Append(dst, s.t, v)
	}
	return dst
}

func (s *collectionState) decode(src []byte) ([]byte, error) {
	n, rest, err := readCount(src)
	if err != nil {
		return nil, err
	}
	s.vals = make([]value.Value, n)
	for i := range s.vals {
		if s.vals[i], rest, err = value.Decode(rest, s.t); err != nil {
			return nil, err
		}
	}
	return rest, nil
}

func (s *collectionState) result() value.Value {
	return value.Value{R: &value.ArrayVal{Elems: slices.Clone(s.vals)}}
}

// ---- sum ----

// sumState adds ints exactly (wrapping on overflow, as int arithmetic in
// scripts does) and floats in float64.
type sumState struct {
	float bool
	i     int64
	f     float64
}

func (s *sumState) add(v, _ value.Value) int64 {
	if s.float {
		s.f += v.Float()
	} else {
		s.i += v.N
	}
	return 0
}

func (s *sumState) merge(o state) {
	x := o.(*sumState)
	s.i += x.i
	s.f += x.f
}

func (s *sumState) appendTo(dst []byte) []byte {
	if s.float {
		return appendFloat(dst, s.f)
	}
	return binary.AppendVarint(dst, s.i)
}

func (s *sumState) decode(src []byte) ([]byte, error) {
	if s.float {
		var err error
		s.f, src, err = readFloat(src)
		return src, err
	}
	n, k := binary.Varint(src)
	if k <= 0 {
		return nil, errShort
	}
	s.i = n
	return src[k:], nil
}

func (s *sumState) result() value.Value {
	if s.float {
		return value.MakeFloat(s.f)
	}
	return value.MakeInt(s.i)
}

// ---- mean ----

type meanState struct {
	float bool
	sum   float64
	n     uint64
}

func (s *meanState) add(v, _ value.Value) int64 {
	if s.float {
		s.sum += v.Float()
	} else {
		s.sum += float64(v.N)
	}
	s.n++
	return 0
}

func (s *meanState) merge(o state) {
	x := o.(*meanState)
	s.sum += x.sum
	s.n += x.n
}

func (s *meanState) appendTo(dst []byte) []byte {
	return binary.AppendUvarint(appendFloat(dst, s.sum), s.n)
}

func (s *meanState) decode(src []byte) ([]byte, error) {
	var err error
	if s.sum, src, err = readFloat(src); err != nil {
		return nil, err
	}
	s.n, src, err = readUvarint(src)
	return src, err
}

func (s *meanState) result() value.Value {
	if s.n == 0 {
		return value.MakeFloat(math.NaN())
	}
	return value.MakeFloat(s.sum / float64(s.n))
}

// ---- maximum, minimum ----

type weighted struct {
	v, w value.Value
}

// extremeState keeps the n values with the largest (maximum) or smallest
// (minimum) weights in a heap whose root is the one to evict first. Ties
// on weight are broken by the value, so that the kept set is a function of
// the multiset of emits, whatever their order or partitioning: merging
// partials then gives exactly the single-run result.
type extremeState struct {
	spec *Spec
	max  bool
	h    []weighted
}

// better reports whether a ranks before b in the result.
func (s *extremeState) better(a, b weighted) bool {
	c := value.Compare(s.spec.Weight.Type, a.w, b.w)
	if !s.max {
		c = -c
	}
	if c != 0 {
		return c > 0
	}
	return value.Compare(s.spec.Elem.Type, a.v, b.v) < 0
}

func (s *extremeState) Len() int           { return len(s.h) }
func (s *extremeState) Less(i, j int) bool { return s.better(s.h[j], s.h[i]) } // worst at the root
func (s *extremeState) Swap(i, j int)      { s.h[i], s.h[j] = s.h[j], s.h[i] }
func (s *extremeState) Push(x any)         { s.h = append(s.h, x.(weighted)) }
func (s *extremeState) Pop() any {
	x := s.h[len(s.h)-1]
	s.h = s.h[:len(s.h)-1]
	return x
}

func (s *extremeState) insert(e weighted) int64 {
	if len(s.h) < s.spec.Param {
		heap.Push(s, e)
		return value.Size(s.spec.Elem.Type, e.v) + 24
	}
	if !s.better(e, s.h[0]) {
		return 0
	}
	old := s.h[0]
	s.h[0] = e
	heap.Fix(s, 0)
	return value.Size(s.spec.Elem.Type, e.v) - value.Size(s.spec.Elem.Type, old.v)
}

func (s *extremeState) add(v, w value.Value) int64 {
	e := weighted{v, w}
	if len(s.h) >= s.spec.Param && !s.better(e, s.h[0]) {
		return 0 // not kept: do not pay for a copy
	}
	return s.insert(weighted{value.Clone(s.spec.Elem.Type, v), w})
}

func (s *extremeState) merge(o state) {
	for _, e := range o.(*extremeState).h {
		s.insert(e)
	}
}

func (s *extremeState) appendTo(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s.h)))
	for _, e := range s.h {
		dst = value.Append(dst, s.spec.Elem.Type, e.v)
		dst = value.Append(dst, s.spec.Weight.Type, e.w)
	}
	return dst
}

func (s *extremeState) decode(src []byte) ([]byte, error) {
	n, rest, err := readCount(src)
	if err != nil {
		return nil, err
	}
	if n > s.spec.Param {
		return nil, errors.New("more entries than the table keeps")
	}
	for range n {
		var e weighted
		if e.v, rest, err = value.Decode(rest, s.spec.Elem.Type); err != nil {
			return nil, err
		}
		if e.w, rest, err = value.Decode(rest, s.spec.Weight.Type); err != nil {
			return nil, err
		}
		s.insert(e)
	}
	return rest, nil
}

func (s *extremeState) result() value.Value {
	sorted := slices.Clone(s.h)
	slices.SortFunc(sorted, func(a, b weighted) int {
		if s.better(a, b) {
			return -1
		}
		if s.better(b, a) {
			return 1
		}
		return 0
	})
	return pairs(sorted)
}

func pairs(ws []weighted) value.Value {
	out := make([]value.Value, len(ws))
	for i, e := range ws {
		out[i] = value.Value{R: &value.TupleVal{Fields: []value.Value{e.v, e.w}}}
	}
	return value.Value{R: &value.ArrayVal{Elems: out}}
}

// ---- top ----

// topState is a Misra-Gries summary with weights: up to 2k counters; when
// more are needed it subtracts the (k+1)-th largest count from all and drops
// those that reach zero. Counts are exact while the table has seen at most
// 2k distinct values, and low by at most W/(k+1) after (W the total
// weight). Merging two summaries adds their counters, then prunes the same
// way (Agarwal et al., "Mergeable Summaries", 2012).
type topState struct {
	spec   *Spec
	k      int
	counts map[string]*topCounter
	buf    []byte
}

type topCounter struct {
	v value.Value
	w float64
}

func newTopState(s *Spec) *topState {
	return &topState{spec: s, k: max(10*s.Param, 100), counts: map[string]*topCounter{}}
}

func (s *topState) bump(key string, v value.Value, w float64, clone bool) int64 {
	if c, ok := s.counts[key]; ok {
		c.w += w
		return 0
	}
	if clone {
		v = value.Clone(s.spec.Elem.Type, v)
	}
	s.counts[strings.Clone(key)] = &topCounter{v: v, w: w}
	grew := int64(len(key)) + value.Size(s.spec.Elem.Type, v) + 48
	if len(s.counts) > 2*s.k {
		s.prune()
	}
	return grew
}

func (s *topState) prune() {
	ws := make([]float64, 0, len(s.counts))
	for _, c := range s.counts {
		ws = append(ws, c.w)
	}
	slices.Sort(ws)
	cut := ws[len(ws)-s.k-1] // the (k+1)-th largest
	for key, c := range s.counts {
		c.w -= cut
		if c.w <= 0 {
			delete(s.counts, key)
		}
	}
}

func (s *topState) add(v, w value.Value) int64 {
	s.buf = value.Append(s.buf[:0], s.spec.Elem.Type, v)
	return s.bump(string(s.buf), v, number(s.spec.Weight.Type, w), true)
}

func (s *topState) merge(o state) {
	for key, c := range o.(*topState).counts {
		s.bump(key, c.v, c.w, false)
	}
}

func (s *topState) appendTo(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s.counts)))
	for _, c := range s.sorted() {
		dst = value.Append(dst, s.spec.Elem.Type, c.v)
		dst = appendFloat(dst, c.w)
	}
	return dst
}

func (s *topState) decode(src []byte) ([]byte, error) {
	n, rest, err := readCount(src)
	if err != nil {
		return nil, err
	}
	if n > 2*s.k {
		return nil, errors.New("more counters than the summary holds")
	}
	for range n {
		var v value.Value
		var w float64
		if v, rest, err = value.Decode(rest, s.spec.Elem.Type); err != nil {
			return nil, err
		}
		if w, rest, err = readFloat(rest); err != nil {
			return nil, err
		}
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, errors.New("bad count")
		}
		s.bump(string(value.Append(nil, s.spec.Elem.Type, v)), v, w, false)
	}
	return rest, nil
}

// sorted returns the counters by count, largest first, ties by value.
func (s *topState) sorted() []*topCounter {
	cs := make([]*topCounter, 0, len(s.counts))
	for _, c := range s.counts {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *topCounter) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return value.Compare(s.spec.Elem.Type, a.v, b.v)
	})
	return cs
}

func (s *topState) result() value.Value {
	cs := s.sorted()
	if len(cs) > s.spec.Param {
		cs = cs[:s.spec.Param]
	}
	ws := make([]weighted, len(cs))
	for i, c := range cs {
		w := value.MakeFloat(c.w)
		if s.spec.Weight.Type.Kind == value.Int {
			w = value.MakeInt(int64(math.Round(c.w)))
		}
		ws[i] = weighted{c.v, w}
	}
	return pairs(ws)
}

// ---- sample ----

// sampleState is a bottom-k sample: each emitted value gets a pseudo-random
// priority and the table keeps the k values with the smallest ones. That is
// a uniform sample without replacement (a reservoir), and the bottom k of a
// union is the bottom k of the parts' bottom k, so merging is exact.
// Priorities come from a hash of the table's name, the value and its
// position in the stream, so runs are deterministic.
type sampleState struct {
	spec *Spec
	seed uint64
	seen uint64
	h    []sampled // max-heap on priority
	buf  []byte
}

type sampled struct {
	p uint64
	v value.Value
}

func (s *sampleState) Len() int           { return len(s.h) }
func (s *sampleState) Less(i, j int) bool { return s.h[i].p > s.h[j].p }
func (s *sampleState) Swap(i, j int)      { s.h[i], s.h[j] = s.h[j], s.h[i] }
func (s *sampleState) Push(x any)         { s.h = append(s.h, x.(sampled)) }
func (s *sampleState) Pop() any {
	x := s.h[len(s.h)-1]
	s.h = s.h[:len(s.h)-1]
	return x
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func fingerprint(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

func (s *sampleState) insert(e sampled, clone bool) int64 {
	if len(s.h) >= s.spec.Param && e.p >= s.h[0].p {
		return 0
	}
	if clone {
		e.v = value.Clone(s.spec.Elem.Type, e.v)
	}
	grew := value.Size(s.spec.Elem.Type, e.v) + 24
	if len(s.h) < s.spec.Param {
		heap.Push(s, e)
		return grew
	}
	grew -= value.Size(s.spec.Elem.Type, s.h[0].v) + 24
	s.h[0] = e
	heap.Fix(s, 0)
	return grew
}

func (s *sampleState) add(v, _ value.Value) int64 {
	s.seen++
	s.buf = value.Append(s.buf[:0], s.spec.Elem.Type, v)
	p := splitmix64(s.seed ^ fingerprint(s.buf) ^ splitmix64(s.seen))
	return s.insert(sampled{p, v}, true)
}

func (s *sampleState) merge(o state) {
	x := o.(*sampleState)
	s.seen += x.seen
	for _, e := range x.h {
		s.insert(e, false)
	}
}

func (s *sampleState) appendTo(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, s.seen)
	dst = binary.AppendUvarint(dst, uint64(len(s.h)))
	for _, e := range s.h {
		dst = binary.LittleEndian.AppendUint64(dst, e.p)
		dst = value.Append(dst, s.spec.Elem.Type, e.v)
	}
	return dst
}

func (s *sampleState) decode(src []byte) ([]byte, error) {
	seen, rest, err := readUvarint(src)
	if err != nil {
		return nil, err
	}
	s.seen = seen
	n, rest, err := readCount(rest)
	if err != nil {
		return nil, err
	}
	if n > s.spec.Param {
		return nil, errors.New("more samples than the table keeps")
	}
	for range n {
		if len(rest) < 8 {
			return nil, errShort
		}
		e := sampled{p: binary.LittleEndian.Uint64(rest)}
		if e.v, rest, err = value.Decode(rest[8:], s.spec.Elem.Type); err != nil {
			return nil, err
		}
		s.insert(e, false)
	}
	return rest, nil
}

func (s *sampleState) result() value.Value {
	sorted := slices.Clone(s.h)
	slices.SortFunc(sorted, func(a, b sampled) int { return cmp.Compare(a.p, b.p) })
	out := make([]value.Value, len(sorted))
	for i, e := range sorted {
		out[i] = e.v
	}
	return value.Value{R: &value.ArrayVal{Elems: out}}
}
