package sstable

import (
	"bytes"
	"encoding/binary"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	"github.com/greatroar/blobloom"
)

// Bloom filters hold the xxhash64 of each key rather than the key: the
// writer then buffers 8 bytes per distinct row or column until Finish knows
// how many there are and can size the filter, instead of every key.
//
// Files are written with blocked Bloom filters (blobloom, Putze, Sanders
// and Singler's cache-local filters): every probe of a key falls in one
// 64-byte block, so a point read that asks the filters of several files
// misses the cache once per file instead of once per hash function (seven
// at ten bits a key), and building a filter sets bits in one cache line
// per key. Files written before hold the classic filters of
// bits-and-blooms, which readers still decode; the two formats tell
// themselves apart by their first bytes ("blobloom", or a classic filter's
// bit count, whose first byte is zero).

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

// build returns the serialised filter (blobloom's format); nil when no key
// was added.
func (f *filterBuilder) build(bitsPerKey int) []byte {
	if len(f.hashes) == 0 {
		return nil
	}
	nbits, k := blockedFilterSize(len(f.hashes), bitsPerKey)
	bf := blobloom.New(nbits, k)
	for _, h := range f.hashes {
		bf.Add(h)
	}
	var buf bytes.Buffer
	buf.Grow(blockedHeaderLen + int(nbits/8))
	if _, err := blobloom.Dump(&buf, bf, blockedFilterComment); err != nil {
		panic(err) // a valid filter to a bytes.Buffer cannot fail
	}
	return buf.Bytes()
}

// blockedFilterSize returns the bits (a multiple of blobloom.BlockBits,
// at least one block) and hash functions of a blocked filter of n keys at
// bitsPerKey bits a key, the hash count the one that minimises false
// positives at that size.
func blockedFilterSize(n, bitsPerKey int) (nbits uint64, k int) {
	want := uint64(n) * uint64(bitsPerKey)
	want += (blobloom.BlockBits - want%blobloom.BlockBits) % blobloom.BlockBits
	// A tiny target rate makes Optimize use all of MaxBits and choose the
	// best hash count for it. A filter of a few keys gets a whole block,
	// hundreds of bits a key, and a hash count to match; past a few dozen
	// the extra hashes only cost time.
	nbits, k = blobloom.Optimize(blobloom.Config{Capacity: uint64(n), FPRate: 1e-12, MaxBits: want})
	return nbits, min(k, maxBlockedHashes)
}

// maxBlockedHashes bounds the hash functions of a blocked filter.
const maxBlockedHashes = 24

// estimatedSize is the size build would return, in bytes.
func (f *filterBuilder) estimatedSize(bitsPerKey int) int {
	if len(f.hashes) == 0 {
		return 0
	}
	nbits, _ := blockedFilterSize(len(f.hashes), bitsPerKey)
	return blockedHeaderLen + int(nbits/8)
}

// filter is a decoded bloom filter of either format; a nil *filter may
// contain anything.
type filter struct {
	blocked *blobloom.Filter
	classic *bloom.BloomFilter // files written before blocked filters
}

func (f *filter) mayContain(key []byte) bool {
	if f == nil {
		return true
	}
	h := xxhash.Sum64(key)
	if f.blocked != nil {
		return f.blocked.Has(h)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	return f.classic.Test(b[:])
}

// blobloom's binary format: a 64-byte header — "blobloom", a 32-bit
// version (0), the number of 512-bit blocks minus one, the number of hash
// functions, a comment padded with zeros — then the blocks, 64 bytes
// each, all little-endian. The comment names the hash the keys went
// through.
const (
	blockedHeaderLen     = 64
	blockedFilterMagic   = "blobloom"
	blockedFilterComment = "xxhash64"
)

// The classic format (bits-and-blooms): uint64 m (bits), uint64 k (hash
// functions), then the bit set: uint64 length in bits and ⌈m/64⌉ uint64
// words, all big-endian.
const bloomHeaderLen = 24

// decodeFilter decodes one serialised bloom filter of either format. It
// checks every size field against the bytes present before the library
// allocates anything, so hostile input cannot make it allocate more than
// len(b) or panic.
func decodeFilter(b []byte) (*filter, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if bytes.HasPrefix(b, []byte(blockedFilterMagic)) {
		return decodeBlockedFilter(b)
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
	return &filter{classic: bf}, nil
}

func decodeBlockedFilter(b []byte) (*filter, error) {
	if len(b) < blockedHeaderLen {
		return nil, corruptf("blocked bloom filter of %d bytes is shorter than its header", len(b))
	}
	version := binary.LittleEndian.Uint32(b[8:])
	blocks := uint64(binary.LittleEndian.Uint32(b[12:])) + 1
	k := binary.LittleEndian.Uint32(b[16:])
	comment := string(bytes.TrimRight(b[20:blockedHeaderLen], "\x00"))
	if version != 0 || k == 0 || k > 64 || comment != blockedFilterComment ||
		uint64(len(b)-blockedHeaderLen) != blocks*blobloom.BlockBits/8 {
		return nil, corruptf("blocked bloom filter header (version %d, %d blocks, k=%d, hash %q) does not match its %d bytes", version, blocks, k, comment, len(b))
	}
	l, err := blobloom.NewLoader(bytes.NewReader(b))
	if err != nil {
		return nil, corruptf("blocked bloom filter: %v", err)
	}
	bf, err := l.Load(nil)
	if err != nil {
		return nil, corruptf("blocked bloom filter: %v", err)
	}
	return &filter{blocked: bf}, nil
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
