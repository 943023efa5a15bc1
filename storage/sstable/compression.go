package sstable

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// Compression is a per-block compression codec.
type Compression uint8

// The codecs.
const (
	NoCompression     Compression = 0
	SnappyCompression Compression = 1
	ZstdCompression   Compression = 2
)

func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case SnappyCompression:
		return "snappy"
	case ZstdCompression:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

const (
	// trailerLen is the compression byte and the CRC-32C after every block.
	trailerLen = 5
	// maxDecodedBlockSize bounds a decoded block, so that a hostile length
	// field cannot make a reader allocate without limit. It is above the
	// largest block a Writer makes: MaxBlockSize, or one entry of up to
	// MaxEntrySize.
	maxDecodedBlockSize = 1 << 30
	// maxSnappyRatio bounds decoded/stored size of a snappy block: the
	// densest snappy element, a 3-byte copy of 64 bytes, expands 21.3 times,
	// so a larger claim cannot come from a snappy encoder.
	maxSnappyRatio = 22
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// blockChecksum is the CRC-32C of a stored block followed by its compression
// byte: covering the byte too means a flipped codec is caught before decoding.
func blockChecksum(stored []byte, c Compression) uint32 {
	return crc32.Update(crc32.Update(0, crcTable, stored), crcTable, []byte{byte(c)})
}

// appendTrailer appends the trailer of stored (which is dst[start:]).
func appendTrailer(dst []byte, start int, c Compression) []byte {
	sum := blockChecksum(dst[start:], c)
	dst = append(dst, byte(c))
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// zstd encoders and decoders are expensive to build (they allocate large
// tables and start goroutines) and both EncodeAll and DecodeAll are safe for
// concurrent use, so the package builds one of each on first use and shares
// them. They hold no state between calls, so sharing is invisible.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		// Blocks carry their own CRC-32C; a second checksum per frame
		// would only cost time and bytes.
		e, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(false))
		if err != nil {
			panic(err) // only invalid options make NewWriter fail
		}
		return e
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(maxDecodedBlockSize),
			// Decode at most cap(dst) bytes: the length prefix we wrote is
			// the size of dst, so a frame that lies about its size fails.
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err) // only invalid options make NewReader fail
		}
		return d
	})
)

// compressBlock appends the stored form of raw and its trailer to dst. It
// falls back to NoCompression when the codec saves less than 1/8 of the
// bytes: decoding is not free, and incompressible values are common.
func compressBlock(dst, raw []byte, c Compression) []byte {
	start := len(dst)
	switch c {
	case SnappyCompression:
		n := snappy.MaxEncodedLen(len(raw))
		dst = growLen(dst, n)
		enc := snappy.Encode(dst[start:start+n], raw)
		dst = dst[:start+len(enc)]
	case ZstdCompression:
		dst = binary.AppendUvarint(dst, uint64(len(raw)))
		dst = zstdEncoder().EncodeAll(raw, dst)
	}
	if c == NoCompression || len(dst)-start >= len(raw)-len(raw)/8 {
		dst = append(dst[:start], raw...)
		c = NoCompression
	}
	return appendTrailer(dst, start, c)
}

// growLen returns b extended by n bytes of length, reallocating if needed.
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// checkTrailer verifies the trailer at the end of stored+trailer bytes b and
// returns the stored bytes and the codec.
func checkTrailer(b []byte) ([]byte, Compression, error) {
	if len(b) < trailerLen {
		return nil, 0, corruptf("block of %d bytes is shorter than its trailer", len(b))
	}
	stored := b[:len(b)-trailerLen]
	c := Compression(b[len(stored)])
	want := binary.LittleEndian.Uint32(b[len(stored)+1:])
	if got := blockChecksum(stored, c); got != want {
		return nil, 0, corruptf("block checksum mismatch: stored %#08x, computed %#08x", want, got)
	}
	return stored, c, nil
}

// decompress returns the raw bytes of a stored block, of at most limit
// bytes. For NoCompression it returns stored itself.
func decompress(stored []byte, c Compression, limit int) ([]byte, error) {
	switch c {
	case NoCompression:
		return stored, nil
	case SnappyCompression:
		n, err := snappy.DecodedLen(stored)
		if err != nil {
			return nil, corruptf("snappy block: %v", err)
		}
		if n > limit || n > maxSnappyRatio*len(stored)+64 {
			return nil, corruptf("snappy block claims %d bytes from %d", n, len(stored))
		}
		raw, err := snappy.Decode(make([]byte, n), stored)
		if err != nil {
			return nil, corruptf("snappy block: %v", err)
		}
		return raw, nil
	case ZstdCompression:
		n, k := binary.Uvarint(stored)
		if k <= 0 || n > uint64(limit) {
			return nil, corruptf("zstd block: bad decoded length")
		}
		raw, err := zstdDecoder().DecodeAll(stored[k:], make([]byte, 0, n))
		if err != nil {
			return nil, corruptf("zstd block: %v", err)
		}
		if uint64(len(raw)) != n {
			return nil, corruptf("zstd block: decoded %d bytes, want %d", len(raw), n)
		}
		return raw, nil
	}
	return nil, corruptf("unknown compression %d", uint8(c))
}
