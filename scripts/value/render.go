package value

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
	"time"
)

// TimeLayout is how times are printed and the first layout they are parsed
// with.
const TimeLayout = time.RFC3339Nano

// TimeOf converts a time value (microseconds since the epoch) to a Go time in
// UTC.
func TimeOf(v Value) time.Time { return time.UnixMicro(v.N).UTC() }

// Converter turns values into plain Go values: Convert walks arrays,
// maps and tuples the same way for every rendering (arrays to []any,
// tuples to map[string]any when every field is named and to []any
// otherwise, maps' keys and values converted in key order) and leaves the basic
// kinds (Int, Float, Bool, String, Bytes, Time) to Basic and the shape of
// a map to Map.
type Converter struct {
	// Basic converts a value of a basic kind; it is never called with
	// an array, map or tuple type.
	Basic func(t *Type, v Value) any
	// Map makes a converted map from its converted keys and values (in
	// key order, values[i] the value of keys[i]).
	Map func(keys, values []any) any
}

// Convert returns v, of type t, converted.
func (c Converter) Convert(t *Type, v Value) any {
	switch t.Kind {
	case Array:
		e := v.Array().Elems
		out := make([]any, len(e))
		for i, x := range e {
			out[i] = c.Convert(t.Elem, x)
		}
		return out
	case Map:
		m := v.Map()
		keys, vals := make([]any, m.Len()), make([]any, m.Len())
		for i := range m.Keys {
			keys[i], vals[i] = c.Convert(t.Key, m.Keys[i]), c.Convert(t.Elem, m.Vals[i])
		}
		return c.Map(keys, vals)
	case Tuple:
		f := v.Tuple().Fields
		named := true
		for _, fl := range t.Fields {
			named = named && fl.Name != ""
		}
		if named {
			out := make(map[string]any, len(f))
			for i, fl := range t.Fields {
				out[fl.Name] = c.Convert(fl.Type, f[i])
			}
			return out
		}
		out := make([]any, len(f))
		for i, fl := range t.Fields {
			out[i] = c.Convert(fl.Type, f[i])
		}
		return out
	}
	return c.Basic(t, v)
}

// GoBasic converts a value of a basic kind to the Go value it holds:
// int64, float64, bool, string, []byte, time.Time (UTC); nil for other
// kinds.
func GoBasic(t *Type, v Value) any {
	switch t.Kind {
	case Int:
		return v.N
	case Float:
		return v.Float()
	case Bool:
		return v.Bool()
	case String:
		return v.S
	case Bytes:
		return []byte(v.S)
	case Time:
		return TimeOf(v)
	}
	return nil
}

// jsonConverter is ToJSON's Converter.
var jsonConverter = Converter{
	Basic: func(t *Type, v Value) any {
		switch t.Kind {
		case Float:
			f := v.Float()
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return strconv.FormatFloat(f, 'g', -1, 64)
			}
			return f
		case String:
			return validString(v.S)
		case Bytes:
			return base64.StdEncoding.EncodeToString([]byte(v.S))
		case Time:
			return TimeOf(v).Format(TimeLayout)
		}
		return GoBasic(t, v)
	},
	Map: func(keys, values []any) any {
		out := make([]any, len(keys))
		for i := range keys {
			out[i] = map[string]any{"key": keys[i], "value": values[i]}
		}
		return out
	},
}

// ToJSON returns v, of type t, as a value encoding/json renders faithfully:
// ints as numbers, floats as numbers (NaN and infinities, which JSON lacks,
// as the strings "NaN", "+Inf", "-Inf"), strings as strings, bytes as
// base64 strings (as encoding/json does for []byte), times as RFC 3339
// strings, arrays as arrays, maps as arrays of {"key", "value"} objects
// (keys need not be strings), tuples as objects when every field is named
// and as arrays otherwise.
func ToJSON(t *Type, v Value) any { return jsonConverter.Convert(t, v) }

// Format returns v, of type t, as text in the language's own literal syntax
// where there is one: 42, 1.5, true, "text", B"bytes", T"2006-01-02T…Z",
// {1, 2}, {"k": 1}.
func Format(t *Type, v Value) string {
	var b strings.Builder
	format(&b, t, v)
	return b.String()
}

func format(b *strings.Builder, t *Type, v Value) {
	switch t.Kind {
	case Int:
		b.WriteString(strconv.FormatInt(v.N, 10))
	case Float:
		s := strconv.FormatFloat(v.Float(), 'g', -1, 64)
		b.WriteString(s)
		if !strings.ContainsAny(s, ".eEIN") {
			b.WriteString(".0")
		}
	case Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case String:
		b.WriteString(strconv.Quote(v.S))
	case Bytes:
		b.WriteByte('B')
		b.WriteString(strconv.Quote(v.S))
	case Time:
		b.WriteByte('T')
		b.WriteString(strconv.Quote(TimeOf(v).Format(TimeLayout)))
	case Array:
		b.WriteByte('{')
		for i, x := range v.Array().Elems {
			if i > 0 {
				b.WriteString(", ")
			}
			format(b, t.Elem, x)
		}
		b.WriteByte('}')
	case Map:
		m := v.Map()
		b.WriteByte('{')
		if m.Len() == 0 {
			b.WriteByte(':')
		}
		for i := range m.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			format(b, t.Key, m.Keys[i])
			b.WriteString(": ")
			format(b, t.Elem, m.Vals[i])
		}
		b.WriteByte('}')
	case Tuple:
		b.WriteByte('{')
		for i, fl := range t.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			if fl.Name != "" {
				b.WriteString(fl.Name)
				b.WriteString(": ")
			}
			format(b, fl.Type, v.Tuple().Fields[i])
		}
		b.WriteByte('}')
	}
}
