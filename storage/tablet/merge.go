package tablet

import (
	"bytes"
	"container/heap"
	"errors"

	"github.com/tabuladb/tabula/storage/cell"
)

// mergingIter merges sorted sources into one sorted stream; it implements
// cell.Iterator. Equal keys from different sources (a row marker flushed to
// several locality groups) are all returned, in source order.
//
// It moves forward with a heap. SeekLT positions every source at its last
// key below the target and returns the largest; a Next after it re-seeks
// every source forward past the current key, which is what a reverse scan
// needs (step back one row with SeekLT, then read that row forward).
//
// lower and upper, when non-nil, clip it to [lower, upper).
type mergingIter struct {
	srcs         []cell.Iterator
	h            iterHeap
	lower, upper []byte
	cur          int // index of the current source; -1 when not positioned
	err          error
	reverse      bool // positioned by SeekLT: the heap is not valid
}

func newMergingIter(lower, upper []byte, srcs ...cell.Iterator) *mergingIter {
	return &mergingIter{srcs: srcs, lower: lower, upper: upper, cur: -1}
}

type iterHeap struct {
	items []int // source indexes
	srcs  []cell.Iterator
}

func (h *iterHeap) Len() int { return len(h.items) }
func (h *iterHeap) Less(i, j int) bool {
	c := bytes.Compare(h.srcs[h.items[i]].Key(), h.srcs[h.items[j]].Key())
	if c != 0 {
		return c < 0
	}
	return h.items[i] < h.items[j]
}
func (h *iterHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *iterHeap) Push(x any)    { h.items = append(h.items, x.(int)) }
func (h *iterHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

func (m *mergingIter) noteErr(it cell.Iterator) {
	if err := it.Error(); err != nil && m.err == nil {
		m.err = err
	}
}

// build rebuilds the heap from sources positioned by ok[i].
func (m *mergingIter) build(ok []bool) bool {
	m.h = iterHeap{items: m.h.items[:0], srcs: m.srcs}
	for i, o := range ok {
		if o {
			m.h.items = append(m.h.items, i)
		} else {
			m.noteErr(m.srcs[i])
		}
	}
	heap.Init(&m.h)
	m.reverse = false
	return m.settle()
}

// settle sets cur to the heap's top, checking the upper bound.
func (m *mergingIter) settle() bool {
	if m.err != nil || m.h.Len() == 0 {
		m.cur = -1
		return false
	}
	m.cur = m.h.items[0]
	if m.upper != nil && bytes.Compare(m.srcs[m.cur].Key(), m.upper) >= 0 {
		m.cur = -1
		return false
	}
	return true
}

func (m *mergingIter) First() bool {
	if m.lower != nil {
		return m.SeekGE(m.lower)
	}
	ok := make([]bool, len(m.srcs))
	for i, s := range m.srcs {
		ok[i] = s.First()
	}
	return m.build(ok)
}

func (m *mergingIter) SeekGE(key []byte) bool {
	if m.lower != nil && bytes.Compare(key, m.lower) < 0 {
		key = m.lower
	}
	ok := make([]bool, len(m.srcs))
	for i, s := range m.srcs {
		ok[i] = s.SeekGE(key)
	}
	return m.build(ok)
}

func (m *mergingIter) SeekLT(key []byte) bool {
	if m.upper != nil && bytes.Compare(key, m.upper) > 0 {
		key = m.upper
	}
	m.cur = -1
	m.reverse = true
	for i, s := range m.srcs {
		if !s.SeekLT(key) {
			m.noteErr(s)
			continue
		}
		// Of equal keys, the last in forward order: the highest source.
		if m.cur < 0 || bytes.Compare(s.Key(), m.srcs[m.cur].Key()) >= 0 {
			m.cur = i
		}
	}
	if m.err != nil || m.cur < 0 {
		m.cur = -1
		return false
	}
	if m.lower != nil && bytes.Compare(m.srcs[m.cur].Key(), m.lower) < 0 {
		m.cur = -1
		return false
	}
	return true
}

func (m *mergingIter) Next() bool {
	if m.cur < 0 {
		return false
	}
	if m.reverse {
		// Re-seek every source past the current key. Duplicates of it
		// in sources after cur would follow it; SeekLT chose the last
		// source holding it, so there are none.
		cur := m.cur
		key := bytes.Clone(m.srcs[cur].Key())
		ok := make([]bool, len(m.srcs))
		for i, s := range m.srcs {
			ok[i] = s.SeekGE(key)
			if i <= cur {
				for ok[i] && bytes.Equal(s.Key(), key) {
					ok[i] = s.Next()
				}
			}
		}
		return m.build(ok)
	}
	s := m.srcs[m.cur]
	if s.Next() {
		heap.Fix(&m.h, 0)
	} else {
		m.noteErr(s)
		heap.Pop(&m.h)
	}
	return m.settle()
}

func (m *mergingIter) Key() []byte   { return m.srcs[m.cur].Key() }
func (m *mergingIter) Value() []byte { return m.srcs[m.cur].Value() }
func (m *mergingIter) Error() error  { return m.err }

func (m *mergingIter) Close() error {
	var errs []error
	if m.err != nil {
		errs = append(errs, m.err)
	}
	for _, s := range m.srcs {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	m.srcs = nil
	m.cur = -1
	return errors.Join(errs...)
}

var _ cell.Iterator = (*mergingIter)(nil)

// sliceIter iterates a sorted slice of entries; tests and small sources use
// it.
type sliceIter struct {
	es  []entry
	pos int
}

func newSliceIter(es []entry) *sliceIter { return &sliceIter{es: es, pos: -1} }

func (s *sliceIter) First() bool { s.pos = 0; return s.valid() }
func (s *sliceIter) valid() bool {
	if s.pos < 0 || s.pos >= len(s.es) {
		s.pos = len(s.es)
		return false
	}
	return true
}
func (s *sliceIter) SeekGE(key []byte) bool {
	s.pos = 0
	for s.pos < len(s.es) && bytes.Compare(s.es[s.pos].key, key) < 0 {
		s.pos++
	}
	return s.valid()
}
func (s *sliceIter) SeekLT(key []byte) bool {
	s.pos = len(s.es) - 1
	for s.pos >= 0 && bytes.Compare(s.es[s.pos].key, key) >= 0 {
		s.pos--
	}
	if s.pos < 0 {
		s.pos = len(s.es)
		return false
	}
	return true
}
func (s *sliceIter) Next() bool {
	if s.pos >= len(s.es) {
		return false
	}
	s.pos++
	return s.valid()
}
func (s *sliceIter) Key() []byte   { return s.es[s.pos].key }
func (s *sliceIter) Value() []byte { return s.es[s.pos].value }
func (s *sliceIter) Error() error  { return nil }
func (s *sliceIter) Close() error  { return nil }
