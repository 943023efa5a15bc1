package cell

import (
	"bytes"
	"encoding/binary"
)

// MutationKind says what a Mutation does.
type MutationKind uint8

// The mutation kinds of the Bigtable API.
const (
	// SetCell writes one cell version.
	SetCell MutationKind = iota + 1
	// DeleteFromColumn deletes the versions of one column whose timestamps
	// lie in [StartTimestamp, EndTimestamp).
	DeleteFromColumn
	// DeleteFromFamily deletes every cell of one family in the row.
	DeleteFromFamily
	// DeleteFromRow deletes every cell of the row.
	DeleteFromRow
	// AddToCell adds one Int64 input (Value: 8 bytes big-endian) to the
	// cell at Timestamp of a column of an aggregate family. The tablet
	// turns it into a MergeToCell of the input's state before logging it.
	AddToCell
	// MergeToCell merges an aggregate state (Value, in the family's state
	// encoding) into the cell at Timestamp of a column of an aggregate
	// family.
	MergeToCell
)

// String names the kind as the Cloud Bigtable API does.
func (k MutationKind) String() string {
	switch k {
	case SetCell:
		return "set_cell"
	case DeleteFromColumn:
		return "delete_from_column"
	case DeleteFromFamily:
		return "delete_from_family"
	case DeleteFromRow:
		return "delete_from_row"
	case AddToCell:
		return "add_to_cell"
	case MergeToCell:
		return "merge_to_cell"
	}
	return "unknown"
}

// Mutation is one change to a row. Which fields matter depends on Kind.
type Mutation struct {
	Kind      MutationKind
	Family    string // all kinds but DeleteFromRow
	Qualifier []byte // SetCell, DeleteFromColumn, AddToCell, MergeToCell
	// Timestamp of a SetCell, AddToCell or MergeToCell, in microseconds;
	// ServerTimestamp asks the server to assign it (SetCell only).
	Timestamp int64
	Value     []byte // SetCell; AddToCell's input; MergeToCell's state
	// StartTimestamp and EndTimestamp bound a DeleteFromColumn to
	// [StartTimestamp, EndTimestamp). EndTimestamp 0 means no upper bound,
	// as in the Cloud Bigtable API.
	StartTimestamp int64
	EndTimestamp   int64
}

// RowMutation is an atomic set of mutations to one row, applied in order.
type RowMutation struct {
	Row       []byte
	Mutations []Mutation
}

// Set returns a SetCell mutation.
func Set(family string, qualifier []byte, timestamp int64, value []byte) Mutation {
	return Mutation{Kind: SetCell, Family: family, Qualifier: qualifier, Timestamp: timestamp, Value: value}
}

// Add returns an AddToCell mutation of the Int64 input v.
func Add(family string, qualifier []byte, timestamp, v int64) Mutation {
	return Mutation{Kind: AddToCell, Family: family, Qualifier: qualifier, Timestamp: timestamp, Value: binary.BigEndian.AppendUint64(nil, uint64(v))}
}

// Merge returns a MergeToCell mutation of the aggregate state.
func Merge(family string, qualifier []byte, timestamp int64, state []byte) Mutation {
	return Mutation{Kind: MergeToCell, Family: family, Qualifier: qualifier, Timestamp: timestamp, Value: state}
}

// DeleteColumn returns a DeleteFromColumn mutation over [start, end); end 0
// means no upper bound.
func DeleteColumn(family string, qualifier []byte, start, end int64) Mutation {
	return Mutation{Kind: DeleteFromColumn, Family: family, Qualifier: qualifier, StartTimestamp: start, EndTimestamp: end}
}

// DeleteFamily returns a DeleteFromFamily mutation.
func DeleteFamily(family string) Mutation {
	return Mutation{Kind: DeleteFromFamily, Family: family}
}

// DeleteRow returns a DeleteFromRow mutation.
func DeleteRow() Mutation { return Mutation{Kind: DeleteFromRow} }

// AssignTimestamps replaces every ServerTimestamp in rm with now, in place.
func (rm *RowMutation) AssignTimestamps(now int64) {
	for i := range rm.Mutations {
		m := &rm.Mutations[i]
		if m.Kind == SetCell && m.Timestamp == ServerTimestamp {
			m.Timestamp = now
		}
	}
}

// Size is the approximate number of bytes rm occupies, used for memory
// accounting and batching.
func (rm *RowMutation) Size() int {
	n := len(rm.Row)
	for _, m := range rm.Mutations {
		n += 32 + len(m.Family) + len(m.Qualifier) + len(m.Value)
	}
	return n
}

// Clone returns a deep copy of rm.
func (rm RowMutation) Clone() RowMutation {
	out := RowMutation{Row: bytes.Clone(rm.Row), Mutations: make([]Mutation, len(rm.Mutations))}
	for i, m := range rm.Mutations {
		m.Qualifier = bytes.Clone(m.Qualifier)
		m.Value = bytes.Clone(m.Value)
		out.Mutations[i] = m
	}
	return out
}
