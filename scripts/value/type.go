// Package value defines the types and run-time values of the script
// language: how a value of each type is represented in memory, compared,
// encoded to bytes (for partial aggregates that cross the network), decoded
// again from untrusted bytes, and rendered as JSON or text.
//
// Types are structural: two types are identical when they have the same
// shape, whatever they are called. Composite values (arrays, maps, tuples)
// are references, as in Go: assigning one shares it.
package value

import (
	"strings"
)

// Kind is the shape of a type.
type Kind uint8

// The kinds of types.
const (
	Invalid Kind = iota
	Int          // 64-bit signed integer
	Float        // 64-bit IEEE float
	Bool         // true or false
	String       // Unicode text, held as UTF-8
	Bytes        // uninterpreted bytes
	Time         // microseconds since the Unix epoch, UTC
	Array        // array of Elem
	Map          // map[Key] of Elem
	Tuple        // {Fields}
)

var kindNames = [...]string{"invalid", "int", "float", "bool", "string", "bytes", "time", "array", "map", "tuple"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind?"
}

// Type describes a type. Types are immutable once built; share them freely.
type Type struct {
	Kind   Kind
	Elem   *Type   // element of an Array, value of a Map
	Key    *Type   // key of a Map
	Fields []Field // fields of a Tuple, at least one
	// Name is the name the type was declared with ("Cell"), used only when
	// printing it.
	Name string
}

// Field is one field of a tuple type. Name may be empty.
type Field struct {
	Name string
	Type *Type
}

// The basic types.
var (
	InvalidType = &Type{Kind: Invalid}
	IntType     = &Type{Kind: Int}
	FloatType   = &Type{Kind: Float}
	BoolType    = &Type{Kind: Bool}
	StringType  = &Type{Kind: String}
	BytesType   = &Type{Kind: Bytes}
	TimeType    = &Type{Kind: Time}
)

// CellType is the type of one cell of the input row.
var CellType = &Type{Kind: Tuple, Name: "Cell", Fields: []Field{
	{"family", StringType},
	{"qualifier", BytesType},
	{"timestamp", IntType},
	{"value", BytesType},
}}

// The field indexes of CellType.
const (
	CellFamily = iota
	CellQualifier
	CellTimestamp
	CellValue
)

// ArrayOf returns the type array of elem.
func ArrayOf(elem *Type) *Type { return &Type{Kind: Array, Elem: elem} }

// MapOf returns the type map[key] of elem.
func MapOf(key, elem *Type) *Type { return &Type{Kind: Map, Key: key, Elem: elem} }

// TupleOf returns the tuple type with the given fields.
func TupleOf(fields ...Field) *Type { return &Type{Kind: Tuple, Fields: fields} }

// IsBasic reports whether t is one of the scalar types.
func (t *Type) IsBasic() bool { return t.Kind >= Int && t.Kind <= Time }

// IsNumeric reports whether t is int or float.
func (t *Type) IsNumeric() bool { return t.Kind == Int || t.Kind == Float }

// IsOrdered reports whether values of t can be compared with < and >.
func (t *Type) IsOrdered() bool {
	switch t.Kind {
	case Int, Float, String, Bytes, Time:
		return true
	}
	return false
}

// FieldIndex returns the index of the field called name, or -1.
func (t *Type) FieldIndex(name string) int {
	for i, f := range t.Fields {
		if f.Name == name && name != "" {
			return i
		}
	}
	return -1
}

// Identical reports whether a and b have the same shape. Names of types and
// of tuple fields do not matter; field order does.
func Identical(a, b *Type) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case Array:
		return Identical(a.Elem, b.Elem)
	case Map:
		return Identical(a.Key, b.Key) && Identical(a.Elem, b.Elem)
	case Tuple:
		if len(a.Fields) != len(b.Fields) {
			return false
		}
		for i := range a.Fields {
			if !Identical(a.Fields[i].Type, b.Fields[i].Type) {
				return false
			}
		}
	}
	return true
}

// String returns the type in the language's syntax.
func (t *Type) String() string {
	var b strings.Builder
	t.write(&b, true)
	return b.String()
}

// Signature is the type spelled out in full, ignoring declared names; two
// types are identical exactly when their signatures are equal.
func (t *Type) Signature() string {
	var b strings.Builder
	t.write(&b, false)
	return b.String()
}

func (t *Type) write(b *strings.Builder, useName bool) {
	if t == nil {
		b.WriteString("<nil>")
		return
	}
	if useName && t.Name != "" {
		b.WriteString(t.Name)
		return
	}
	switch t.Kind {
	case Array:
		b.WriteString("array of ")
		t.Elem.write(b, useName)
	case Map:
		b.WriteString("map[")
		t.Key.write(b, useName)
		b.WriteString("] of ")
		t.Elem.write(b, useName)
	case Tuple:
		b.WriteByte('{')
		for i, f := range t.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			if f.Name != "" && useName {
				b.WriteString(f.Name)
				b.WriteString(": ")
			}
			f.Type.write(b, useName)
		}
		b.WriteByte('}')
	default:
		b.WriteString(t.Kind.String())
	}
}
