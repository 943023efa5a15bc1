package beamio

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/storage/cell"
)

// The element coders: uvarint-length-prefixed byte strings and varints,
// field by field. They are what crosses between stages and to the runner,
// so they are compact and allocate once per field.

var errCorrupt = errors.New("beamio: corrupt element encoding")

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: %s", errCorrupt, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: %s", errCorrupt, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s length %d beyond the %d bytes left", errCorrupt, what, n, len(d.b))
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b)
	d.b = d.b[n:]
	return v
}

// count reads a count of items each at least min bytes long, refusing
// counts the remaining bytes cannot hold (no huge allocation from a
// corrupt length).
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.err = fmt.Errorf("%w: %d %s in %d bytes", errCorrupt, n, what, len(d.b))
	}
	return int(n)
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return d.err
}

func encodeRow(r Row) []byte {
	n := len(r.Key) + 8
	for _, c := range r.Cells {
		n += len(c.Family) + len(c.Qualifier) + len(c.Value) + 20
	}
	b := appendBytes(make([]byte, 0, n), r.Key)
	b = binary.AppendUvarint(b, uint64(len(r.Cells)))
	for _, c := range r.Cells {
		b = appendBytes(b, []byte(c.Family))
		b = appendBytes(b, c.Qualifier)
		b = binary.AppendVarint(b, c.Timestamp)
		b = appendBytes(b, c.Value)
	}
	return b
}

func decodeRow(b []byte) (Row, error) {
	d := decoder{b: b}
	r := Row{Key: d.bytes("row key")}
	n := d.count("cells", 4)
	if d.err == nil && n > 0 {
		r.Cells = make([]cell.Cell, n)
		for i := range r.Cells {
			r.Cells[i] = cell.Cell{Family: string(d.bytes("family")), Qualifier: d.bytes("qualifier"),
				Timestamp: d.varint("timestamp"), Value: d.bytes("value")}
		}
	}
	return r, d.end()
}

func appendRowMutation(b []byte, m RowMutation) []byte {
	b = appendBytes(b, m.Row)
	b = binary.AppendUvarint(b, uint64(len(m.Mutations)))
	for _, mu := range m.Mutations {
		b = append(b, byte(mu.Kind))
		b = appendBytes(b, []byte(mu.Family))
		b = appendBytes(b, mu.Qualifier)
		b = binary.AppendVarint(b, mu.Timestamp)
		b = appendBytes(b, mu.Value)
		b = binary.AppendVarint(b, mu.StartTimestamp)
		b = binary.AppendVarint(b, mu.EndTimestamp)
	}
	return b
}

func (d *decoder) rowMutation() RowMutation {
	m := RowMutation{Row: d.bytes("row key")}
	n := d.count("mutations", 7)
	if d.err == nil && n > 0 {
		m.Mutations = make([]cell.Mutation, n)
		for i := range m.Mutations {
			kind := d.uvarintByte("kind")
			m.Mutations[i] = cell.Mutation{Kind: cell.MutationKind(kind), Family: string(d.bytes("family")), Qualifier: d.bytes("qualifier"),
				Timestamp: d.varint("timestamp"), Value: d.bytes("value"), StartTimestamp: d.varint("start timestamp"), EndTimestamp: d.varint("end timestamp")}
		}
	}
	return m
}

func (d *decoder) uvarintByte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = fmt.Errorf("%w: %s", errCorrupt, what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func encodeRowMutation(m RowMutation) []byte {
	return appendRowMutation(nil, m)
}

func decodeRowMutation(b []byte) (RowMutation, error) {
	d := decoder{b: b}
	m := d.rowMutation()
	return m, d.end()
}

func encodeFailed(f FailedMutation) []byte {
	b := appendRowMutation(nil, f.Mutation)
	b = binary.AppendUvarint(b, uint64(f.Code))
	return appendBytes(b, []byte(f.Message))
}

func decodeFailed(b []byte) (FailedMutation, error) {
	d := decoder{b: b}
	f := FailedMutation{Mutation: d.rowMutation()}
	f.Code = uint32(d.uvarint("code"))
	f.Message = string(d.bytes("message"))
	return f, d.end()
}
