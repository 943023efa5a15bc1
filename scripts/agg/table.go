// Package agg implements the aggregator tables scripts emit into:
// collection, sum, mean, maximum(n), minimum(n), top(n), unique(n),
// quantile(n) and sample(n), each optionally indexed.
//
// Every table keeps a partial state that can be merged with the state of the
// same table from another run (Merge), encoded to bytes and decoded again
// (MarshalBinary, UnmarshalBinary) so that partials computed by tablet
// servers travel to the caller, and finalized into entries (Entries).
//
// Merging is exact for collection, sum, mean, maximum and minimum: the
// result equals a single run over all the rows, up to the order of
// collection entries and float rounding. top is exact until a table sees
// more distinct values than its summary holds; then it is a Misra-Gries
// summary, whose counts are low by at most W/(k+1). unique (HyperLogLog++,
// 0.8% standard error) and quantile (DDSketch, 1% relative error) are
// estimates, and merging their sketches loses nothing more. sample merges
// into a uniform sample of the union, but not the one a single run draws:
// priorities depend on each value's position in its run's stream.
package agg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/scripts/value"
)

// The table kinds.
const (
	Collection = "collection"
	Sum        = "sum"
	Mean       = "mean"
	Maximum    = "maximum"
	Minimum    = "minimum"
	Top        = "top"
	Unique     = "unique"
	Quantile   = "quantile"
	Sample     = "sample"
)

// Spec describes a table as declared in a script.
type Spec struct {
	Name   string
	Kind   string
	Param  int           // the n of maximum(n) and the like
	Index  []value.Field // index names and types, empty when unindexed
	Elem   value.Field   // the type of emitted values
	Weight *value.Field  // the weight type (maximum, minimum, top), else nil
}

// Signature identifies the shape of a table: two tables merge only when their
// signatures are equal.
func (s *Spec) Signature() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s(%d)", s.Name, s.Kind, s.Param)
	for _, f := range s.Index {
		fmt.Fprintf(&b, "[%s]", f.Type.Signature())
	}
	fmt.Fprintf(&b, " of %s", s.Elem.Type.Signature())
	if s.Weight != nil {
		fmt.Fprintf(&b, " weight %s", s.Weight.Type.Signature())
	}
	return b.String()
}

// ResultType is the type of the value of each entry: the element type for
// sum, float for mean, int for unique, an array of the element type for
// collection, sample and quantile, and an array of {value, weight} tuples
// for maximum, minimum and top.
func (s *Spec) ResultType() *value.Type {
	switch s.Kind {
	case Sum:
		return s.Elem.Type
	case Mean:
		return value.FloatType
	case Unique:
		return value.IntType
	case Maximum, Minimum, Top:
		vn, wn := s.Elem.Name, s.Weight.Name
		if vn == "" {
			vn = "value"
		}
		if wn == "" || wn == vn {
			wn = "weight"
		}
		return value.ArrayOf(value.TupleOf(value.Field{Name: vn, Type: s.Elem.Type}, value.Field{Name: wn, Type: s.Weight.Type}))
	}
	return value.ArrayOf(s.Elem.Type)
}

// Entry is one finalized row of a table: its index values ([] when the
// table is unindexed) and its value, of the spec's ResultType.
type Entry struct {
	Key   []value.Value
	Value value.Value
}

// state is the partial aggregate of one group (one index key).
type state interface {
	// add adds one emitted value with its weight (zero Value when the table
	// has none) and returns the bytes of memory it added.
	add(v, w value.Value) int64
	// merge adds o, of the same kind, into the state.
	merge(o state)
	// appendTo appends a self-delimiting encoding of the state.
	appendTo(dst []byte) []byte
	// decode reads the encoding appendTo wrote and returns what follows it.
	decode(src []byte) ([]byte, error)
	// result is the final value.
	result() value.Value
}

type group struct {
	key   []value.Value
	state state
}

// Table is an aggregator table's partial state. A Table is not safe for
// concurrent use.
type Table struct {
	spec   *Spec
	sig    string
	groups map[string]*group
	order  []string // group keys in creation order, for deterministic encoding
	mem    int64
	keyBuf []byte
	// byString indexes the groups of a table with one string or bytes
	// index by the raw string, which spares encoding the key per emit.
	byString map[string]*group
}

// New returns an empty table for spec. It panics if spec is malformed (an
// unknown kind or a missing weight), which the checker rules out.
func New(spec *Spec) *Table {
	t := &Table{spec: spec, sig: spec.Signature(), groups: map[string]*group{}}
	t.newState() // validate the spec
	t.indexByString()
	return t
}

func (t *Table) indexByString() {
	if len(t.spec.Index) == 1 && (t.spec.Index[0].Type.Kind == value.String || t.spec.Index[0].Type.Kind == value.Bytes) {
		t.byString = map[string]*group{}
		for _, g := range t.groups {
			t.byString[g.key[0].S] = g
		}
	}
}

// Spec returns the table's spec.
func (t *Table) Spec() *Spec { return t.spec }

// Size is an estimate of the memory the table holds, in bytes.
func (t *Table) Size() int64 { return t.mem }

// Len is the number of groups (entries) in the table.
func (t *Table) Len() int { return len(t.groups) }

func (t *Table) newState() state {
	s := t.spec
	switch s.Kind {
	case Collection:
		return &collectionState{t: s.Elem.Type}
	case Sum:
		return &sumState{float: s.Elem.Type.Kind == value.Float}
	case Mean:
		return &meanState{float: s.Elem.Type.Kind == value.Float}
	case Maximum, Minimum:
		return &extremeState{spec: s, max: s.Kind == Maximum}
	case Top:
		return newTopState(s)
	case Unique:
		return newUniqueState(s)
	case Quantile:
		return newQuantileState(s)
	case Sample:
		return &sampleState{spec: s, seed: fingerprint([]byte(s.Name))}
	}
	panic(fmt.Sprintf("agg: unknown table kind %q", s.Kind))
}

// group returns the group for key, creating it (with a copy of key) if
// needed.
func (t *Table) group(key []value.Value) *group {
	if t.byString != nil {
		if g, ok := t.byString[key[0].S]; ok {
			return g
		}
		g := t.newGroup(key)
		t.byString[g.key[0].S] = g
		return g
	}
	t.keyBuf = t.keyBuf[:0]
	for i, f := range t.spec.Index {
		t.keyBuf = value.Append(t.keyBuf, f.Type, key[i])
	}
	if g, ok := t.groups[string(t.keyBuf)]; ok {
		return g
	}
	return t.newGroup(key)
}

// newGroup adds a group for key, whose encoding is in t.keyBuf.
func (t *Table) newGroup(key []value.Value) *group {
	if t.byString != nil {
		t.keyBuf = value.Append(t.keyBuf[:0], t.spec.Index[0].Type, key[0])
	}
	g := &group{key: make([]value.Value, len(key)), state: t.newState()}
	for i, f := range t.spec.Index {
		g.key[i] = value.Clone(f.Type, key[i])
		t.mem += value.Size(f.Type, key[i])
	}
	k := string(t.keyBuf)
	t.groups[k] = g
	t.order = append(t.order, k)
	t.mem += int64(len(k)) + 64
	return g
}

// Emit adds v (with weight w, ignored by tables without weights) under the
// index values key, which must match the spec's index types. Emit keeps
// copies: v, w and key may share memory with a row that is reused later. It
// returns the number of bytes the table grew by.
func (t *Table) Emit(key []value.Value, v, w value.Value) int64 {
	before := t.mem
	g := t.group(key)
	t.mem += g.state.add(v, w)
	return t.mem - before
}

// Merge adds the partial state of o, a table with the same spec, into t. o is
// not modified but t may share memory with it afterwards.
func (t *Table) Merge(o *Table) error {
	if o.sig != t.sig {
		return fmt.Errorf("agg: cannot merge table %q into %q", o.sig, t.sig)
	}
	for _, k := range o.order {
		og := o.groups[k]
		if g, ok := t.groups[k]; ok {
			g.state.merge(og.state)
			continue
		}
		ng := &group{key: og.key, state: t.newState()}
		ng.state.merge(og.state)
		t.groups[k] = ng
		t.order = append(t.order, k)
		if t.byString != nil {
			t.byString[ng.key[0].S] = ng
		}
	}
	t.mem += o.mem
	return nil
}

// Entries returns the final entries, ordered by index key.
func (t *Table) Entries() []Entry {
	out := make([]Entry, 0, len(t.groups))
	for _, k := range t.order {
		g := t.groups[k]
		out = append(out, Entry{Key: g.key, Value: g.state.result()})
	}
	slices.SortStableFunc(out, func(a, b Entry) int {
		for i, f := range t.spec.Index {
			if c := value.Compare(f.Type, a.Key[i], b.Key[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

// ErrCorrupt is returned (wrapped) by UnmarshalBinary for bytes that are not
// a partial state of this table.
var ErrCorrupt = errors.New("agg: corrupt table state")

const magic = "TBT1"

// MarshalBinary encodes the table's partial state: a magic number, the
// table's signature, then each group's index values and state.
func (t *Table) MarshalBinary() ([]byte, error) {
	b := []byte(magic)
	b = binary.AppendUvarint(b, uint64(len(t.sig)))
	b = append(b, t.sig...)
	b = binary.AppendUvarint(b, uint64(len(t.order)))
	for _, k := range t.order {
		g := t.groups[k]
		b = append(b, k...) // the encoded index values
		b = g.state.appendTo(b)
	}
	return b, nil
}

// UnmarshalBinary replaces t's state with the one encoded in data, which
// must come from a table with the same spec. data may come from anywhere:
// malformed bytes give an error wrapping ErrCorrupt, never a panic, and
// allocations stay proportional to len(data).
func (t *Table) UnmarshalBinary(data []byte) (err error) {
	fresh := &Table{spec: t.spec, sig: t.sig, groups: map[string]*group{}}
	if !bytes.HasPrefix(data, []byte(magic)) {
		return fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	rest := data[len(magic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return fmt.Errorf("%w: bad signature", ErrCorrupt)
	}
	if sig := string(rest[k : k+int(n)]); sig != t.sig {
		return fmt.Errorf("%w: state of %q, want %q", ErrCorrupt, sig, t.sig)
	}
	rest = rest[k+int(n):]
	groups, k := binary.Uvarint(rest)
	if k <= 0 || groups > uint64(len(rest)) {
		return fmt.Errorf("%w: bad group count", ErrCorrupt)
	}
	rest = rest[k:]
	for range groups {
		key := make([]value.Value, len(t.spec.Index))
		var kb []byte
		for i, f := range t.spec.Index {
			if key[i], rest, err = value.Decode(rest, f.Type); err != nil {
				return fmt.Errorf("%w: index: %v", ErrCorrupt, err)
			}
			// Re-encode rather than keep the input bytes: a varint may be
			// written in more than one way, a group key in only one.
			kb = value.Append(kb, f.Type, key[i])
		}
		ks := string(kb)
		st := fresh.newState()
		if rest, err = st.decode(rest); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, t.spec.Kind, err)
		}
		if g, ok := fresh.groups[ks]; ok {
			g.state.merge(st)
			continue
		}
		fresh.groups[ks] = &group{key: key, state: st}
		fresh.order = append(fresh.order, ks)
		fresh.mem += int64(len(ks)) + 64
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(rest))
	}
	fresh.mem += int64(len(data))
	*t = *fresh
	t.indexByString()
	return nil
}
