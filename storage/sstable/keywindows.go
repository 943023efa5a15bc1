package sstable

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// keyWindows is a search index over n increasing keys held elsewhere (a
// block's restart keys, a file's index keys): the prefix all of them
// share, and for each key the eight bytes that follow that prefix as a
// big-endian number. A binary search over the keys themselves touches a
// new cache line at every probe (and with decoding, several); one over
// the numbers reads one small array, and only keys whose window equals the
// target's need their bytes compared. The zero value is an empty index,
// which narrows nothing.
type keyWindows struct {
	common  []byte   // the prefix every key shares (a copy)
	windows []uint64 // per key, window(key, len(common))
}

// newKeyWindows indexes n keys, key(i) returning the i-th; first and last
// are key(0) and key(n-1). Keys increase, so what the first and last
// share, all share.
func newKeyWindows(first, last []byte, n int, key func(i int) []byte) keyWindows {
	if n == 0 {
		return keyWindows{}
	}
	// Copied: a search compares with it first, and where the key lives
	// is one more cache line to miss.
	common := slices.Clone(first[:sharedPrefixLen(first, last)])
	windows := make([]uint64, n)
	for i := range windows {
		windows[i] = window(key(i), len(common))
	}
	return keyWindows{common: common, windows: windows}
}

// window returns the eight bytes of k from offset off as a big-endian
// number, zeros standing in for bytes past k's end. For keys a and b that
// share their first off bytes, window(a) < window(b) implies a < b (and >
// implies >); equal windows say nothing.
func window(k []byte, off int) uint64 {
	if len(k) >= off+8 {
		return binary.BigEndian.Uint64(k[off:])
	}
	var w [8]byte
	copy(w[:], k[off:])
	return binary.BigEndian.Uint64(w[:])
}

// narrow bounds the search for the first of the n indexed keys that is >=
// target: every key before lo is < target, every key from hi on is >=
// target, and only keys in [lo, hi) (whose windows equal the target's)
// are left to compare. done reports that lo is the answer already (no key
// to compare). An empty index returns [0, n).
func (w keyWindows) narrow(target []byte, n int) (lo, hi int, done bool) {
	if w.windows == nil {
		return 0, n, false
	}
	m := min(len(target), len(w.common))
	switch c := bytes.Compare(target[:m], w.common[:m]); {
	case c < 0, c == 0 && m < len(w.common):
		return 0, 0, true // below the shared prefix, or a prefix of it: before every key
	case c > 0:
		return n, n, true
	}
	tw := window(target, m)
	lo, _ = slices.BinarySearch(w.windows, tw)
	hi = lo
	for hi < len(w.windows) && w.windows[hi] == tw {
		hi++
	}
	return lo, hi, lo == hi
}
