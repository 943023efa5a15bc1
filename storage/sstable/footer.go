package sstable

import (
	"encoding/binary"
	"hash/crc32"
)

const (
	// formatVersion is written in every footer. Bump it for any change that
	// an older reader would misread; fields added to the properties block
	// need no bump.
	formatVersion = 1
	footerLen     = 64
	magic         = "tabulaSS"
)

// handle locates a block: its stored bytes and trailer span
// [offset, offset+length).
type handle struct {
	offset, length uint64
}

type footer struct {
	filter, index, properties handle
	version                   uint32
}

func (f *footer) encode() []byte {
	b := make([]byte, 0, footerLen)
	for _, h := range []handle{f.filter, f.index, f.properties} {
		b = binary.LittleEndian.AppendUint64(b, h.offset)
		b = binary.LittleEndian.AppendUint64(b, h.length)
	}
	b = binary.LittleEndian.AppendUint32(b, f.version)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return append(b, magic...)
}

// decodeFooter parses the last footerLen bytes of a file of fileSize bytes
// and checks that the handles tile the file: data blocks, filter, index,
// properties, footer, with nothing between or beyond.
func decodeFooter(b []byte, fileSize int64) (footer, error) {
	var f footer
	if len(b) != footerLen || string(b[56:]) != magic {
		return f, corruptf("bad magic number: not an sstable, or truncated")
	}
	if got, want := crc32.Checksum(b[:52], crcTable), binary.LittleEndian.Uint32(b[52:]); got != want {
		return f, corruptf("footer checksum mismatch: stored %#08x, computed %#08x", want, got)
	}
	f.version = binary.LittleEndian.Uint32(b[48:])
	if f.version != formatVersion {
		return f, corruptf("unsupported format version %d (this reader knows %d)", f.version, formatVersion)
	}
	hs := []*handle{&f.filter, &f.index, &f.properties}
	for i, h := range hs {
		h.offset = binary.LittleEndian.Uint64(b[16*i:])
		h.length = binary.LittleEndian.Uint64(b[16*i+8:])
	}
	end := uint64(fileSize - footerLen)
	for i := len(hs) - 1; i >= 0; i-- {
		h := hs[i]
		if h.length < trailerLen || h.length > end || h.offset != end-h.length {
			return f, corruptf("block handle %d (offset %d, length %d) does not end at %d", i, h.offset, h.length, end)
		}
		end = h.offset
	}
	return f, nil
}
