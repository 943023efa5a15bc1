// Package memtable is the tablet's in-memory sorted buffer of recent writes:
// a skiplist of internal entries that one writer appends to while any number
// of readers iterate it without locks.
//
// Concurrency. A node is fully built — key, value and its forward pointers —
// before it is linked into the list, and it is linked with atomic pointer
// stores, bottom level first. A reader that loads a pointer to the node
// therefore sees all of its contents (the store happens before the load), and
// at every moment each level of the list is a sorted linked list that either
// contains the node or does not. Nodes are never removed or changed after they
// are linked, so readers need no lock and never block the writer.
package memtable

import (
	"bytes"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/tabuladb/tabula/storage/cell"
)

const (
	// maxHeight bounds the tower height. With a branching factor of 4,
	// 16 levels keep searches logarithmic up to 4^16 (~4 billion) entries,
	// far beyond what one memtable holds before a minor compaction.
	maxHeight = 16
	// chunkSize is the size of one arena chunk that key and value copies
	// are carved from; one allocation per chunk instead of one per entry.
	chunkSize = 64 << 10
	// bigEntry is the size from which an entry gets its own allocation, so
	// that a large value does not waste the rest of a chunk.
	bigEntry = chunkSize / 4
)

// nodeOverhead is the fixed memory cost of a node apart from its tower.
var nodeOverhead = int64(unsafe.Sizeof(node{}))

// towerSlot is the memory cost of one level of a node's tower.
var towerSlot = int64(unsafe.Sizeof(atomic.Pointer[node]{}))

// node is one entry. key, value and the length of next never change after
// the node is linked; next[i] is written by the writer only.
type node struct {
	key   []byte
	value []byte
	next  []atomic.Pointer[node]
}

// Memtable is a sorted buffer of internal entries. Add must be called by one
// goroutine at a time (the tablet serialises writers); iterators and the
// accessors may run concurrently with Add and never block it.
//
// The zero Memtable is not usable; call New.
type Memtable struct {
	head   *node
	height atomic.Int32 // levels in use, 1..maxHeight
	size   atomic.Int64
	length atomic.Int64
	// payload is the bytes of the keys and values added (PayloadBytes).
	payload atomic.Int64

	// Writer-only state: touched by Add alone, which is never concurrent
	// with itself.
	chunk []byte // free tail of the current arena chunk
	rng   uint64 // xorshift state for tower heights
	// prev[l] is the last node before last at level l (last itself below
	// its height): the search path of the last Add, from which the next
	// Add of a larger key starts (see Add).
	prev [maxHeight]*node
	last *node
}

// New returns an empty memtable.
func New() *Memtable {
	m := &Memtable{
		head: &node{next: make([]atomic.Pointer[node], maxHeight)},
		rng:  0x9E3779B97F4A7C15,
	}
	m.height.Store(1)
	return m
}

// Add inserts an entry; key is an encoded internal key (unique: it carries a
// sequence number). Add copies key and value.
//
// Adding a key that is already present is a caller bug; the new entry is then
// placed before the older equal one and both remain visible.
func (m *Memtable) Add(key, value []byte) {
	h := m.randomHeight()
	listHeight := int(m.height.Load())

	// Find the predecessor at every level. Only this goroutine changes
	// the list, so what we read stays true until we link the node.
	//
	// A key after the last one added (sequential writes; the rows of a
	// bulk write in order) starts from the last Add's path instead of the
	// head: at each level from prev[level], until the search has moved at
	// some level. While it has not, x is prev[l+1], at or before prev[l]
	// (the path descends forward), so jumping to prev[l] skips only nodes
	// before key. Once it moved from prev[l+1] at level l+1, x is at or
	// after last — the next node after prev[l+1] at that level is — hence
	// at or after every prev[l] below, and the search goes on from x as
	// from the head. Either way it starts before key and never passes it,
	// so the result is the one from the head, in O(1) expected steps for
	// ascending keys.
	finger := m.last != nil && bytes.Compare(m.last.key, key) < 0
	x := m.head
	for level := listHeight - 1; level >= 0; level-- {
		if finger {
			x = m.prev[level]
		}
		for {
			next := x.next[level].Load()
			if next == nil || bytes.Compare(next.key, key) >= 0 {
				break
			}
			x = next
			finger = false
		}
		m.prev[level] = x
	}
	for level := listHeight; level < h; level++ {
		m.prev[level] = m.head
	}

	n, kbuf, nodeBytes := newNode(h, len(key))
	if kbuf != nil {
		copy(kbuf, key)
		n.key = kbuf
		_, n.value = m.copyEntry(nil, value)
	} else {
		n.key, n.value = m.copyEntry(key, value)
		nodeBytes += int64(len(key))
	}
	for level := 0; level < h; level++ {
		n.next[level].Store(m.prev[level].next[level].Load())
	}
	// Publish bottom-up: once the node is reachable at level 0 it is in
	// the list; higher levels are only shortcuts to it.
	for level := 0; level < h; level++ {
		m.prev[level].next[level].Store(n)
		m.prev[level] = n // the path to n, for the next Add
	}
	m.last = n
	if h > listHeight {
		m.height.Store(int32(h))
	}
	m.length.Add(1)
	m.size.Add(int64(len(value)) + nodeBytes)
	m.payload.Add(int64(len(key) + len(value)))
}

// Nodes of the common heights are allocated with their tower and, for a
// key of up to inlineKey bytes, the key's bytes in one object: a search
// walks from node to node reading each one's next pointer and key, and
// with all three in adjacent memory a step costs one cache miss instead
// of three (random inserts into a large memtable are bound by those
// misses).
const inlineKey = 56

type (
	node1 struct {
		n     node
		tower [1]atomic.Pointer[node]
		kbuf  [inlineKey]byte
	}
	node2 struct {
		n     node
		tower [2]atomic.Pointer[node]
		kbuf  [inlineKey]byte
	}
	node4 struct {
		n     node
		tower [4]atomic.Pointer[node]
		kbuf  [inlineKey]byte
	}
)

// newNode returns a node with a tower of height h and, when the key fits
// the node's object, a buffer of keyLen bytes for it (capacity clipped, so
// that appending to a Key cannot overwrite the rest of the object); else
// a nil buffer, and the key goes to the arena. bytes is the memory the
// node takes, its key buffer and tower included.
func newNode(h, keyLen int) (n *node, kbuf []byte, bytes int64) {
	inline := keyLen <= inlineKey
	switch {
	case h == 1 && inline:
		x := &node1{}
		x.n.next = x.tower[:]
		return &x.n, x.kbuf[:keyLen:keyLen], int64(unsafe.Sizeof(*x))
	case h == 2 && inline:
		x := &node2{}
		x.n.next = x.tower[:]
		return &x.n, x.kbuf[:keyLen:keyLen], int64(unsafe.Sizeof(*x))
	case h <= 4 && inline:
		x := &node4{}
		x.n.next = x.tower[:h:h]
		return &x.n, x.kbuf[:keyLen:keyLen], int64(unsafe.Sizeof(*x))
	}
	return &node{next: make([]atomic.Pointer[node], h)}, nil, nodeOverhead + int64(h)*towerSlot
}

// copyEntry copies key and value into the arena. The returned slices have
// their capacity clipped so that a caller appending to a Key or Value cannot
// overwrite a neighbouring entry.
func (m *Memtable) copyEntry(key, value []byte) (k, v []byte) {
	n := len(key) + len(value)
	var buf []byte
	switch {
	case n >= bigEntry:
		buf = make([]byte, n)
	case n <= len(m.chunk):
		buf = m.chunk[:n:n]
		m.chunk = m.chunk[n:]
	default:
		// The rest of the old chunk is abandoned: entries already
		// carved from it keep it alive, and it is small (< bigEntry).
		m.chunk = make([]byte, chunkSize)
		buf = m.chunk[:n:n]
		m.chunk = m.chunk[n:]
	}
	copy(buf, key)
	copy(buf[len(key):], value)
	return buf[:len(key):len(key)], buf[len(key):]
}

// randomHeight draws a tower height with P(height > h) = 4^-h.
func (m *Memtable) randomHeight() int {
	// xorshift64: cheap, and the writer is single-threaded so it needs no
	// locking; heights only have to be well spread, not unpredictable.
	x := m.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	m.rng = x
	// Each pair of low bits that are both zero (probability 1/4) adds a
	// level.
	h := 1 + bits.TrailingZeros64(x|1<<63)/2
	return min(h, maxHeight)
}

// Size is the approximate memory the memtable holds, in bytes: keys, values
// and node overhead. It is safe to call concurrently with Add.
func (m *Memtable) Size() int64 { return m.size.Load() }

// PayloadBytes is the sum of the lengths of the keys and values added —
// Size without the memtable's own overhead. It is safe to call
// concurrently with Add.
func (m *Memtable) PayloadBytes() int64 { return m.payload.Load() }

// Len is the number of entries. It is safe to call concurrently with Add.
func (m *Memtable) Len() int { return int(m.length.Load()) }

// NewIterator returns an iterator over the entries. An iterator sees every
// entry added before it was positioned and may see later ones.
//
// Key and Value of the returned iterator stay valid for the life of the
// memtable (they point into its arena) but must not be modified.
func (m *Memtable) NewIterator() cell.Iterator { return &iterator{m: m} }

// iterator walks a memtable. Before the first positioning call, and after a
// positioning call returns false, it is at no entry: Next then returns false.
type iterator struct {
	m *Memtable
	n *node // current entry; nil when not positioned
}

var _ cell.Iterator = (*iterator)(nil)

// First moves to the first entry.
func (it *iterator) First() bool {
	it.n = it.m.head.next[0].Load()
	return it.n != nil
}

// SeekGE moves to the first entry whose key is >= key.
func (it *iterator) SeekGE(key []byte) bool {
	it.n = it.m.findLT(key).next[0].Load()
	return it.n != nil
}

// SeekLT moves to the last entry whose key is < key.
func (it *iterator) SeekLT(key []byte) bool {
	x := it.m.findLT(key)
	if x == it.m.head {
		it.n = nil
		return false
	}
	it.n = x
	return true
}

// findLT returns the last node whose key is < key, or the head when there is
// none, by descending the levels.
func (m *Memtable) findLT(key []byte) *node {
	x := m.head
	for level := int(m.height.Load()) - 1; level >= 0; level-- {
		for {
			next := x.next[level].Load()
			if next == nil || bytes.Compare(next.key, key) >= 0 {
				break
			}
			x = next
		}
	}
	return x
}

// Next moves to the following entry.
func (it *iterator) Next() bool {
	if it.n == nil {
		return false
	}
	it.n = it.n.next[0].Load()
	return it.n != nil
}

// Key is the current entry's encoded internal key.
func (it *iterator) Key() []byte { return it.n.key }

// Value is the current entry's value.
func (it *iterator) Value() []byte { return it.n.value }

// Error is always nil: a memtable cannot fail.
func (it *iterator) Error() error { return nil }

// Close releases the iterator; it holds nothing, so it always returns nil.
func (it *iterator) Close() error {
	it.n = nil
	return nil
}
