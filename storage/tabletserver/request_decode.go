package tabletserver

import (
	"sync"
	"unicode/utf8"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A point read's request is decoded here rather than by protobuf's
// generic unmarshaller, which spent a tenth of the server's CPU of a
// ReadRow on it: its filter — a chain of nested oneofs, the same few
// bytes from every reader — was decoded by reflection into half a dozen
// fresh messages per request. The fields of ReadRowsRequest and RowSet
// are read directly; a filter is decoded once per distinct encoding and
// shared (sharedFilter). A request this does not handle exactly as
// proto.Unmarshal would (unknown or repeated message fields, wrong wire
// types, invalid UTF-8, anything malformed) is left to proto.Unmarshal.

// Field numbers of google.bigtable.v2.ReadRowsRequest and RowSet.
const (
	reqTableName            = 1
	reqRows                 = 2
	reqFilter               = 3
	reqRowsLimit            = 4
	reqAppProfileID         = 5
	reqRequestStatsView     = 6
	reqReversed             = 7
	reqAuthorizedViewName   = 9
	reqMaterializedViewName = 11

	rowSetRowKeys   = 1
	rowSetRowRanges = 2
)

// UnmarshalReadRowsRequest decodes b into req (reset first) as
// proto.Unmarshal does, copying what it keeps of b, as the data API's
// codec decodes a caller's request. req's filter may be shared with other
// requests decoded here (SharedFilter): it must not be modified. For
// requests that arrive other than as a gRPC message of the data API (the
// gateway's forwarded point reads).
func UnmarshalReadRowsRequest(b []byte, req *bigtablepb.ReadRowsRequest) error {
	return unmarshalReadRowsRequest(b, req)
}

// unmarshalReadRowsRequest is UnmarshalReadRowsRequest.
func unmarshalReadRowsRequest(b []byte, req *bigtablepb.ReadRowsRequest) error {
	proto.Reset(req)
	if decodeReadRowsRequest(b, req) {
		return nil
	}
	proto.Reset(req)
	return proto.Unmarshal(b, req)
}

// decodeReadRowsRequest is the direct decoding; false when b is not a
// request it decodes exactly (req is then partly set).
func decodeReadRowsRequest(b []byte, req *bigtablepb.ReadRowsRequest) bool {
	var filter []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case reqTableName, reqAppProfileID, reqAuthorizedViewName, reqMaterializedViewName:
				if !utf8.Valid(v) {
					return false
				}
				s := string(v)
				switch num {
				case reqTableName:
					req.TableName = s
				case reqAppProfileID:
					req.AppProfileId = s
				case reqAuthorizedViewName:
					req.AuthorizedViewName = s
				default:
					req.MaterializedViewName = s
				}
			case reqRows:
				// A message field seen twice is merged: a RowSet's
				// lists are appended to, which decodeRowSet does.
				if req.Rows == nil {
					req.Rows = &bigtablepb.RowSet{}
				}
				if !decodeRowSet(v, req.Rows) {
					return false
				}
			case reqFilter:
				if filter != nil {
					return false // merging two filters: proto.Unmarshal's business
				}
				filter = v
				if filter == nil {
					filter = []byte{}
				}
			default:
				return false
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case reqRowsLimit:
				req.RowsLimit = int64(v)
			case reqRequestStatsView:
				req.RequestStatsView = bigtablepb.ReadRowsRequest_RequestStatsView(int32(v))
			case reqReversed:
				req.Reversed = v != 0
			default:
				return false
			}
		default:
			return false
		}
	}
	if filter != nil {
		f, ok := sharedFilter(filter)
		if !ok {
			return false
		}
		req.Filter = f
	}
	return true
}

// decodeRowSet appends the row keys and ranges encoded in b to rs.
func decodeRowSet(b []byte, rs *bigtablepb.RowSet) bool {
	for len(b) > 0 {
		num, v, rest, ok := NextBytesField(b)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case rowSetRowKeys:
			// Copied: the request's buffer is gRPC's, recycled once
			// decoded. (proto.Unmarshal keeps an empty key non-nil.)
			rs.RowKeys = append(rs.RowKeys, append(make([]byte, 0, len(v)), v...))
		case rowSetRowRanges:
			r := &bigtablepb.RowRange{}
			if err := proto.Unmarshal(v, r); err != nil {
				return false
			}
			rs.RowRanges = append(rs.RowRanges, r)
		default:
			return false
		}
	}
	return true
}

// sharedFilters maps a filter's encoding to its decoded message, shared
// by every request that sends those bytes (readers send the same few
// filters with every call). Bounded: when full it starts over.
var sharedFilters = struct {
	sync.RWMutex
	m map[string]*bigtablepb.RowFilter
	// enc maps each filter of m back to its encoding: the filter cache
	// finds a shared filter's compiled form by it without encoding the
	// filter again (filterCache.compile).
	enc map[*bigtablepb.RowFilter]string
}{m: map[string]*bigtablepb.RowFilter{}, enc: map[*bigtablepb.RowFilter]string{}}

const (
	sharedFiltersMax    = 1024
	sharedFilterMaxSize = 4 << 10 // larger filters are decoded per request
)

// SharedFilter returns the decoded filter of encoding b, shared with every
// request that sends the same bytes (decoded once, kept in a bounded
// table): callers must not modify it. False when b does not decode. For
// the decoders of requests that carry filters (point reads here, the
// sessions' calls in storage/datasession): a filter is a chain of nested
// oneofs, which protobuf's generic decoder allocates by reflection.
func SharedFilter(b []byte) (*bigtablepb.RowFilter, bool) { return sharedFilter(b) }

// sharedFilter is SharedFilter.
func sharedFilter(b []byte) (*bigtablepb.RowFilter, bool) {
	if len(b) > sharedFilterMaxSize {
		f := &bigtablepb.RowFilter{}
		return f, proto.Unmarshal(b, f) == nil
	}
	sharedFilters.RLock()
	f := sharedFilters.m[string(b)]
	sharedFilters.RUnlock()
	if f != nil {
		return f, true
	}
	f = &bigtablepb.RowFilter{}
	if err := proto.Unmarshal(b, f); err != nil {
		return nil, false
	}
	sharedFilters.Lock()
	if len(sharedFilters.m) >= sharedFiltersMax {
		sharedFilters.m = map[string]*bigtablepb.RowFilter{}
		sharedFilters.enc = map[*bigtablepb.RowFilter]string{}
	}
	enc := string(b)
	sharedFilters.m[enc] = f
	sharedFilters.enc[f] = enc
	sharedFilters.Unlock()
	return f, true
}

// sharedEncoding returns the encoding f was decoded from when f is a
// shared filter (sharedFilter's), false otherwise.
func sharedEncoding(f *bigtablepb.RowFilter) (string, bool) {
	sharedFilters.RLock()
	enc, ok := sharedFilters.enc[f]
	sharedFilters.RUnlock()
	return enc, ok
}
