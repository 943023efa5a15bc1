package sstable

import (
	"bytes"
	"runtime"
)

// iterator implements cell.Iterator over one Reader: a binary search of the
// in-memory index picks the data block, and a blockIter walks it.
//
// The current block is held by pointer, so eviction from the cache never
// invalidates Key and Value. Keys live in the iterator's reused key buffer
// until the next positioning call. Values alias the block's bytes, which
// are never modified or recycled once the block is read (a pooled read
// buffer is reused only when the block was decompressed out of it), so a
// value stays valid and unchanged after the iterator moves, with its
// capacity clipped to its length: storage/tablet's scans hand values on
// without copying them.
type iterator struct {
	r        *Reader
	bi       blockIter
	blockIdx int // index of the block in bi; -1 when none is loaded
	valid    bool
	err      error
	closed   bool
}

// fail records err (the first one sticks) and leaves the iterator
// unpositioned.
func (it *iterator) fail(err error) bool {
	if it.err == nil {
		it.err = err
	}
	it.valid = false
	return false
}

// load makes block i current.
func (it *iterator) load(i int) bool {
	if it.blockIdx == i {
		return true
	}
	b, err := it.r.dataBlock(i)
	if err != nil {
		it.blockIdx = -1
		return it.fail(err)
	}
	it.bi.init(b)
	it.blockIdx = i
	return true
}

// settle turns the result of a block move into the iterator's state.
func (it *iterator) settle(ok bool, err error) bool {
	if err != nil {
		return it.fail(corruptAt(it.r.name, it.r.index[it.blockIdx].Offset, err))
	}
	if ok && len(it.bi.key) < minKeyLen {
		// A key this short would make callers that slice the internal
		// key suffix panic; only a crafted file can hold one.
		return it.fail(it.r.corrupt(it.r.index[it.blockIdx].Offset, "key of %d bytes is not an internal key", len(it.bi.key)))
	}
	it.valid = ok
	return ok
}

// usable reports whether a positioning call may proceed.
func (it *iterator) usable() bool {
	it.valid = false
	if it.closed {
		return it.fail(ErrClosed)
	}
	return it.err == nil
}

// First moves to the first entry.
func (it *iterator) First() bool {
	if !it.usable() || len(it.r.index) == 0 {
		return false
	}
	return it.firstFrom(0, true)
}

// firstFrom moves to the first entry of block i or, should that block be
// empty, of a later one. sequential says the caller will walk the block
// (First, Next), so its bytes are pulled into the CPU's cache at once
// (warm) rather than one entry header at a time.
func (it *iterator) firstFrom(i int, sequential bool) bool {
	for ; i < len(it.r.index); i++ {
		if !it.load(i) {
			return false
		}
		if sequential {
			warm(it.bi.b.data)
		}
		ok, err := it.bi.first()
		if ok || err != nil {
			return it.settle(ok, err)
		}
	}
	return false
}

// searchIndex returns the first block whose last key is >= key, or
// len(index) when there is none.
func (it *iterator) searchIndex(key []byte) int {
	idx := it.r.index
	lo, hi, done := it.r.indexWindows.narrow(key, len(idx))
	if done {
		return lo
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bytes.Compare(idx[mid].LastKey, key) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// SeekGE moves to the first entry whose key is >= key.
func (it *iterator) SeekGE(key []byte) bool {
	if !it.usable() {
		return false
	}
	i := it.searchIndex(key)
	if i == len(it.r.index) || !it.load(i) {
		return false
	}
	ok, err := it.bi.seekGE(key)
	if ok || err != nil {
		return it.settle(ok, err)
	}
	// The block's last key is >= key, so only a block that disagrees with
	// the index ends here; carry on with the next block rather than guess.
	return it.firstFrom(i+1, false)
}

// SeekLT moves to the last entry whose key is < key.
func (it *iterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	i := it.searchIndex(key)
	if i < len(it.r.index) {
		if !it.load(i) {
			return false
		}
		ok, err := it.bi.seekLT(key)
		if ok || err != nil {
			return it.settle(ok, err)
		}
	}
	// Every entry of block i is >= key; the answer, if any, is the last
	// entry of an earlier block, whose keys are all < key.
	for i--; i >= 0; i-- {
		if !it.load(i) {
			return false
		}
		ok, err := it.bi.last()
		if ok || err != nil {
			return it.settle(ok, err)
		}
	}
	return false
}

// Next moves to the following entry.
func (it *iterator) Next() bool {
	if !it.valid {
		// Next after exhaustion or before positioning stays put: there is
		// no entry to follow.
		return false
	}
	if !it.usable() {
		return false
	}
	ok, err := it.bi.step()
	if ok || err != nil {
		return it.settle(ok, err)
	}
	return it.firstFrom(it.blockIdx+1, true)
}

// Key is the current entry's encoded internal key.
func (it *iterator) Key() []byte {
	if !it.valid {
		return nil
	}
	return it.bi.key
}

// Value is the current entry's value.
func (it *iterator) Value() []byte {
	if !it.valid {
		return nil
	}
	return it.bi.val
}

// Error is the error that stopped the iteration, if any.
func (it *iterator) Error() error { return it.err }

// Close releases the iterator's block and reports the first error met.
func (it *iterator) Close() error {
	it.closed = true
	it.valid = false
	it.bi = blockIter{}
	it.blockIdx = -1
	return it.err
}

// warm reads one byte of every cache line of data. A block walked entry by
// entry costs a cache miss per entry otherwise: the next entry's offset is
// only known once the current entry's lengths are read, so the misses come
// one after the other (a scan of 1 KB values spent a tenth of its server
// CPU waiting on them). The loads here are independent of each other, so
// the CPU and its prefetcher overlap them, and the entries' headers and
// values are in cache when the walk reaches them.
func warm(data []byte) {
	var x byte
	for i := 0; i < len(data); i += 64 {
		x ^= data[i]
	}
	// Keeps the loads from being optimised away (a package variable
	// written here was a data race between concurrent scans).
	runtime.KeepAlive(x)
}
