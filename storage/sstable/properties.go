package sstable

import (
	"bytes"
	"encoding/binary"
)

// Properties describe a file; they are written in its properties block.
type Properties struct {
	NumEntries    uint64
	NumDeletions  uint64 // delete markers among the entries
	NumDataBlocks uint64
	RawKeyBytes   uint64
	RawValueBytes uint64
	SmallestKey   []byte
	LargestKey    []byte
	MinTimestamp  int64 // over KindSet entries; 0 when there are none
	MaxTimestamp  int64
	MaxSeq        uint64
	LocalityGroup string
	FileSize      int64 // not stored: the size of the file as written or opened
}

// Property tags. Tags are written in increasing order; new fields take new
// tags, and readers skip tags they do not know.
const (
	propNumEntries = iota + 1
	propNumDeletions
	propNumDataBlocks
	propRawKeyBytes
	propRawValueBytes
	propSmallestKey
	propLargestKey
	propMinTimestamp
	propMaxTimestamp
	propMaxSeq
	propLocalityGroup
)

func appendProp(dst []byte, tag uint64, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

func appendUvarintProp(dst []byte, tag, v uint64) []byte {
	var b [binary.MaxVarintLen64]byte
	return appendProp(dst, tag, binary.AppendUvarint(b[:0], v))
}

func appendVarintProp(dst []byte, tag uint64, v int64) []byte {
	var b [binary.MaxVarintLen64]byte
	return appendProp(dst, tag, binary.AppendVarint(b[:0], v))
}

// encodeProperties returns the raw properties block of p.
func encodeProperties(p *Properties) []byte {
	var b []byte
	b = appendUvarintProp(b, propNumEntries, p.NumEntries)
	b = appendUvarintProp(b, propNumDeletions, p.NumDeletions)
	b = appendUvarintProp(b, propNumDataBlocks, p.NumDataBlocks)
	b = appendUvarintProp(b, propRawKeyBytes, p.RawKeyBytes)
	b = appendUvarintProp(b, propRawValueBytes, p.RawValueBytes)
	b = appendProp(b, propSmallestKey, p.SmallestKey)
	b = appendProp(b, propLargestKey, p.LargestKey)
	b = appendVarintProp(b, propMinTimestamp, p.MinTimestamp)
	b = appendVarintProp(b, propMaxTimestamp, p.MaxTimestamp)
	b = appendUvarintProp(b, propMaxSeq, p.MaxSeq)
	b = appendProp(b, propLocalityGroup, []byte(p.LocalityGroup))
	return b
}

// decodeProperties parses a raw properties block. Keys are copied out of b.
func decodeProperties(b []byte) (Properties, error) {
	var p Properties
	var lastTag, seen uint64
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag <= lastTag {
			return p, corruptf("properties: bad or out-of-order tag")
		}
		lastTag = tag
		if tag < 64 {
			seen |= 1 << tag
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return p, corruptf("properties: field %d overruns the block", tag)
		}
		payload := b[n : n+int(l)]
		b = b[n+int(l):]
		var err error
		switch tag {
		case propNumEntries:
			p.NumEntries, err = uvarintPayload(tag, payload)
		case propNumDeletions:
			p.NumDeletions, err = uvarintPayload(tag, payload)
		case propNumDataBlocks:
			p.NumDataBlocks, err = uvarintPayload(tag, payload)
		case propRawKeyBytes:
			p.RawKeyBytes, err = uvarintPayload(tag, payload)
		case propRawValueBytes:
			p.RawValueBytes, err = uvarintPayload(tag, payload)
		case propSmallestKey:
			p.SmallestKey = bytes.Clone(payload)
		case propLargestKey:
			p.LargestKey = bytes.Clone(payload)
		case propMinTimestamp:
			p.MinTimestamp, err = varintPayload(tag, payload)
		case propMaxTimestamp:
			p.MaxTimestamp, err = varintPayload(tag, payload)
		case propMaxSeq:
			p.MaxSeq, err = uvarintPayload(tag, payload)
		case propLocalityGroup:
			p.LocalityGroup = string(payload)
		}
		if err != nil {
			return p, err
		}
	}
	const required = 1<<(propLocalityGroup+1) - 2 // tags 1 … propLocalityGroup
	if seen&required != required {
		return p, corruptf("properties: missing fields (have %#x, want %#x)", seen&required, uint64(required))
	}
	return p, nil
}

func uvarintPayload(tag uint64, b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, corruptf("properties: field %d is not a uvarint", tag)
	}
	return v, nil
}

func varintPayload(tag uint64, b []byte) (int64, error) {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return 0, corruptf("properties: field %d is not a varint", tag)
	}
	return v, nil
}
