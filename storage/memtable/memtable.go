// Package memtable is the tablet's in-memory sorted buffer of recent writes:
// a skiplist of internal entries that one writer appends to while any number
// of readers iterate it without locks.
//
// Layout. Every entry is one node in an arena of pointer-free chunks: its
// key's and value's lengths, the key, the node's tower of forward
// references, then a reference to its value, which lies in other chunks of
// the same arena. A reference is a chunk's index and an offset in it (0 is
// nil). A search step reads a node's tower and the next node's key, which
// lie side by side, and the nodes are packed densely apart from the values,
// so a step into a cold part of the list costs one or two cache misses; and
// the garbage collector never walks the nodes — the chunks hold no
// pointers.
//
// Concurrency. A node is fully built — lengths, key, value and its forward
// references — before it is linked into the list, and it is linked with
// atomic stores, bottom level first. A reader that loads a reference to the
// node therefore sees all of its contents (the store happens before the
// load), and at every moment each level of the list is a sorted linked list
// that either contains the node or does not. A chunk is published in the
// chunk directory before any node in it is linked. Nodes are never removed
// or changed after they are linked, so readers need no lock and never block
// the writer.
package memtable

import (
	"bytes"
	"fmt"
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
	// firstChunk and maxChunk bound the size of the arena's chunks: a
	// memtable's first chunk is small (a server holds a memtable per
	// tablet, most of them nearly empty), and each next one doubles, up to
	// maxChunk.
	firstChunk = 8 << 10
	maxChunk   = 1 << 20
	// bigEntry is the size from which a node or a value gets a chunk of
	// its own, so that it does not waste the rest of a shared chunk.
	bigEntry = maxChunk / 4
	// header is the bytes before a node's key: the key's length and the
	// value's (uint32 each) and the tower's height (one byte).
	header = 9
	// maxEntry bounds a key's or a value's length (their lengths are
	// stored in 32 bits); the commit log's record limit is far below.
	maxEntry = 1<<32 - 1
)

// ref locates a node: the chunk's index in the directory in the high 32
// bits, the node's offset in the chunk in the low 32. Chunk 0 is never
// used, so the zero ref is nil.
type ref uint64

// headRef stands for the list's head, whose tower is Memtable.head.
const headRef = ^ref(0)

// Memtable is a sorted buffer of internal entries. Add must be called by one
// goroutine at a time (the tablet serialises writers); iterators and the
// accessors may run concurrently with Add and never block it.
//
// The zero Memtable is not usable; call New.
type Memtable struct {
	head   [maxHeight]atomic.Uint64 // the head's tower
	height atomic.Int32             // levels in use, 1..maxHeight
	// chunks is the directory: chunk i's first byte at (*chunks)[i]. The
	// writer appends to it and publishes the longer slice; readers load
	// it when they resolve a reference (see at).
	chunks atomic.Pointer[[]unsafe.Pointer]
	size   atomic.Int64
	length atomic.Int64
	// payload is the bytes of the keys and values added (PayloadBytes).
	payload atomic.Int64

	// Writer-only state: touched by Add alone, which is never concurrent
	// with itself.
	dir    []unsafe.Pointer // what chunks points at, with spare capacity
	nodes  bump             // where the next node goes
	values bump             // where the next value goes
	rng    uint64           // xorshift state for tower heights
	// prev[l] is the last node before last at level l (last itself below
	// its height): the search path of the last Add, from which the next
	// Add of a larger key starts (see Add).
	prev [maxHeight]ref
	last ref
}

// New returns an empty memtable.
func New() *Memtable {
	m := &Memtable{
		rng:    0x9E3779B97F4A7C15,
		nodes:  bump{growth: firstChunk},
		values: bump{growth: firstChunk},
		dir:    make([]unsafe.Pointer, 1, 8), // chunk 0: never used
	}
	m.chunks.Store(&m.dir)
	m.height.Store(1)
	return m
}

// Node layout helpers. p is a node's first byte.

func keyLen(p unsafe.Pointer) uint32   { return *(*uint32)(p) }
func valueLen(p unsafe.Pointer) uint32 { return *(*uint32)(unsafe.Add(p, 4)) }
func nodeHeight(p unsafe.Pointer) int  { return int(*(*uint8)(unsafe.Add(p, 8))) }

// towerOffset is where a node's tower starts: after its header and key,
// rounded up to 8 bytes for the atomic references.
func towerOffset(keyLen uint32) uintptr { return (header + uintptr(keyLen) + 7) &^ 7 }

func nodeKey(p unsafe.Pointer) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(p, header)), keyLen(p))
}

// valueRef is where a node keeps its value's reference: after its tower.
func valueRef(p unsafe.Pointer) *ref {
	return (*ref)(unsafe.Add(p, towerOffset(keyLen(p))+8*uintptr(nodeHeight(p))))
}

// nodeSize is the bytes a node takes in its chunk, rounded up to 8 so the
// next node's tower is aligned too.
func nodeSize(h, keyLen int) int {
	return int(towerOffset(uint32(keyLen))) + 8*h + 8
}

// value returns the value of the node at p.
func (m *Memtable) value(p unsafe.Pointer) []byte {
	n := valueLen(p)
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(m.at(*valueRef(p))), n)
}

// at returns the first byte of the node r (not nil, not the head).
func (m *Memtable) at(r ref) unsafe.Pointer {
	dir := *m.chunks.Load()
	return unsafe.Add(dir[r>>32], uintptr(uint32(r)))
}

// next returns the reference at level of x's tower (x may be the head).
func (m *Memtable) next(x ref, level int) ref {
	return ref(m.tower(x, level).Load())
}

// tower returns level of x's tower (x may be the head).
func (m *Memtable) tower(x ref, level int) *atomic.Uint64 {
	if x == headRef {
		return &m.head[level]
	}
	p := m.at(x)
	return (*atomic.Uint64)(unsafe.Add(p, towerOffset(keyLen(p))+8*uintptr(level)))
}

// key returns the key of the node r (not nil, not the head).
func (m *Memtable) key(r ref) []byte { return nodeKey(m.at(r)) }

// Add inserts an entry; key is an encoded internal key (unique: it carries a
// sequence number). Add copies key and value. It panics if either is 4 GiB
// or longer.
//
// Adding a key that is already present is a caller bug; the new entry is then
// placed before the older equal one and both remain visible.
func (m *Memtable) Add(key, value []byte) {
	if uint64(len(key)) > maxEntry || uint64(len(value)) > maxEntry {
		panic(fmt.Sprintf("memtable: entry of %d+%d bytes; keys and values must be under 4 GiB", len(key), len(value)))
	}
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
	finger := m.last != 0 && bytes.Compare(m.key(m.last), key) < 0
	x := headRef
	for level := listHeight - 1; level >= 0; level-- {
		if finger {
			x = m.prev[level]
		}
		for {
			next := m.next(x, level)
			if next == 0 || bytes.Compare(m.key(next), key) >= 0 {
				break
			}
			x = next
			finger = false
		}
		m.prev[level] = x
	}
	for level := listHeight; level < h; level++ {
		m.prev[level] = headRef
	}

	size := nodeSize(h, len(key))
	n := m.alloc(&m.nodes, size)
	p := m.at(n)
	*(*uint32)(p) = uint32(len(key))
	*(*uint32)(unsafe.Add(p, 4)) = uint32(len(value))
	*(*uint8)(unsafe.Add(p, 8)) = uint8(h)
	copy(nodeKey(p), key)
	if len(value) > 0 {
		v := m.alloc(&m.values, len(value))
		*valueRef(p) = v
		copy(unsafe.Slice((*byte)(m.at(v)), len(value)), value)
		size += len(value)
	}
	for level := 0; level < h; level++ {
		m.tower(n, level).Store(uint64(m.next(m.prev[level], level)))
	}
	// Publish bottom-up: once the node is reachable at level 0 it is in
	// the list; higher levels are only shortcuts to it.
	for level := 0; level < h; level++ {
		m.tower(m.prev[level], level).Store(uint64(n))
		m.prev[level] = n // the path to n, for the next Add
	}
	m.last = n
	if h > listHeight {
		m.height.Store(int32(h))
	}
	m.length.Add(1)
	m.size.Add(int64(size))
	m.payload.Add(int64(len(key) + len(value)))
}

// bump is one sequence of shared chunks that nodes (or values) are carved
// from in turn.
type bump struct {
	cur    ref    // the next free byte of the current chunk (0: none yet)
	end    uint32 // the current chunk's size
	growth int    // size of the next chunk
}

// alloc returns size bytes of arena from b: for a node, size is a multiple
// of 8 and the memory is zeroed (its tower starts out nil).
func (m *Memtable) alloc(b *bump, size int) ref {
	if size >= bigEntry {
		// Its own chunk; the shared one stays current.
		return ref(m.addChunk(size)) << 32
	}
	if b.cur == 0 || uint32(b.cur)+uint32(size) > b.end {
		// The rest of the old chunk is abandoned: it is small
		// (< bigEntry) against the chunk.
		for b.growth < size {
			b.growth = min(2*b.growth, maxChunk) // size < bigEntry < maxChunk
		}
		b.end = uint32(b.growth)
		b.cur = ref(m.addChunk(b.growth)) << 32
		b.growth = min(2*b.growth, maxChunk)
	}
	r := b.cur
	b.cur += ref(size)
	return r
}

// addChunk allocates a chunk of size bytes, publishes it in the directory
// and returns its index.
func (m *Memtable) addChunk(size int) uint32 {
	// Allocated as uint64s: 8-byte aligned for the towers' atomics, and
	// pointer-free, so the collector never scans it.
	c := make([]uint64, (size+7)/8)
	if len(m.dir) == cap(m.dir) {
		// Readers hold the old array; the new one is a copy.
		m.dir = append(make([]unsafe.Pointer, 0, 2*cap(m.dir)), m.dir...)
	}
	// The slot beyond len is invisible to readers until the longer
	// slice is stored below.
	m.dir = append(m.dir, unsafe.Pointer(unsafe.SliceData(c)))
	d := m.dir
	m.chunks.Store(&d)
	return uint32(len(m.dir) - 1)
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

// Sample calls fn with keys spread over the memtable about every spacing
// bytes of keys and values, ascending, each with an estimate of the bytes
// of the entries up to and including it, and ends with its last key and
// PayloadBytes. It visits the nodes of one level of the list — a level
// whose nodes stand for about spacing bytes of entries each (4^level
// entries of the average size) — instead of every entry, so that sampling
// a full memtable costs a few hundred steps, not a walk of every entry
// with a cache miss each; the offsets are estimates (the entries are taken
// to be of the average size). key is valid for the memtable's life and
// must not be modified. Safe to call concurrently with Add: entries added
// meanwhile may or may not be seen.
func (m *Memtable) Sample(spacing int64, fn func(key []byte, offset int64)) {
	n, payload := m.Len(), m.PayloadBytes()
	if n == 0 {
		return
	}
	height := int(m.height.Load())
	level, per := 0, int64(1) // entries a node of level stands for
	for level+1 < height && per*4*payload/int64(n) <= spacing {
		level++
		per *= 4
	}
	// Count the level's nodes first: the estimates spread the payload
	// evenly over the gaps between them.
	nodes := 0
	for x := m.next(headRef, level); x != 0; x = m.next(x, level) {
		nodes++
	}
	i := 0
	last := ref(0)
	var emitted int64
	for x := m.next(headRef, level); x != 0 && i < nodes; x = m.next(x, level) {
		i++
		last = x
		// Nodes closer than spacing (a level too low, the list not yet
		// tall enough) are passed over, as is the last (the last key
		// closes the samples).
		if off := payload * int64(i) / int64(nodes+1); i < nodes && off-emitted >= spacing && payload-off >= spacing {
			fn(m.key(x), off)
			emitted = off
		}
	}
	// The last key: from the level's last node along the bottom level
	// (about per steps).
	if last == 0 {
		last = headRef
	}
	for x := m.next(last, 0); x != 0; x = m.next(x, 0) {
		last = x
	}
	fn(m.key(last), payload)
}

// NewIterator returns an iterator over the entries. An iterator sees every
// entry added before it was positioned and may see later ones.
//
// Key and Value of the returned iterator stay valid for the life of the
// memtable (they point into its arena) but must not be modified; their
// capacity is their length, so appending to them copies.
func (m *Memtable) NewIterator() cell.Iterator { return &iterator{m: m} }

// iterator walks a memtable. Before the first positioning call, and after a
// positioning call returns false, it is at no entry: Next then returns false.
type iterator struct {
	m *Memtable
	n ref            // current entry; 0 when not positioned
	p unsafe.Pointer // its first byte
}

var _ cell.Iterator = (*iterator)(nil)

// moveTo positions the iterator at n (0: at no entry).
func (it *iterator) moveTo(n ref) bool {
	it.n = n
	if n == 0 {
		it.p = nil
		return false
	}
	it.p = it.m.at(n)
	return true
}

// First moves to the first entry.
func (it *iterator) First() bool { return it.moveTo(it.m.next(headRef, 0)) }

// SeekGE moves to the first entry whose key is >= key.
func (it *iterator) SeekGE(key []byte) bool {
	_, ge := it.m.findLT(key)
	return it.moveTo(ge)
}

// SeekLT moves to the last entry whose key is < key.
func (it *iterator) SeekLT(key []byte) bool {
	x, _ := it.m.findLT(key)
	if x == headRef {
		return it.moveTo(0)
	}
	return it.moveTo(x)
}

// findLT returns the last node whose key is < key (the head when there is
// none) and the node after it at the bottom level as the search saw it —
// the first whose key is >= key (0 when there is none) — by descending the
// levels. ge must be the node the search compared, not x's successor
// loaded again: an Add may link a node between x and ge in between, with a
// key below key, and SeekGE would then stop before key.
func (m *Memtable) findLT(key []byte) (x, ge ref) {
	x = headRef
	for level := int(m.height.Load()) - 1; level >= 0; level-- {
		for {
			next := m.next(x, level)
			if next == 0 || bytes.Compare(m.key(next), key) >= 0 {
				ge = next
				break
			}
			x = next
		}
	}
	return x, ge
}

// Next moves to the following entry.
func (it *iterator) Next() bool {
	if it.n == 0 {
		return false
	}
	return it.moveTo(it.m.next(it.n, 0))
}

// Key is the current entry's encoded internal key.
func (it *iterator) Key() []byte { return nodeKey(it.p) }

// Value is the current entry's value.
func (it *iterator) Value() []byte { return it.m.value(it.p) }

// Error is always nil: a memtable cannot fail.
func (it *iterator) Error() error { return nil }

// Close releases the iterator; it holds nothing, so it always returns nil.
func (it *iterator) Close() error {
	it.moveTo(0)
	return nil
}
