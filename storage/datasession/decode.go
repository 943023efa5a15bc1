package datasession

import (
	"unicode/utf8"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/tabletserver"
)

// decodeCallFast decodes a call's payload — a TableRequest or an
// AuthorizedViewRequest, which number their read_row and mutate_row alike
// — without protobuf's generic decoder: it allocates each oneof's wrapper
// by reflection, a sixth of a session's point read. It reports false for
// anything it does not expect (another field, a malformed one), which the
// generic decoder then takes, so that both accept and refuse the same
// payloads. The decoded messages alias b.
func decodeCallFast(b []byte) (*bigtablepb.SessionReadRowRequest, *bigtablepb.SessionMutateRowRequest, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return nil, nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, nil, false // not exactly one field
	}
	switch num {
	case 1:
		r, ok := decodeReadRow(v)
		return r, nil, ok
	case 2:
		r, ok := decodeMutateRow(v)
		return nil, r, ok
	}
	return nil, nil, false
}

// decodeReadRow decodes a SessionReadRowRequest: key, filter.
func decodeReadRow(b []byte) (*bigtablepb.SessionReadRowRequest, bool) {
	r := &bigtablepb.SessionReadRowRequest{}
	seen := [3]bool{}
	for len(b) > 0 {
		num, v, rest, ok := tabletserver.NextBytesField(b)
		if !ok || num < 1 || num > 2 || seen[num] {
			return nil, false
		}
		seen[num], b = true, rest
		if num == 1 {
			r.Key = v
			continue
		}
		// Shared with the other calls and requests sending the same
		// filter: nothing modifies it.
		f, ok := tabletserver.SharedFilter(v)
		if !ok {
			return nil, false
		}
		r.Filter = f
	}
	return r, true
}

// decodeMutateRow decodes a SessionMutateRowRequest: key, mutations.
func decodeMutateRow(b []byte) (*bigtablepb.SessionMutateRowRequest, bool) {
	r := &bigtablepb.SessionMutateRowRequest{}
	keySeen := false
	for len(b) > 0 {
		num, v, rest, ok := tabletserver.NextBytesField(b)
		if !ok {
			return nil, false
		}
		b = rest
		switch {
		case num == 1 && !keySeen:
			r.Key, keySeen = v, true
		case num == 2:
			mu := &bigtablepb.Mutation{}
			if proto.Unmarshal(v, mu) != nil {
				return nil, false
			}
			r.Mutations = append(r.Mutations, mu)
		default:
			return nil, false
		}
	}
	return r, true
}

// Field numbers of the read answer: TableResponse and
// AuthorizedViewResponse (read_row), SessionReadRowResponse (row), and
// Row, Family, Column and Cell.
const (
	respReadRow    = 1
	readRowRespRow = 1
	rowKey         = 1
	rowFamilies    = 2
	familyName     = 1
	familyColumns  = 2
	columnQual     = 1
	columnCells    = 2
	cellTimestamp  = 1
	cellValue      = 2
	cellLabels     = 3
)

// encodeReadAnswer encodes the answer of a ReadRow that found row (nil:
// none) — a TableResponse or an AuthorizedViewResponse, which number
// read_row alike — without protobuf's generic encoder, which sized and
// wrote it field by field through reflection. It reports false for a row
// it cannot encode as proto.Marshal would (a string that is not UTF-8,
// which proto.Marshal refuses).
func encodeReadAnswer(row *bigtablepb.Row) ([]byte, bool) {
	inner := 0
	if row != nil {
		n, ok := rowSize(row)
		if !ok {
			return nil, false
		}
		inner = fieldSize(readRowRespRow, n)
	}
	b := make([]byte, 0, fieldSize(respReadRow, inner))
	b = protowire.AppendTag(b, respReadRow, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	if row == nil {
		return b, true
	}
	n, _ := rowSize(row)
	b = protowire.AppendTag(b, readRowRespRow, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendBytesField(b, rowKey, row.Key)
	for _, f := range row.Families {
		b = protowire.AppendTag(b, rowFamilies, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(familySize(f)))
		b = appendBytesField(b, familyName, []byte(f.Name))
		for _, c := range f.Columns {
			b = protowire.AppendTag(b, familyColumns, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(columnSize(c)))
			b = appendBytesField(b, columnQual, c.Qualifier)
			for _, cell := range c.Cells {
				b = protowire.AppendTag(b, columnCells, protowire.BytesType)
				b = protowire.AppendVarint(b, uint64(cellSize(cell)))
				if cell.TimestampMicros != 0 {
					b = protowire.AppendTag(b, cellTimestamp, protowire.VarintType)
					b = protowire.AppendVarint(b, uint64(cell.TimestampMicros))
				}
				b = appendBytesField(b, cellValue, cell.Value)
				for _, l := range cell.Labels {
					b = protowire.AppendTag(b, cellLabels, protowire.BytesType)
					b = protowire.AppendString(b, l)
				}
			}
		}
	}
	return b, true
}

// fieldSize is the size of a length-delimited field holding n bytes.
func fieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendBytesField appends a bytes or string field, left out when empty
// (proto3).
func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func optionalSize(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return fieldSize(num, n)
}

func rowSize(r *bigtablepb.Row) (int, bool) {
	n := optionalSize(rowKey, len(r.Key))
	for _, f := range r.Families {
		if !utf8.ValidString(f.Name) {
			return 0, false
		}
		for _, c := range f.Columns {
			for _, cell := range c.Cells {
				for _, l := range cell.Labels {
					if !utf8.ValidString(l) {
						return 0, false
					}
				}
			}
		}
		n += fieldSize(rowFamilies, familySize(f))
	}
	return n, true
}

func familySize(f *bigtablepb.Family) int {
	n := optionalSize(familyName, len(f.Name))
	for _, c := range f.Columns {
		n += fieldSize(familyColumns, columnSize(c))
	}
	return n
}

func columnSize(c *bigtablepb.Column) int {
	n := optionalSize(columnQual, len(c.Qualifier))
	for _, cell := range c.Cells {
		n += fieldSize(columnCells, cellSize(cell))
	}
	return n
}

func cellSize(c *bigtablepb.Cell) int {
	n := optionalSize(cellValue, len(c.Value))
	if c.TimestampMicros != 0 {
		n += protowire.SizeTag(cellTimestamp) + protowire.SizeVarint(uint64(c.TimestampMicros))
	}
	for _, l := range c.Labels {
		n += fieldSize(cellLabels, len(l))
	}
	return n
}
