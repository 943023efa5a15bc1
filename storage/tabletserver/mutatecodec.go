package tabletserver

import (
	"unicode/utf8"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/internal/bufpool"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// unmarshalMutateRows decodes a MutateRowsRequest — the body of every bulk
// write — without protobuf's generic decoder, which copies every row key
// and value into an allocation of its own and allocates each entry's five
// messages one by one: a fifth of a bulk write's server CPU went to that
// decoding and to collecting its garbage.
//
// The message is copied once, into a buffer of its own that the garbage
// collector owns (gRPC's receive buffers go back to its pool when this
// returns), and the row keys, qualifiers and values of the decoded message
// alias that buffer: nothing writes to it afterwards, and it lives as long
// as anything refers to it, so a value stays valid however long the write
// path keeps it. The entries and their messages are carved from one slice
// per type.
//
// The fast path decodes what bulk writes send: the request's table,
// authorized view and app profile names and entries of row keys and
// SetCell mutations. Anything else — another kind of mutation, an
// idempotency token or timestamp origin, an unknown field, a field repeated
// where protobuf would merge, a string that is not UTF-8, a malformed
// message — goes to proto.Unmarshal from scratch, which decodes it (or
// fails) exactly as before. TestMutateRowsDecoderMatchesProto checks the
// result against proto.Unmarshal.
func unmarshalMutateRows(data mem.BufferSlice, m *bigtablepb.MutateRowsRequest) error {
	buf := bufpool.Materialize(data) // uncleared: every byte is copied over
	if decodeMutateRows(buf, m) {
		return nil
	}
	proto.Reset(m)
	return proto.Unmarshal(buf, m)
}

// decodeMutateRows fills m (reset first) from b, aliasing b, and reports
// whether the fast path could decode it; when it returns false m's content
// is undefined.
func decodeMutateRows(b []byte, m *bigtablepb.MutateRowsRequest) bool {
	proto.Reset(m)
	nEntries, nMuts, ok := countMutateRows(b)
	if !ok || nEntries > maxFastMutations || nMuts > maxFastMutations {
		return false
	}
	s := mutateRowsSlabs{
		entries:  make([]bigtablepb.MutateRowsRequest_Entry, nEntries),
		muts:     make([]bigtablepb.Mutation, nMuts),
		mutPtrs:  make([]*bigtablepb.Mutation, nMuts),
		oneofs:   make([]bigtablepb.Mutation_SetCell_, nMuts),
		setCells: make([]bigtablepb.Mutation_SetCell, nMuts),
	}
	if nEntries > 0 {
		m.Entries = make([]*bigtablepb.MutateRowsRequest_Entry, 0, nEntries)
	}
	for len(b) > 0 {
		num, v, rest, ok := NextBytesField(b)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case 1, 3, 5:
			if !utf8.Valid(v) {
				return false
			}
			str := string(v)
			switch num {
			case 1:
				m.TableName = str
			case 3:
				m.AppProfileId = str
			default:
				m.AuthorizedViewName = str
			}
		case 2:
			e := &s.entries[len(m.Entries)]
			if !s.decodeEntry(v, e) {
				return false
			}
			m.Entries = append(m.Entries, e)
		default:
			return false
		}
	}
	return true
}

// maxFastMutations bounds the entries and the mutations the fast path
// allocates its slabs for: Cloud Bigtable's (and the default Limits') limit
// of a request's mutations. A request past it — which the server refuses
// anyway — goes to proto.Unmarshal, so that a request of a quarter
// gigabyte of empty mutations cannot make the slabs take many times its
// size before it is refused.
const maxFastMutations = 100_000

// countMutateRows returns the entries of a MutateRowsRequest and their
// mutations, for sizing the slabs; false if the message is not one the
// fast path takes (checked again, field by field, when decoding).
func countMutateRows(b []byte) (entries, muts int, ok bool) {
	for len(b) > 0 {
		num, v, rest, ok := NextBytesField(b)
		if !ok {
			return 0, 0, false
		}
		b = rest
		if num != 2 {
			continue
		}
		entries++
		for len(v) > 0 {
			num, _, rest, ok := NextBytesField(v)
			if !ok {
				return 0, 0, false
			}
			v = rest
			if num == 2 {
				muts++
			}
		}
	}
	return entries, muts, true
}

// mutateRowsSlabs holds the messages of one request, allocated together;
// each slice has room for all of them (countMutateRows).
type mutateRowsSlabs struct {
	entries  []bigtablepb.MutateRowsRequest_Entry
	muts     []bigtablepb.Mutation
	mutPtrs  []*bigtablepb.Mutation
	oneofs   []bigtablepb.Mutation_SetCell_
	setCells []bigtablepb.Mutation_SetCell
	used     int // mutations taken from the slabs
	// family and familyBytes are the last family name decoded: the
	// mutations of a request mostly name the same few families, and each
	// gets the same string instead of an allocation of its own.
	family      string
	familyBytes []byte
}

// decodeEntry decodes one MutateRowsRequest.Entry into e.
func (s *mutateRowsSlabs) decodeEntry(b []byte, e *bigtablepb.MutateRowsRequest_Entry) bool {
	first := s.used
	for len(b) > 0 {
		num, v, rest, ok := NextBytesField(b)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case 1:
			e.RowKey = v
		case 2:
			i := s.used
			s.used++
			mu := &s.muts[i]
			if !s.decodeMutation(v, mu, i) {
				return false
			}
			s.mutPtrs[i] = mu
		default:
			return false
		}
	}
	if s.used > first {
		e.Mutations = s.mutPtrs[first:s.used:s.used]
	}
	return true
}

// decodeMutation decodes a Mutation holding exactly one SetCell into mu,
// with the i-th oneof wrapper and SetCell of the slabs.
func (s *mutateRowsSlabs) decodeMutation(b []byte, mu *bigtablepb.Mutation, i int) bool {
	seen := false
	for len(b) > 0 {
		num, v, rest, ok := NextBytesField(b)
		if !ok || num != 1 || seen {
			// Another kind of mutation, a second SetCell (protobuf
			// merges the two) or another field.
			return false
		}
		b = rest
		sc := &s.setCells[i]
		if !s.decodeSetCell(v, sc) {
			return false
		}
		w := &s.oneofs[i]
		w.SetCell = sc
		mu.Mutation = w
		seen = true
	}
	// A Mutation with no field set decodes as one with no mutation,
	// which the fast path leaves to protobuf for simplicity.
	return seen
}

// decodeSetCell decodes a Mutation.SetCell into sc. Repeated scalar fields
// take the last value, as protobuf does.
func (s *mutateRowsSlabs) decodeSetCell(b []byte, sc *bigtablepb.Mutation_SetCell) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == 3 {
			if typ != protowire.VarintType {
				return false
			}
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			sc.TimestampMicros = int64(x)
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 1:
			if string(v) != string(s.familyBytes) || s.familyBytes == nil {
				if !utf8.Valid(v) {
					return false
				}
				s.family, s.familyBytes = string(v), v
			}
			sc.FamilyName = s.family
		case 2:
			sc.ColumnQualifier = v
		case 4:
			sc.Value = v
		default:
			return false
		}
	}
	return true
}

// NextBytesField splits off the first field of b, a message's encoding:
// its number, its bytes and what follows; ok is false unless b starts
// with a well-formed length-delimited field (the only wire type the fast
// decoders accept where they use it: this package's and
// storage/datasession's).
func NextBytesField(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
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

// unmarshalMutateRow decodes a MutateRowRequest — every single-row write —
// as unmarshalMutateRows decodes a bulk write's: the message copied once
// into a buffer the garbage collector owns, which the row key, qualifiers
// and values alias; the request's names and SetCell mutations decoded
// directly (protobuf's generic decoder allocates each Mutation's oneof
// wrapper by reflection: 7% of a single-row write's server CPU); anything
// else left to proto.Unmarshal. TestMutateRowDecoderMatchesProto checks
// it against proto.Unmarshal.
func unmarshalMutateRow(data mem.BufferSlice, m *bigtablepb.MutateRowRequest) error {
	buf := bufpool.Materialize(data)
	if decodeMutateRow(buf, m) {
		return nil
	}
	proto.Reset(m)
	return proto.Unmarshal(buf, m)
}

// decodeMutateRow fills m (reset first) from b, aliasing b, and reports
// whether the fast path could decode it.
func decodeMutateRow(b []byte, m *bigtablepb.MutateRowRequest) bool {
	proto.Reset(m)
	nMuts := 0
	for rest := b; len(rest) > 0; {
		num, _, next, ok := NextBytesField(rest)
		if !ok {
			return false
		}
		rest = next
		if num == 3 {
			nMuts++
		}
	}
	if nMuts > maxFastMutations {
		return false
	}
	s := mutateRowsSlabs{
		muts:     make([]bigtablepb.Mutation, nMuts),
		mutPtrs:  make([]*bigtablepb.Mutation, nMuts),
		oneofs:   make([]bigtablepb.Mutation_SetCell_, nMuts),
		setCells: make([]bigtablepb.Mutation_SetCell, nMuts),
	}
	for len(b) > 0 {
		num, v, rest, _ := NextBytesField(b) // well-formed: counted above
		b = rest
		switch num {
		case 1, 4, 6:
			if !utf8.Valid(v) {
				return false
			}
			switch num {
			case 1:
				m.TableName = string(v)
			case 4:
				m.AppProfileId = string(v)
			default:
				m.AuthorizedViewName = string(v)
			}
		case 2:
			m.RowKey = v
		case 3:
			i := s.used
			s.used++
			if !s.decodeMutation(v, &s.muts[i], i) {
				return false
			}
			s.mutPtrs[i] = &s.muts[i]
		default:
			return false
		}
	}
	if s.used > 0 {
		m.Mutations = s.mutPtrs[:s.used:s.used]
	}
	return true
}
