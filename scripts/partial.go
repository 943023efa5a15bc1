package scripts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/tabuladb/tabula/scripts/agg"
)

// Partial is the aggregate state of a program's tables over some rows: one
// run's, or several merged.
type Partial struct {
	prog   *Program
	tables []*agg.Table
}

// NewPartial returns an empty partial of p's tables, to merge into or to
// decode into.
func (p *Program) NewPartial() *Partial {
	specs := p.code.Specs()
	ts := make([]*agg.Table, len(specs))
	for i, s := range specs {
		ts[i] = agg.New(s)
	}
	return &Partial{prog: p, tables: ts}
}

// Merge adds o, a partial of the same program (or one with identical
// tables), into p. o may share state with p afterwards: do not use it.
func (p *Partial) Merge(o *Partial) error {
	if len(o.tables) != len(p.tables) {
		return fmt.Errorf("scripts: cannot merge a partial of %d tables into one of %d", len(o.tables), len(p.tables))
	}
	for i, t := range p.tables {
		if err := t.Merge(o.tables[i]); err != nil {
			return err
		}
	}
	return nil
}

// ErrCorruptPartial is returned (wrapped) by UnmarshalBinary for bytes that
// are not a partial of this program.
var ErrCorruptPartial = errors.New("scripts: corrupt partial")

const partialMagic = "TBP1"

// fingerprint identifies the program's tables, so that a partial of another
// program is refused.
func (p *Partial) fingerprint() uint64 {
	h := fnv.New64a()
	for _, s := range p.prog.code.Specs() {
		h.Write([]byte(s.Signature()))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// MarshalBinary encodes the partial for transport.
func (p *Partial) MarshalBinary() ([]byte, error) {
	b := []byte(partialMagic)
	b = binary.LittleEndian.AppendUint64(b, p.fingerprint())
	b = binary.AppendUvarint(b, uint64(len(p.tables)))
	for _, t := range p.tables {
		tb, err := t.MarshalBinary()
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(tb)))
		b = append(b, tb...)
	}
	return b, nil
}

// UnmarshalBinary replaces p's state with the encoded partial, which must
// come from the same program. It is safe on untrusted input.
func (p *Partial) UnmarshalBinary(data []byte) error {
	if len(data) < len(partialMagic)+8 || string(data[:len(partialMagic)]) != partialMagic {
		return fmt.Errorf("%w: bad header", ErrCorruptPartial)
	}
	rest := data[len(partialMagic):]
	if binary.LittleEndian.Uint64(rest) != p.fingerprint() {
		return fmt.Errorf("%w: partial of another program", ErrCorruptPartial)
	}
	rest = rest[8:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n != uint64(len(p.tables)) {
		return fmt.Errorf("%w: bad table count", ErrCorruptPartial)
	}
	rest = rest[k:]
	fresh := p.prog.NewPartial()
	for _, t := range fresh.tables {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return fmt.Errorf("%w: bad table length", ErrCorruptPartial)
		}
		if err := t.UnmarshalBinary(rest[k : k+int(l)]); err != nil {
			return fmt.Errorf("%w: table %s: %w", ErrCorruptPartial, t.Spec().Name, err)
		}
		rest = rest[k+int(l):]
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: trailing bytes", ErrCorruptPartial)
	}
	p.tables = fresh.tables
	return nil
}

// Result finalizes the partial.
func (p *Partial) Result() *Result {
	r := &Result{}
	for _, t := range p.tables {
		r.Tables = append(r.Tables, newTable(t))
	}
	return r
}
