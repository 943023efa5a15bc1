package commitlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/tabuladb/tabula/storage/cell"
)

// Frame: length (uint32 LE) | masked CRC-32C of payload (uint32 LE) | payload.
const frameHeaderLen = 8

// Payload types: the first byte of every payload.
const (
	typeRecord  = 1
	typeSegment = 2 // segment header, the first frame of a local segment
)

// formatVersion is the version of the segment format, in segment headers.
const formatVersion = 1

// Segment header flags.
const (
	// segOpened marks a segment started by Open rather than by rollover:
	// the segment before it was the last one of an earlier run of the
	// server, which may have crashed mid-flush, so it may end torn.
	segOpened = 1 << 0
)

// Mutation field presence flags. A field is written only when it is set
// (non-empty string, non-nil slice, non-zero integer), which keeps records
// small and makes decoding return exactly what was encoded, nil slices
// included.
const (
	hasFamily = 1 << iota
	hasQualifier
	hasTimestamp
	hasValue
	hasStart
	hasEnd
	allFields = hasFamily | hasQualifier | hasTimestamp | hasValue | hasStart | hasEnd
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskCRC scrambles a CRC before it is stored, as LevelDB does: computing the
// CRC of data that embeds CRCs (a log record holding log bytes) is then not
// degenerate, and a zero-filled region never reads as a valid frame.
func maskCRC(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }

func payloadCRC(p []byte) uint32 { return maskCRC(crc32.Checksum(p, castagnoli)) }

// appendFrame appends the frame of the payload built by fill to dst.
func appendFrame(dst []byte, fill func([]byte) []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = fill(dst)
	payload := dst[start+frameHeaderLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], payloadCRC(payload))
	return dst
}

// appendRecordFrame appends the frame of rec to dst.
func appendRecordFrame(dst []byte, rec *Record) []byte {
	return appendFrame(dst, func(b []byte) []byte { return appendRecord(b, rec) })
}

// segmentHeaderFrame returns the header frame of local segment seg.
func segmentHeaderFrame(seg uint64, flags byte) []byte {
	return appendFrame(nil, func(b []byte) []byte {
		b = append(b, typeSegment, formatVersion, flags)
		return binary.AppendUvarint(b, seg)
	})
}

// segmentHeaderLen is the size of segment seg's header frame, which is where
// its first record starts.
func segmentHeaderLen(seg uint64) int64 { return int64(len(segmentHeaderFrame(seg, 0))) }

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendRecord(b []byte, rec *Record) []byte {
	b = append(b, typeRecord)
	b = appendString(b, rec.Tablet)
	b = binary.AppendUvarint(b, rec.FirstSeq)
	return appendRecordBody(b, &rec.Mutation)
}

// appendRecordBody appends what follows FirstSeq in a record's payload: the
// row and the mutations.
func appendRecordBody(b []byte, rm *cell.RowMutation) []byte {
	b = appendBytes(b, rm.Row)
	b = binary.AppendUvarint(b, uint64(len(rm.Mutations)))
	for i := range rm.Mutations {
		m := &rm.Mutations[i]
		var flags byte
		if m.Family != "" {
			flags |= hasFamily
		}
		if m.Qualifier != nil {
			flags |= hasQualifier
		}
		if m.Timestamp != 0 {
			flags |= hasTimestamp
		}
		if m.Value != nil {
			flags |= hasValue
		}
		if m.StartTimestamp != 0 {
			flags |= hasStart
		}
		if m.EndTimestamp != 0 {
			flags |= hasEnd
		}
		b = append(b, byte(m.Kind), flags)
		if flags&hasFamily != 0 {
			b = appendString(b, m.Family)
		}
		if flags&hasQualifier != 0 {
			b = appendBytes(b, m.Qualifier)
		}
		if flags&hasTimestamp != 0 {
			b = binary.AppendVarint(b, m.Timestamp)
		}
		if flags&hasValue != 0 {
			b = appendBytes(b, m.Value)
		}
		if flags&hasStart != 0 {
			b = binary.AppendVarint(b, m.StartTimestamp)
		}
		if flags&hasEnd != 0 {
			b = binary.AppendVarint(b, m.EndTimestamp)
		}
	}
	return b
}

// errMalformed is the reason a payload does not decode; its position and
// name are added by the reader.
var errMalformed = errors.New("malformed payload")

// decoder reads fields from an untrusted payload. Every read is bounds
// checked; after the first failure every read returns zero values and ok
// stays false.
type decoder struct {
	b  []byte
	ok bool
}

func (d *decoder) byte() byte {
	if !d.ok || len(d.b) < 1 {
		d.ok = false
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if !d.ok {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.ok = false
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if !d.ok {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.ok = false
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a length-prefixed field, aliasing the payload. The length
// is checked against what is left, so a bad length never allocates.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if !d.ok || n > uint64(len(d.b)) {
		d.ok = false
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// decodeRecord decodes a record payload (type byte included). Row,
// Qualifier and Value alias p (nil when absent or, for Row, empty).
func decodeRecord(p []byte) (Record, error) {
	d := decoder{b: p, ok: true}
	var rec Record
	if d.byte() != typeRecord {
		return rec, errMalformed
	}
	rec.Tablet = string(d.bytes())
	rec.FirstSeq = d.uvarint()
	if row := d.bytes(); len(row) > 0 {
		rec.Mutation.Row = row
	}
	n := d.uvarint()
	// Every mutation takes at least two bytes (kind and flags): a count
	// beyond that is a lie, and must not size an allocation.
	if !d.ok || n > uint64(len(d.b)/2) {
		return rec, errMalformed
	}
	if n > 0 {
		rec.Mutation.Mutations = make([]cell.Mutation, n)
	}
	var lastFamily string
	for i := range rec.Mutation.Mutations {
		m := &rec.Mutation.Mutations[i]
		m.Kind = cell.MutationKind(d.byte())
		flags := d.byte()
		if flags&^allFields != 0 {
			return rec, errMalformed
		}
		if flags&hasFamily != 0 {
			f := d.bytes()
			// Consecutive mutations usually share a family: reuse
			// the string rather than allocate it again.
			if string(f) != lastFamily {
				lastFamily = string(f)
			}
			m.Family = lastFamily
		}
		if flags&hasQualifier != 0 {
			m.Qualifier = d.bytes()
		}
		if flags&hasTimestamp != 0 {
			m.Timestamp = d.varint()
		}
		if flags&hasValue != 0 {
			m.Value = d.bytes()
		}
		if flags&hasStart != 0 {
			m.StartTimestamp = d.varint()
		}
		if flags&hasEnd != 0 {
			m.EndTimestamp = d.varint()
		}
	}
	if !d.ok || len(d.b) != 0 {
		return rec, errMalformed
	}
	return rec, nil
}

// segmentHeader is a decoded segment header.
type segmentHeader struct {
	seg   uint64
	flags byte
}

func decodeSegmentHeader(p []byte) (segmentHeader, error) {
	d := decoder{b: p, ok: true}
	var h segmentHeader
	if d.byte() != typeSegment {
		return h, errMalformed
	}
	if v := d.byte(); v != formatVersion {
		return h, errMalformed
	}
	h.flags = d.byte()
	h.seg = d.uvarint()
	if !d.ok || len(d.b) != 0 || h.flags&^segOpened != 0 {
		return h, errMalformed
	}
	return h, nil
}

// validPayload reports whether p decodes as a record or segment header.
func validPayload(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	var err error
	switch p[0] {
	case typeRecord:
		_, err = decodeRecord(p)
	case typeSegment:
		_, err = decodeSegmentHeader(p)
	default:
		return false
	}
	return err == nil
}
