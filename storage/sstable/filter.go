package sstable

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
)

// Bloom filters hold the xxhash64 of each key rather than the key: the
// writer then buffers 8 bytes per distinct row or column until Finish knows
// how many there are and can size the filter, instead of every key.

// filterBuilder collects the keys of one bloom filter.
type filterBuilder struct {
	hashes []uint64
	last   []byte // the previous key, to skip runs of one row or column
}

func (f *filterBuilder) add(key []byte) {
	if len(f.hashes) > 0 && bytes.Equal(key, f.last) {
		return
	}
	f.last = append(f.last[:0], key...)
	f.hashes = append(f.hashes, xxhash.Sum64(key))
}

// build returns the serialised filter; nil when no key was added.
func (f *filterBuilder) build(bitsPerKey int) []byte {
	if len(f.hashes) == 0 {
		return nil
	}
	m := max(64, uint(len(f.hashes))*uint(bitsPerKey))
	// ln 2 · bits per key hash functions minimise the false-positive rate.
	k := uint(min(30, max(1, math.Round(float64(bitsPerKey)*math.Ln2))))
	bf := bloom.New(m, k)
	var b [8]byte
	for _, h := range f.hashes {
		binary.LittleEndian.PutUint64(b[:], h)
		bf.Add(b[:])
	}
	data, err := bf.MarshalBinary()
	if err != nil {
		panic(err) // writing to a bytes.Buffer cannot fail
	}
	return data
}

// estimatedSize is the size build would return, in bytes.
func (f *filterBuilder) estimatedSize(bitsPerKey int) int {
	if len(f.hashes) == 0 {
		return 0
	}
	return 24 + (len(f.hashes)*bitsPerKey+63)/64*8
}

// filter is a decoded bloom filter; a nil *filter may contain anything.
type filter struct{ bf *bloom.BloomFilter }

func (f *filter) mayContain(key []byte) bool {
	if f == nil {
		return true
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], xxhash.Sum64(key))
	return f.bf.Test(b[:])
}

// Bloom's binary format: uint64 m (bits), uint64 k (hash functions), then
// the bit set: uint64 length in bits and ⌈m/64⌉ uint64 words, all big-endian.
const bloomHeaderLen = 24

// decodeFilter decodes one serialised bloom filter. It checks every size
// field against the bytes present before the library allocates anything,
// so hostile input cannot make it allocate more than len(b) or panic.
func decodeFilter(b []byte) (*filter, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < bloomHeaderLen {
		return nil, corruptf("bloom filter of %d bytes is shorter than its header", len(b))
	}
	m := binary.BigEndian.Uint64(b)
	k := binary.BigEndian.Uint64(b[8:])
	bits := binary.BigEndian.Uint64(b[16:])
	words := uint64(len(b)-bloomHeaderLen) / 8
	if m == 0 || bits != m || k == 0 || k > 64 ||
		(len(b)-bloomHeaderLen)%8 != 0 || words != (m+63)/64 {
		return nil, corruptf("bloom filter header (m=%d, k=%d, bits=%d) does not match its %d bytes", m, k, bits, len(b))
	}
	bf := new(bloom.BloomFilter)
	if err := bf.UnmarshalBinary(b); err != nil {
		return nil, corruptf("bloom filter: %v", err)
	}
	return &filter{bf: bf}, nil
}

// encodeFilterBlock returns the raw filter block: the row filter, then the
// column filter, each as uvarint length and bytes.
func encodeFilterBlock(row, col []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(row)))
	b = append(b, row...)
	b = binary.AppendUvarint(b, uint64(len(col)))
	return append(b, col...)
}

func decodeFilterBlock(b []byte) (row, col *filter, err error) {
	var parts [2][]byte
	for i := range parts {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, nil, corruptf("filter block: filter %d overruns the block", i)
		}
		parts[i] = b[n : n+int(l)]
		b = b[n+int(l):]
	}
	if len(b) != 0 {
		return nil, nil, corruptf("filter block: %d trailing bytes", len(b))
	}
	if row, err = decodeFilter(parts[0]); err != nil {
		return nil, nil, err
	}
	if col, err = decodeFilter(parts[1]); err != nil {
		return nil, nil, err
	}
	return row, col, nil
}
