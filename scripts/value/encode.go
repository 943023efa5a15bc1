package value

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrCorrupt is returned (wrapped) by Decode for bytes that are not a valid
// encoding of a value of the expected type.
var ErrCorrupt = errors.New("corrupt value encoding")

// Append appends the binary encoding of v, of type t, to dst. The encoding
// is self-delimiting given t: ints and times are zigzag varints, floats 8
// bytes, bools 1 byte, strings and bytes a length then the bytes, arrays and
// maps a count then their elements, tuples their fields in order. Every
// value encodes to at least one byte, which lets Decode bound counts by the
// bytes that remain.
func Append(dst []byte, t *Type, v Value) []byte {
	switch t.Kind {
	case Int, Time:
		return binary.AppendVarint(dst, v.N)
	case Float:
		return binary.LittleEndian.AppendUint64(dst, uint64(v.N))
	case Bool:
		return append(dst, byte(v.N&1))
	case String, Bytes:
		dst = binary.AppendUvarint(dst, uint64(len(v.S)))
		return append(dst, v.S...)
	case Array:
		e := v.Array().Elems
		dst = binary.AppendUvarint(dst, uint64(len(e)))
		for _, x := range e {
			dst = Append(dst, t.Elem, x)
		}
		return dst
	case Map:
		m := v.Map()
		dst = binary.AppendUvarint(dst, uint64(m.Len()))
		for i := range m.Keys {
			dst = Append(dst, t.Key, m.Keys[i])
			dst = Append(dst, t.Elem, m.Vals[i])
		}
		return dst
	case Tuple:
		for i, f := range t.Fields {
			dst = Append(dst, f.Type, v.Tuple().Fields[i])
		}
		return dst
	}
	panic(fmt.Sprintf("value.Append: bad type %v", t))
}

// Decode decodes one value of type t from the front of src and returns it
// with the bytes that follow. It is safe on untrusted input: it fails with
// an error wrapping ErrCorrupt, never panics, and allocates no more than a
// small multiple of len(src). The value shares no memory with src.
func Decode(src []byte, t *Type) (Value, []byte, error) {
	switch t.Kind {
	case Int, Time:
		n, k := binary.Varint(src)
		if k <= 0 {
			return Value{}, nil, fmt.Errorf("%w: bad varint", ErrCorrupt)
		}
		return Value{N: n}, src[k:], nil
	case Float:
		if len(src) < 8 {
			return Value{}, nil, fmt.Errorf("%w: short float", ErrCorrupt)
		}
		return Value{N: int64(binary.LittleEndian.Uint64(src))}, src[8:], nil
	case Bool:
		if len(src) < 1 || src[0] > 1 {
			return Value{}, nil, fmt.Errorf("%w: bad bool", ErrCorrupt)
		}
		return Value{N: int64(src[0])}, src[1:], nil
	case String, Bytes:
		n, rest, err := decodeCount(src)
		if err != nil {
			return Value{}, nil, err
		}
		return Value{S: string(rest[:n])}, rest[n:], nil
	case Array:
		n, rest, err := decodeCount(src)
		if err != nil {
			return Value{}, nil, err
		}
		elems := make([]Value, n)
		for i := range elems {
			if elems[i], rest, err = Decode(rest, t.Elem); err != nil {
				return Value{}, nil, err
			}
		}
		return Value{R: &ArrayVal{Elems: elems}}, rest, nil
	case Map:
		n, rest, err := decodeCount(src)
		if err != nil {
			return Value{}, nil, err
		}
		m := NewMap()
		for range n {
			var k, v Value
			if k, rest, err = Decode(rest, t.Key); err != nil {
				return Value{}, nil, err
			}
			if v, rest, err = Decode(rest, t.Elem); err != nil {
				return Value{}, nil, err
			}
			m.Set(k, v)
		}
		return Value{R: m}, rest, nil
	case Tuple:
		f := make([]Value, len(t.Fields))
		rest := src
		var err error
		for i, fl := range t.Fields {
			if f[i], rest, err = Decode(rest, fl.Type); err != nil {
				return Value{}, nil, err
			}
		}
		return Value{R: &TupleVal{Fields: f}}, rest, nil
	}
	return Value{}, nil, fmt.Errorf("%w: cannot decode type %v", ErrCorrupt, t)
}

// decodeCount reads a length or element count and checks it against the
// bytes remaining: every element takes at least one byte.
func decodeCount(src []byte) (int, []byte, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 {
		return 0, nil, fmt.Errorf("%w: bad length", ErrCorrupt)
	}
	rest := src[k:]
	if n > uint64(len(rest)) || n > math.MaxInt32 {
		return 0, nil, fmt.Errorf("%w: length %d exceeds the %d bytes left", ErrCorrupt, n, len(rest))
	}
	return int(n), rest, nil
}
