package value

import (
	"cmp"
	"math"
	"strings"
	"unicode/utf8"
)

// Value is one run-time value. Which fields are meaningful depends on the
// static type, which the checker knows, so a Value never carries its type:
//
//   - int, time: N; bool: N is 0 or 1; float: N holds math.Float64bits.
//   - string, bytes: S (bytes are held as an immutable Go string so that
//     converting between string and bytes costs nothing).
//   - array, map, tuple: R holds *ArrayVal, *MapVal or *TupleVal.
//
// Scalar values have R == nil, so they are comparable and can key Go maps.
type Value struct {
	N int64
	S string
	R any
}

// MakeInt returns an int (or time) value.
func MakeInt(i int64) Value { return Value{N: i} }

// MakeFloat returns a float value.
func MakeFloat(f float64) Value { return Value{N: int64(math.Float64bits(f))} }

// MakeBool returns a bool value.
func MakeBool(b bool) Value {
	if b {
		return Value{N: 1}
	}
	return Value{}
}

// MakeString returns a string (or bytes) value.
func MakeString(s string) Value { return Value{S: s} }

// Float returns v as a float.
func (v Value) Float() float64 { return math.Float64frombits(uint64(v.N)) }

// Bool returns v as a bool.
func (v Value) Bool() bool { return v.N != 0 }

// Array returns v as an array.
func (v Value) Array() *ArrayVal { return v.R.(*ArrayVal) }

// Map returns v as a map.
func (v Value) Map() *MapVal { return v.R.(*MapVal) }

// Tuple returns v as a tuple.
func (v Value) Tuple() *TupleVal { return v.R.(*TupleVal) }

// ArrayVal is an array value.
type ArrayVal struct{ Elems []Value }

// TupleVal is a tuple value.
type TupleVal struct{ Fields []Value }

// MapVal is a map value. Keys are basic values, so a Value is its own Go map
// key; iteration follows insertion order, which keeps runs deterministic.
type MapVal struct {
	index map[Value]int
	Keys  []Value
	Vals  []Value
}

// NewMap returns an empty map.
func NewMap() *MapVal { return &MapVal{index: map[Value]int{}} }

// Len is the number of keys.
func (m *MapVal) Len() int { return len(m.Keys) }

// Get returns the value for k.
func (m *MapVal) Get(k Value) (Value, bool) {
	i, ok := m.index[k]
	if !ok {
		return Value{}, false
	}
	return m.Vals[i], true
}

// Set sets the value for k and reports whether k is new.
func (m *MapVal) Set(k, v Value) bool {
	if i, ok := m.index[k]; ok {
		m.Vals[i] = v
		return false
	}
	m.index[k] = len(m.Keys)
	m.Keys = append(m.Keys, k)
	m.Vals = append(m.Vals, v)
	return true
}

// Zero returns the zero value of t: 0, "", false, the epoch, or a new empty
// array or map, or a tuple of zero values.
func Zero(t *Type) Value {
	switch t.Kind {
	case Float:
		return MakeFloat(0)
	case Array:
		return Value{R: &ArrayVal{}}
	case Map:
		return Value{R: NewMap()}
	case Tuple:
		f := make([]Value, len(t.Fields))
		for i, fl := range t.Fields {
			f[i] = Zero(fl.Type)
		}
		return Value{R: &TupleVal{Fields: f}}
	}
	return Value{}
}

// Equal reports whether a and b, both of type t, are equal. Composite
// values are compared element by element.
func Equal(t *Type, a, b Value) bool { return Compare(t, a, b) == 0 }

// Compare orders a and b, both of type t: numbers numerically (NaN first),
// strings and bytes bytewise, false before true, arrays and tuples
// lexicographically, maps by length then entries in insertion order.
func Compare(t *Type, a, b Value) int {
	switch t.Kind {
	case Int, Time, Bool:
		return cmp.Compare(a.N, b.N)
	case Float:
		return cmp.Compare(a.Float(), b.Float())
	case String, Bytes:
		return strings.Compare(a.S, b.S)
	case Array:
		x, y := a.Array().Elems, b.Array().Elems
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := Compare(t.Elem, x[i], y[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	case Tuple:
		x, y := a.Tuple().Fields, b.Tuple().Fields
		for i, f := range t.Fields {
			if c := Compare(f.Type, x[i], y[i]); c != 0 {
				return c
			}
		}
		return 0
	case Map:
		x, y := a.Map(), b.Map()
		if c := cmp.Compare(x.Len(), y.Len()); c != 0 {
			return c
		}
		for i := range x.Keys {
			if c := Compare(t.Key, x.Keys[i], y.Keys[i]); c != 0 {
				return c
			}
			if c := Compare(t.Elem, x.Vals[i], y.Vals[i]); c != 0 {
				return c
			}
		}
	}
	return 0
}

// Size is an estimate, in bytes, of the memory v holds, used to enforce
// memory limits; it counts what the value owns, not what it shares with the
// input row.
func Size(t *Type, v Value) int64 {
	const word = 8
	switch t.Kind {
	case String, Bytes:
		return int64(len(v.S)) + 2*word
	case Array:
		n := int64(3 * word)
		for _, e := range v.Array().Elems {
			n += Size(t.Elem, e) + 3*word
		}
		return n
	case Map:
		m := v.Map()
		n := int64(8 * word)
		for i := range m.Keys {
			n += Size(t.Key, m.Keys[i]) + Size(t.Elem, m.Vals[i]) + 10*word
		}
		return n
	case Tuple:
		n := int64(3 * word)
		for i, f := range t.Fields {
			n += Size(f.Type, v.Tuple().Fields[i]) + 3*word
		}
		return n
	}
	return word
}

// Clone returns a deep copy of v that shares no memory with it, strings
// included; aggregators keep clones because a row's bytes may be reused once
// the row has been processed.
func Clone(t *Type, v Value) Value {
	switch t.Kind {
	case String, Bytes:
		return Value{S: strings.Clone(v.S)}
	case Array:
		src := v.Array().Elems
		dst := make([]Value, len(src))
		for i, e := range src {
			dst[i] = Clone(t.Elem, e)
		}
		return Value{R: &ArrayVal{Elems: dst}}
	case Map:
		src := v.Map()
		dst := NewMap()
		for i := range src.Keys {
			dst.Set(Clone(t.Key, src.Keys[i]), Clone(t.Elem, src.Vals[i]))
		}
		return Value{R: dst}
	case Tuple:
		src := v.Tuple().Fields
		dst := make([]Value, len(src))
		for i, f := range t.Fields {
			dst[i] = Clone(f.Type, src[i])
		}
		return Value{R: &TupleVal{Fields: dst}}
	}
	return v
}

// validString returns s, with invalid UTF-8 replaced, for rendering.
func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
