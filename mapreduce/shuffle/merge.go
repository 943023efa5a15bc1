package shuffle

import (
	"bytes"
	"container/heap"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
)

// Merger merges record streams, each sorted by key, into one sorted
// stream. Records with equal keys come in source order (stable), so a
// merge is deterministic.
type Merger struct {
	h       mergeHeap
	started bool
	err     error
}

// NewMerger returns a merger of srcs.
func NewMerger(srcs []io.Reader) *Merger {
	m := &Merger{}
	for i, s := range srcs {
		m.h = append(m.h, &mergeSource{r: NewReader(s), index: i})
	}
	return m
}

type mergeSource struct {
	r     *Reader
	index int
}

type mergeHeap []*mergeSource

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].r.Key(), h[j].r.Key()); c != 0 {
		return c < 0
	}
	return h[i].index < h[j].index
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(*mergeSource)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Next moves to the next record in key order; false at the end or on the
// first source error (Err).
func (m *Merger) Next() bool {
	if m.err != nil {
		return false
	}
	if !m.started {
		m.started = true
		live := m.h[:0]
		for _, s := range m.h {
			if s.r.Next() {
				live = append(live, s)
			} else if err := s.r.Err(); err != nil {
				m.err = err
				return false
			}
		}
		m.h = live
		heap.Init(&m.h)
		return len(m.h) > 0
	}
	if len(m.h) == 0 {
		return false
	}
	top := m.h[0]
	if top.r.Next() {
		heap.Fix(&m.h, 0)
	} else {
		if err := top.r.Err(); err != nil {
			m.err = err
			return false
		}
		heap.Pop(&m.h)
	}
	return len(m.h) > 0
}

// Key is the current record's key, valid until the next call to Next.
func (m *Merger) Key() []byte { return m.h[0].r.Key() }

// Value is the current record's value, valid until the next call to Next.
func (m *Merger) Value() []byte { return m.h[0].r.Value() }

// Err is the error that stopped the merge, nil at a clean end.
func (m *Merger) Err() error { return m.err }

// Group calls fn once per distinct key of the merged stream, in key order,
// with an iterator over the key's values (read lazily from the stream: a
// key with more values than fit in memory is fine). key and the values are
// valid only during fn, and values may be iterated once; values fn does
// not consume are skipped. The first error of fn or of the sources is
// returned.
func Group(m *Merger, fn func(key []byte, values iter.Seq[[]byte]) error) error {
	more := m.Next()
	var key []byte
	for more {
		key = append(key[:0], m.Key()...)
		inGroup := true // m is at an unconsumed record of key
		values := func(yield func([]byte) bool) {
			for inGroup {
				// Yield before advancing: the value is the source's
				// buffer, which its next read overwrites.
				if !yield(m.Value()) {
					return
				}
				more = m.Next()
				inGroup = more && bytes.Equal(m.Key(), key)
			}
		}
		if err := fn(key, values); err != nil {
			return err
		}
		for inGroup {
			more = m.Next()
			inGroup = more && bytes.Equal(m.Key(), key)
		}
	}
	return m.Err()
}

// MergeFiles merges sorted record files in passes of factor files at a
// time, writing the merged files into dir and removing the inputs it
// merged, until at most factor files remain; it returns them. Memory is
// factor read buffers.
func MergeFiles(dir string, files []string, factor int) ([]string, error) {
	factor = max(factor, 2)
	pass := 0
	for len(files) > factor {
		group := files[:factor]
		out := filepath.Join(dir, fmt.Sprintf("merge-%05d", pass))
		pass++
		if err := mergeInto(out, group); err != nil {
			return nil, err
		}
		for _, f := range group {
			os.Remove(f)
		}
		files = append(slices.Clone(files[factor:]), out)
	}
	return files, nil
}

func mergeInto(out string, files []string) error {
	var srcs []io.Reader
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		defer fh.Close()
		srcs = append(srcs, fh)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := NewWriter(f)
	m := NewMerger(srcs)
	for m.Next() {
		if err := w.Write(m.Key(), m.Value()); err != nil {
			return err
		}
	}
	if err := m.Err(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
