package cell

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Kind says what an internal entry is: a cell or one of the delete markers.
type Kind uint8

// The entry kinds. A delete marker with sequence number S shadows, within its
// scope, every entry of the same row whose sequence number is below S, in this
// and in older memtables and SSTables, until a major compaction drops both.
const (
	// KindRowDelete marks the whole row deleted. Its key has no family.
	KindRowDelete Kind = 1
	// KindFamilyDelete marks one family of the row deleted. Its key has no
	// qualifier.
	KindFamilyDelete Kind = 2
	// KindColumnDelete marks the versions of one column with timestamps in a
	// range deleted; the entry's value holds the range (EncodeTimeRange).
	KindColumnDelete Kind = 3
	// KindSet is a cell version; the entry's value is the cell's value.
	KindSet Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindRowDelete:
		return "row-delete"
	case KindFamilyDelete:
		return "family-delete"
	case KindColumnDelete:
		return "column-delete"
	case KindSet:
		return "set"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Key is a decoded internal key.
type Key struct {
	Row       []byte
	Family    string // empty for KindRowDelete
	Qualifier []byte // nil for KindRowDelete and KindFamilyDelete
	// Timestamp of a KindSet entry. Markers are encoded with math.MaxInt64
	// so that they sort before every cell they may shadow.
	Timestamp int64
	Seq       uint64
	Kind      Kind
}

// Encoding. Each variable-length component is escaped (0x00 → 0x00 0xFF) and
// terminated by 0x00 0x01, which keeps bytes.Compare order equal to
// component-wise order. A tag byte after the row (and after the family) is
// 0x00 for a marker of that level and 0x01 for anything deeper, so a row
// marker sorts before every family of its row and a family marker before
// every qualifier of its family, the empty qualifier included. The suffix is
// the bitwise complement of the timestamp and of the sequence number (both
// descending), then the kind.
const (
	escByte    = 0x00
	escEscaped = 0xFF
	escTerm    = 0x01
	tagMarker  = 0x00
	tagDeeper  = 0x01
	suffixLen  = 8 + 8 + 1
)

// ErrMalformedKey is returned (wrapped) by DecodeKey for bytes that are not an
// encoded internal key.
var ErrMalformedKey = errors.New("malformed internal key")

func appendEscaped(dst, s []byte) []byte {
	for _, c := range s {
		if c == escByte {
			dst = append(dst, escByte, escEscaped)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, escByte, escTerm)
}

func appendEscapedString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escByte {
			dst = append(dst, escByte, escEscaped)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, escByte, escTerm)
}

// AppendKey appends the encoding of k to dst.
func AppendKey(dst []byte, k Key) []byte {
	dst = appendEscaped(dst, k.Row)
	ts := k.Timestamp
	switch k.Kind {
	case KindRowDelete:
		dst = append(dst, tagMarker)
		ts = math.MaxInt64
	case KindFamilyDelete:
		dst = append(dst, tagDeeper)
		dst = appendEscapedString(dst, k.Family)
		dst = append(dst, tagMarker)
		ts = math.MaxInt64
	default:
		dst = append(dst, tagDeeper)
		dst = appendEscapedString(dst, k.Family)
		dst = append(dst, tagDeeper)
		dst = appendEscaped(dst, k.Qualifier)
		if k.Kind == KindColumnDelete {
			ts = math.MaxInt64
		}
	}
	dst = binary.BigEndian.AppendUint64(dst, ^uint64(ts))
	dst = binary.BigEndian.AppendUint64(dst, ^k.Seq)
	return append(dst, byte(k.Kind))
}

// EncodeKey returns the encoding of k.
func EncodeKey(k Key) []byte { return AppendKey(nil, k) }

// AppendComponent appends s as one order-preserving key component: its
// bytes with 0x00 escaped, then a terminator. Concatenated components
// compare with bytes.Compare as the tuples of their values do; internal
// keys and METADATA row keys are built from them.
func AppendComponent(dst, s []byte) []byte { return appendEscaped(dst, s) }

// ReadComponent decodes the component AppendComponent wrote at b[i:] and
// returns its value and the index just after it; ok is false when b holds
// no well-formed component there. The value aliases b unless it contained
// escaped bytes.
func ReadComponent(b []byte, i int) (value []byte, next int, ok bool) {
	end, escaped := skipEscaped(b, i)
	if end < 0 {
		return nil, 0, false
	}
	return unescape(b, i, end, escaped), end, true
}

// RowPrefix returns the prefix every entry of row starts with. It is also the
// smallest possible key of the row, so it serves as the seek key for "row and
// after", and RowPrefix(end) as the exclusive bound of a row range.
func RowPrefix(row []byte) []byte { return appendEscaped(nil, row) }

// FamilyPrefix returns the prefix of every cell and column marker of one
// family of a row (not of the family's own marker).
func FamilyPrefix(row []byte, family string) []byte {
	dst := appendEscaped(nil, row)
	dst = append(dst, tagDeeper)
	return appendEscapedString(dst, family)
}

// ColumnPrefix returns the prefix of every entry of one column of a row. It
// is the key the row+column bloom filters are built on.
func ColumnPrefix(row []byte, family string, qualifier []byte) []byte {
	dst := FamilyPrefix(row, family)
	dst = append(dst, tagDeeper)
	return appendEscaped(dst, qualifier)
}

// RowPrefixLen returns the length of the encoded-row prefix of the internal
// key b (RowPrefix of its row), without decoding it. Two keys belong to the
// same row exactly when these prefixes are equal. It returns -1 when b is
// malformed.
func RowPrefixLen(b []byte) int {
	n, _ := skipEscaped(b, 0)
	return n
}

// skipEscaped returns the index just after the escaped component starting at
// b[i] and whether the component contained escaped zero bytes; -1 when there
// is no terminator.
func skipEscaped(b []byte, i int) (int, bool) {
	escaped := false
	for i < len(b) {
		if b[i] != escByte {
			i++
			continue
		}
		if i+1 >= len(b) {
			return -1, false
		}
		switch b[i+1] {
		case escTerm:
			return i + 2, escaped
		case escEscaped:
			escaped = true
			i += 2
		default:
			return -1, false
		}
	}
	return -1, false
}

// unescape decodes the escaped component b[start:end] (end past the
// terminator). When nothing was escaped it returns a subslice of b, without
// copying.
func unescape(b []byte, start, end int, escaped bool) []byte {
	raw := b[start : end-2]
	if !escaped {
		return raw
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		out = append(out, raw[i])
		if raw[i] == escByte {
			i++
		}
	}
	return out
}

func malformed(b []byte, why string) error {
	return fmt.Errorf("%w: %s (%d bytes)", ErrMalformedKey, why, len(b))
}

// DecodeKey decodes an internal key. Row and Qualifier alias b unless they
// contained escaped bytes. It never panics on arbitrary input.
func DecodeKey(b []byte) (Key, error) { return DecodeKeyWithFamily(b, "") }

// DecodeKeyWithFamily is DecodeKey for a caller that expects the key's
// family to be family (the previous key's, when walking a row): if it is,
// the Key's Family is that string, without allocating a new one.
func DecodeKeyWithFamily(b []byte, family string) (Key, error) {
	var k Key
	end, esc := skipEscaped(b, 0)
	if end < 0 {
		return k, malformed(b, "unterminated row")
	}
	k.Row = unescape(b, 0, end, esc)
	if end >= len(b) {
		return k, malformed(b, "missing row tag")
	}
	tag := b[end]
	i := end + 1
	wantKind := KindRowDelete
	if tag == tagDeeper {
		fend, fesc := skipEscaped(b, i)
		if fend < 0 {
			return k, malformed(b, "unterminated family")
		}
		if f := unescape(b, i, fend, fesc); string(f) == family {
			k.Family = family
		} else {
			k.Family = string(f)
		}
		if fend >= len(b) {
			return k, malformed(b, "missing family tag")
		}
		tag = b[fend]
		i = fend + 1
		wantKind = KindFamilyDelete
		if tag == tagDeeper {
			qend, qesc := skipEscaped(b, i)
			if qend < 0 {
				return k, malformed(b, "unterminated qualifier")
			}
			k.Qualifier = unescape(b, i, qend, qesc)
			if k.Qualifier == nil {
				k.Qualifier = []byte{}
			}
			i = qend
			wantKind = 0 // KindSet or KindColumnDelete
		} else if tag != tagMarker {
			return k, malformed(b, "bad family tag")
		}
	} else if tag != tagMarker {
		return k, malformed(b, "bad row tag")
	}
	if len(b)-i != suffixLen {
		return k, malformed(b, "bad suffix length")
	}
	k.Timestamp = int64(^binary.BigEndian.Uint64(b[i:]))
	k.Seq = ^binary.BigEndian.Uint64(b[i+8:])
	k.Kind = Kind(b[i+16])
	switch {
	case wantKind == 0 && (k.Kind == KindSet || k.Kind == KindColumnDelete):
	case wantKind != 0 && k.Kind == wantKind:
	default:
		return k, malformed(b, "kind does not match key shape")
	}
	if k.Kind != KindSet && k.Timestamp != math.MaxInt64 {
		return k, malformed(b, "marker with a timestamp")
	}
	if k.Kind == KindSet && k.Timestamp < 0 {
		return k, malformed(b, "negative timestamp")
	}
	return k, nil
}

// Seq returns the sequence number of an encoded internal key without
// decoding the rest. b must be a valid key.
func Seq(b []byte) uint64 {
	return ^binary.BigEndian.Uint64(b[len(b)-9:])
}

// KindOf returns the kind of an encoded internal key. b must be a valid key.
func KindOf(b []byte) Kind { return Kind(b[len(b)-1]) }

// EncodeTimeRange encodes the [start, end) range of a KindColumnDelete entry;
// end 0 means no upper bound.
func EncodeTimeRange(start, end int64) []byte {
	if end == 0 {
		end = math.MaxInt64
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(start))
	return binary.BigEndian.AppendUint64(b, uint64(end))
}

// DecodeTimeRange decodes the value of a KindColumnDelete entry. The end is
// math.MaxInt64 for an unbounded range.
func DecodeTimeRange(v []byte) (start, end int64, err error) {
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("%w: column delete range is %d bytes, want 16", ErrMalformedKey, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:])), nil
}
