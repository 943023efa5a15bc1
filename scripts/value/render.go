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

// ToJSON returns v, of type t, as a value encoding/json renders faithfully:
// ints as numbers, floats as numbers (NaN and infinities, which JSON lacks,
// as the strings "NaN", "+Inf", "-Inf"), strings as strings, bytes as
// base64 strings (as encoding/json does for []byte), times as RFC 3339
// strings, arrays as arrays, maps as arrays of {"key", "value"} objects
// (keys need not be strings), tuples as objects when every field is named
// and as arrays otherwise.
func ToJSON(t *Type, v Value) any {
	switch t.Kind {
	case Int:
		return v.N
	case Float:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return f
	case Bool:
		return v.Bool()
	case String:
		return validString(v.S)
	case Bytes:
		return base64.StdEncoding.EncodeToString([]byte(v.S))
	case Time:
		return TimeOf(v).Format(TimeLayout)
	case Array:
		e := v.Array().Elems
		out := make([]any, len(e))
		for i, x := range e {
			out[i] = ToJSON(t.Elem, x)
		}
		return out
	case Map:
		m := v.Map()
		out := make([]any, m.Len())
		for i := range m.Keys {
			out[i] = map[string]any{"key": ToJSON(t.Key, m.Keys[i]), "value": ToJSON(t.Elem, m.Vals[i])}
		}
		return out
	case Tuple:
		f := v.Tuple().Fields
		named := true
		for _, fl := range t.Fields {
			named = named && fl.Name != ""
		}
		if named {
			out := make(map[string]any, len(f))
			for i, fl := range t.Fields {
				out[fl.Name] = ToJSON(fl.Type, f[i])
			}
			return out
		}
		out := make([]any, len(f))
		for i, fl := range t.Fields {
			out[i] = ToJSON(fl.Type, f[i])
		}
		return out
	}
	return nil
}

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
