package sstable

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
)

// blockBuilder accumulates the entries of one data or index block in the
// prefix-compressed format described in the package documentation.
type blockBuilder struct {
	restartInterval int
	buf             []byte
	restarts        []uint32
	counter         int // entries since the last restart point
	nEntries        int
	lastKey         []byte
}

// restartBytes bounds the bytes between two restart points, whatever the
// restart interval: a seek ends with a walk from a restart point, entry by
// entry, and with large values each entry's header is a cache miss of its
// own (16 entries of 1000-byte values span 16 KB). With small entries the
// interval decides, as before; the format is unchanged (readers use the
// restart array as they find it).
const restartBytes = 2 << 10

// add appends an entry; key must sort after the previous one.
func (b *blockBuilder) add(key, value []byte) {
	shared := 0
	if b.nEntries > 0 && b.counter < b.restartInterval && len(b.buf)-int(b.restarts[len(b.restarts)-1]) < restartBytes {
		shared = sharedPrefixLen(b.lastKey, key)
	} else {
		b.restarts = append(b.restarts, uint32(len(b.buf)))
		b.counter = 0
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(key)-shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(value)))
	b.buf = append(b.buf, key[shared:]...)
	b.buf = append(b.buf, value...)
	b.lastKey = append(b.lastKey[:0], key...)
	b.counter++
	b.nEntries++
}

// size is the number of bytes finish would return now.
func (b *blockBuilder) size() int { return len(b.buf) + 4*len(b.restarts) + 4 }

// finish appends the restart array and returns the block's bytes, which stay
// valid until reset.
func (b *blockBuilder) finish() []byte {
	for _, r := range b.restarts {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.restarts)))
	return b.buf
}

func (b *blockBuilder) reset() {
	b.buf = b.buf[:0]
	b.restarts = b.restarts[:0]
	b.counter = 0
	b.nEntries = 0
	b.lastKey = b.lastKey[:0]
}

func sharedPrefixLen(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	// Compare eight bytes at a time: keys of one row share long prefixes.
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// block is a decoded (uncompressed) block whose restart array has been
// checked. It is immutable, so iterators and the cache share it freely.
type block struct {
	data        []byte // entries, restart offsets, restart count
	restartsOff int    // end of the entries, start of the restart offsets
	numRestarts int

	// indexed: a data block, whose seeks search its restart keys through
	// restartWindows, built by the first (indexRestarts). Other blocks'
	// searches decode a restart entry per probe.
	indexed        bool
	restartWindows atomic.Pointer[keyWindows]
}

// parseBlock checks the restart array of raw block bytes. Entries are
// checked as they are decoded.
func parseBlock(data []byte) (*block, error) {
	if len(data) < 4 {
		return nil, corruptf("block of %d bytes has no restart count", len(data))
	}
	n := binary.LittleEndian.Uint32(data[len(data)-4:])
	if uint64(n) > uint64(len(data)-4)/4 {
		return nil, corruptf("block of %d bytes claims %d restart points", len(data), n)
	}
	b := &block{data: data, restartsOff: len(data) - 4 - 4*int(n), numRestarts: int(n)}
	if n == 0 && b.restartsOff != 0 {
		return nil, corruptf("block has entries but no restart points")
	}
	prev := -1
	for i := 0; i < b.numRestarts; i++ {
		off := b.restart(i)
		if (i == 0 && off != 0) || off <= prev || off >= b.restartsOff {
			return nil, corruptf("restart point %d at %d out of order or range", i, off)
		}
		prev = off
	}
	return b, nil
}

// size is the memory the block holds: its bytes and its search index.
// The restart search index is counted from the start, at about its size,
// though a block only a scan reads never builds it.
func (b *block) size() int64 {
	if !b.indexed {
		return int64(len(b.data))
	}
	return int64(len(b.data)) + 8*int64(b.numRestarts) + 32
}

// parseDataBlock is parseBlock for a data block, which seeks search through
// a restart search index, built by the first seek (a scan walking the
// block never needs it).
func parseDataBlock(data []byte) (*block, error) {
	b, err := parseBlock(data)
	if err != nil {
		return nil, err
	}
	b.indexed = true
	return b, nil
}

func (b *block) restart(i int) int {
	return int(binary.LittleEndian.Uint32(b.data[b.restartsOff+4*i:]))
}

// uvarintAt decodes a uvarint from data[p:end]; n <= 0 on malformed input.
func uvarintAt(data []byte, p, end int) (uint64, int) {
	if p < end && data[p] < 0x80 { // the common one-byte case, inlined
		return uint64(data[p]), 1
	}
	return binary.Uvarint(data[p:end])
}

// entry decodes the header of the entry at off and returns its shared
// prefix length, unshared key bytes, value and the offset of the next entry.
func (b *block) entry(off int) (shared int, unshared, val []byte, next int, err error) {
	end := b.restartsOff
	p := off
	s, n := uvarintAt(b.data, p, end)
	if n <= 0 {
		return 0, nil, nil, 0, corruptf("entry at block offset %d: bad shared length", off)
	}
	p += n
	u, n := uvarintAt(b.data, p, end)
	if n <= 0 {
		return 0, nil, nil, 0, corruptf("entry at block offset %d: bad key length", off)
	}
	p += n
	v, n := uvarintAt(b.data, p, end)
	if n <= 0 {
		return 0, nil, nil, 0, corruptf("entry at block offset %d: bad value length", off)
	}
	p += n
	if u > uint64(end-p) || v > uint64(end-p)-u || s > maxDecodedBlockSize {
		return 0, nil, nil, 0, corruptf("entry at block offset %d overruns its block", off)
	}
	k := p + int(u)
	next = k + int(v)
	return int(s), b.data[p:k:k], b.data[k:next:next], next, nil
}

// restartKey returns the full key at restart point i.
func (b *block) restartKey(i int) ([]byte, error) {
	off := b.restart(i)
	shared, unshared, _, _, err := b.entry(off)
	if err != nil {
		return nil, err
	}
	if shared != 0 {
		return nil, corruptf("entry at restart offset %d shares a prefix", off)
	}
	return unshared, nil
}

// indexRestarts returns the block's restart search index (keyWindows),
// building it on the first call, so that a seek compares numbers in one
// small array instead of decoding a restart entry per probe — each probe
// of a large block was a cache miss of its own, and point reads spent a
// third of their time in them. Building it checks every restart entry.
func (b *block) indexRestarts() (*keyWindows, error) {
	if w := b.restartWindows.Load(); w != nil {
		return w, nil
	}
	w := &keyWindows{}
	if b.numRestarts > 0 {
		first, err := b.restartKey(0)
		if err != nil {
			return nil, err
		}
		last, err := b.restartKey(b.numRestarts - 1)
		if err != nil {
			return nil, err
		}
		for i := 1; i < b.numRestarts-1; i++ {
			if _, err := b.restartKey(i); err != nil {
				return nil, err
			}
		}
		*w = newKeyWindows(first, last, b.numRestarts, func(i int) []byte {
			k, _ := b.restartKey(i) // every one checked above
			return k
		})
	}
	// Concurrent first seeks may each build one; they are equal.
	b.restartWindows.CompareAndSwap(nil, w)
	return w, nil
}

// searchRestarts returns the number of restart points whose key is < target
// (restart keys are increasing).
func (b *block) searchRestarts(target []byte) (int, error) {
	lo, hi := 0, b.numRestarts
	if b.indexed {
		w, err := b.indexRestarts()
		if err != nil {
			return 0, err
		}
		var done bool
		if lo, hi, done = w.narrow(target, b.numRestarts); done {
			return lo, nil
		}
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		k, err := b.restartKey(mid)
		if err != nil {
			return 0, err
		}
		if bytes.Compare(k, target) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// blockIter walks one block. Its key buffer is reused across entries and
// blocks, so stepping allocates nothing once the buffer has grown.
type blockIter struct {
	b    *block
	off  int    // offset of the current entry
	next int    // offset of the entry after it
	key  []byte // current key, owned
	val  []byte // current value, aliases b.data
}

func (it *blockIter) init(b *block) { it.b = b; it.off, it.next = 0, 0 }

// set decodes the entry at off, whose predecessor is it.key.
func (it *blockIter) set(off int) error {
	shared, unshared, val, next, err := it.b.entry(off)
	if err != nil {
		return err
	}
	if shared > len(it.key) {
		return corruptf("entry at block offset %d shares %d bytes of a %d-byte key", off, shared, len(it.key))
	}
	it.key = append(it.key[:shared], unshared...)
	it.val, it.off, it.next = val, off, next
	return nil
}

// setRestart decodes the entry at restart point i, which has no predecessor.
func (it *blockIter) setRestart(i int) error {
	off := it.b.restart(i)
	shared, unshared, val, next, err := it.b.entry(off)
	if err != nil {
		return err
	}
	if shared != 0 {
		return corruptf("entry at restart offset %d shares a prefix", off)
	}
	it.key = append(it.key[:0], unshared...)
	it.val, it.off, it.next = val, off, next
	return nil
}

// first moves to the first entry; false for an empty block.
func (it *blockIter) first() (bool, error) {
	if it.b.numRestarts == 0 {
		return false, nil
	}
	return true, it.setRestart(0)
}

// step moves to the next entry; false at the end of the block.
func (it *blockIter) step() (bool, error) {
	if it.next >= it.b.restartsOff {
		return false, nil
	}
	return true, it.set(it.next)
}

// seekGE moves to the first entry >= target; false if there is none in
// this block.
func (it *blockIter) seekGE(target []byte) (bool, error) {
	i, err := it.b.searchRestarts(target)
	if err != nil {
		return false, err
	}
	if it.b.numRestarts == 0 {
		return false, nil
	}
	if err := it.setRestart(max(i-1, 0)); err != nil {
		return false, err
	}
	for bytes.Compare(it.key, target) < 0 {
		ok, err := it.step()
		if !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// seekLT moves to the last entry < target; false if there is none in this
// block.
func (it *blockIter) seekLT(target []byte) (bool, error) {
	i, err := it.b.searchRestarts(target)
	if err != nil || i == 0 {
		return false, err
	}
	// Every entry from restart point i on is >= target.
	limit := it.b.restartsOff
	if i < it.b.numRestarts {
		limit = it.b.restart(i)
	}
	if err := it.setRestart(i - 1); err != nil {
		return false, err
	}
	for it.next < limit {
		// Compare the next key without building it, so that the current
		// entry survives if the next one turns out to be >= target, and so
		// that each step costs at most len(target), however long the keys.
		shared, unshared, val, next, err := it.b.entry(it.next)
		if err != nil {
			return false, err
		}
		if shared > len(it.key) {
			return false, corruptf("entry at block offset %d shares %d bytes of a %d-byte key", it.next, shared, len(it.key))
		}
		if compareConcat(it.key[:shared], unshared, target) >= 0 {
			break
		}
		it.key = append(it.key[:shared], unshared...)
		it.val, it.off, it.next = val, it.next, next
	}
	return true, nil
}

// compareConcat compares the concatenation of a and b with t.
func compareConcat(a, b, t []byte) int {
	n := min(len(a), len(t))
	if c := bytes.Compare(a[:n], t[:n]); c != 0 {
		return c
	}
	if n < len(a) {
		return 1 // t is a proper prefix of a
	}
	return bytes.Compare(b, t[n:])
}

// last moves to the last entry; false for an empty block.
func (it *blockIter) last() (bool, error) {
	if it.b.numRestarts == 0 {
		return false, nil
	}
	if err := it.setRestart(it.b.numRestarts - 1); err != nil {
		return false, err
	}
	for it.next < it.b.restartsOff {
		if err := it.set(it.next); err != nil {
			return false, err
		}
	}
	return true, nil
}
