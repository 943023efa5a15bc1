package datasession

import (
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
		num, v, rest, ok := bytesField(b)
		if !ok || num < 1 || num > 2 || seen[num] {
			return nil, false
		}
		seen[num], b = true, rest
		if num == 1 {
			r.Key = v
			continue
		}
		r.Filter = &bigtablepb.RowFilter{}
		if proto.Unmarshal(v, r.Filter) != nil {
			return nil, false
		}
	}
	return r, true
}

// decodeMutateRow decodes a SessionMutateRowRequest: key, mutations.
func decodeMutateRow(b []byte) (*bigtablepb.SessionMutateRowRequest, bool) {
	r := &bigtablepb.SessionMutateRowRequest{}
	keySeen := false
	for len(b) > 0 {
		num, v, rest, ok := bytesField(b)
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

// bytesField consumes one length-delimited field of b.
func bytesField(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return 0, nil, nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 {
		return 0, nil, nil, false
	}
	return num, v, b[n+m:], true
}
