package memtable

import (
	"bytes"
	"hash/maphash"
	"sync/atomic"

	"github.com/tabuladb/tabula/storage/cell"
)

// The row index: a hash table from each row the memtable holds (the
// encoded row prefix its keys start with, cell.RowPrefixLen) to the row's
// first node, so that a point read finds its row without the skiplist's
// search — a dozen or more steps, most of them a cache miss in a full
// memtable — and learns at once that the memtable has none of the row,
// the common case for rows read from SSTables.
//
// Concurrency. Only Add changes the index, after it linked the node, and
// a slot only ever moves to a smaller key of its row (the row's new first
// node), so the entries reachable from a slot only grow: a reader that
// loaded a slot before it moved iterates from the older first node and
// misses only entries added after it loaded the slot. A tablet publishes
// a write's sequence number after the write's Add returned, and a reader
// takes its snapshot before it looks the row up, so every entry its
// snapshot shows is reachable from what it finds. Growing builds a new
// table and publishes it whole; a reader that loaded the old one after
// taking its snapshot finds every row of its snapshot there, since every
// Add after the swap — the only ones the old table lacks — published
// after the swap, hence after that snapshot was taken.
//
// Keys without a well-formed row prefix (cell.RowPrefixLen < 0: not the
// tablet's internal keys) are not indexed; no row prefix is a prefix of
// them, so no row lookup could have found them.
type rowIndex struct {
	// slots hold each row's first node by the hash of its row prefix,
	// with linear probing.
	slots []rowSlot
	used  int // slots in use; writer only
}

// rowSlot is a row's first node and the hash of its row prefix, side by
// side so that a probe reads one cache line: other rows' slots are
// skipped, and the index grows, without reading their keys. The writer
// stores hash before node, so a reader that loads a node finds its hash.
type rowSlot struct {
	node atomic.Uint64 // a ref; 0: empty
	hash atomic.Uint64
}

// Initial and growth sizes of the row index.
const (
	// firstIndexSlots is a new memtable's index: a server holds a
	// memtable per tablet, most of them nearly empty.
	firstIndexSlots = 16
	// The index doubles before 3 of 4 slots are used: linear probing
	// stays short.
	indexLoadNum, indexLoadDen = 3, 4
)

func newRowIndex(n int) *rowIndex {
	return &rowIndex{slots: make([]rowSlot, n)}
}

// bytes is the memory the index holds.
func (x *rowIndex) bytes() int64 { return int64(len(x.slots)) * 16 }

// indexRow records node n, just linked with key, in the row index if it is
// its row's first node: pred, n's predecessor at the bottom level, is the
// list's head or of another row. Its successor there, succ, tells whether
// the row was in the memtable before — then succ was its first node, and
// its slot is found by that ref alone — or is new, and gets an empty slot:
// either way no other node's key is read, the search having just compared
// both neighbours. Called by Add only.
func (m *Memtable) indexRow(key []byte, n, pred, succ ref) {
	p := cell.RowPrefixLen(key)
	if p <= 0 {
		return
	}
	prefix := key[:p]
	if pred != headRef && bytes.HasPrefix(m.key(pred), prefix) {
		return // a node of the row comes before n
	}
	known := succ != 0 && bytes.HasPrefix(m.key(succ), prefix)
	x := m.rows.Load()
	if x == nil {
		return
	}
	h := maphash.Bytes(m.seed, prefix)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &x.slots[i]
		r := ref(sl.node.Load())
		if known {
			if r == succ {
				sl.node.Store(uint64(n)) // n now comes first in its row
				return
			}
			if r == 0 {
				// Cannot happen (a row's first node is always in its
				// slot); should it, point reads search the list again
				// rather than trust the index.
				m.rows.Store(nil)
				return
			}
			continue
		}
		if r == 0 {
			sl.hash.Store(h)
			sl.node.Store(uint64(n))
			x.used++
			if x.used*indexLoadDen > len(x.slots)*indexLoadNum {
				m.growRowIndex(x)
			}
			return
		}
	}
}

// growRowIndex replaces x, the current index, with one of twice its size.
func (m *Memtable) growRowIndex(x *rowIndex) {
	y := newRowIndex(2 * len(x.slots))
	mask := uint64(len(y.slots) - 1)
	for i := range x.slots {
		r := x.slots[i].node.Load()
		if r == 0 {
			continue
		}
		h := x.slots[i].hash.Load()
		j := h & mask
		for y.slots[j].node.Load() != 0 {
			j = (j + 1) & mask
		}
		y.slots[j].hash.Store(h)
		y.slots[j].node.Store(r)
	}
	y.used = x.used
	m.rows.Store(y)
	m.size.Add(y.bytes() - x.bytes())
}

// rowFirst returns the first node of the row whose encoded prefix is
// prefix (cell.RowPrefix), or 0 when the memtable holds no entry of it;
// the index must be in place.
func (m *Memtable) rowFirst(prefix []byte) ref {
	x := m.rows.Load()
	h := maphash.Bytes(m.seed, prefix)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &x.slots[i]
		r := ref(sl.node.Load())
		if r == 0 {
			return 0
		}
		if sl.hash.Load() == h && bytes.HasPrefix(m.key(r), prefix) {
			return r
		}
	}
}

// SeekRow returns an iterator at the first entry of the row whose encoded
// prefix is prefix — cell.RowPrefix of the row, exactly — found through
// the row index; ok is false, and the iterator at no entry, when the
// memtable holds none of the row. The caller stops at the row's end
// (the first key without the prefix): Next goes on into the next row.
func (m *Memtable) SeekRow(prefix []byte) (it cell.Iterator, ok bool) {
	i := &iterator{m: m}
	if m.rows.Load() == nil {
		if !i.SeekGE(prefix) || !bytes.HasPrefix(i.Key(), prefix) {
			return i, i.moveTo(0)
		}
		return i, true
	}
	return i, i.moveTo(m.rowFirst(prefix))
}
