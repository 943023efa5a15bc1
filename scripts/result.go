package scripts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tabuladb/tabula/scripts/agg"
	"github.com/tabuladb/tabula/scripts/value"
)

// Result is the final content of a program's tables.
type Result struct {
	Tables []*Table // in declaration order
}

// Table is one finalized table.
type Table struct {
	Name    string
	Kind    string
	Spec    *agg.Spec
	Entries []Entry // ordered by key
}

// Entry is one row of a table. Key holds the index values ([] for an
// unindexed table); Value is a number for sum, mean and unique, a slice for
// the others. Values are Go values: int64, float64, bool, string, []byte,
// time.Time, []any for arrays, []any or map[string]any for tuples (the
// latter when every field is named: maximum, minimum and top give
// {"value"-or-its-name: v, "weight"-or-its-name: w}), and []MapEntry for
// maps.
type Entry struct {
	Key   []any
	Value any

	raw    agg.Entry
	keyTs  []value.Field
	valueT *value.Type
}

// MapEntry is one key and value of a map value.
type MapEntry struct {
	Key, Value any
}

// Table returns the table called name, or nil.
func (r *Result) Table(name string) *Table {
	for _, t := range r.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func newTable(t *agg.Table) *Table {
	spec := t.Spec()
	rt := spec.ResultType()
	out := &Table{Name: spec.Name, Kind: spec.Kind, Spec: spec}
	for _, e := range t.Entries() {
		en := Entry{Key: make([]any, len(e.Key)), Value: native(rt, e.Value), raw: e, keyTs: spec.Index, valueT: rt}
		for i, k := range e.Key {
			en.Key[i] = native(spec.Index[i].Type, k)
		}
		out.Entries = append(out.Entries, en)
	}
	return out
}

// nativeConverter converts values to plain Go values: scalars as
// value.GoBasic, maps as []MapEntry.
var nativeConverter = value.Converter{
	Basic: value.GoBasic,
	Map: func(keys, values []any) any {
		out := make([]MapEntry, len(keys))
		for i := range keys {
			out[i] = MapEntry{keys[i], values[i]}
		}
		return out
	},
}

// native converts a value to a plain Go value.
func native(t *value.Type, v value.Value) any { return nativeConverter.Convert(t, v) }

// MarshalJSON renders the result as one object mapping each table's name,
// in declaration order, to an array of entries {"key": [index values…],
// "value": …}. Values follow value.ToJSON: bytes are base64, times RFC 3339
// strings.
func (r *Result) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, t := range r.Tables {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		b.Write(name)
		b.WriteByte(':')
		entries := make([]map[string]any, len(t.Entries))
		for j, e := range t.Entries {
			key := make([]any, len(e.raw.Key))
			for k, kv := range e.raw.Key {
				key[k] = value.ToJSON(e.keyTs[k].Type, kv)
			}
			entries[j] = map[string]any{"key": key, "value": value.ToJSON(e.valueT, e.raw.Value)}
		}
		eb, err := json.Marshal(entries)
		if err != nil {
			return nil, err
		}
		b.Write(eb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// WriteText writes the result one line per value, as Sawzall printed its
// tables: name[index]… = value. Tables whose value is an array print one
// line per element (quantile prints its n-tiles on one); maximum, minimum
// and top print "value weight w".
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, t := range r.Tables {
		for _, e := range t.Entries {
			var prefix strings.Builder
			prefix.WriteString(t.Name)
			for k, kv := range e.raw.Key {
				fmt.Fprintf(&prefix, "[%s]", value.Format(e.keyTs[k].Type, kv))
			}
			prefix.WriteString(" = ")
			switch {
			case e.valueT.Kind == value.Array && t.Kind != agg.Quantile:
				et := e.valueT.Elem
				for _, x := range e.raw.Value.Array().Elems {
					b.WriteString(prefix.String())
					if t.Spec.Weight != nil && et.Kind == value.Tuple && len(et.Fields) == 2 {
						f := x.Tuple().Fields
						fmt.Fprintf(&b, "%s weight %s\n", value.Format(et.Fields[0].Type, f[0]), value.Format(et.Fields[1].Type, f[1]))
						continue
					}
					b.WriteString(value.Format(et, x))
					b.WriteByte('\n')
				}
			default:
				b.WriteString(prefix.String())
				b.WriteString(value.Format(e.valueT, e.raw.Value))
				b.WriteByte('\n')
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String is the result as WriteText writes it.
func (r *Result) String() string {
	var b strings.Builder
	_ = r.WriteText(&b)
	return b.String()
}
