package tabletserver

import (
	"fmt"
	"unicode/utf8"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/internal/bufpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one falls back to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ServerCodec is the gRPC server option that encodes ReadRowsResponses
// without protobuf's generic marshaller; every other message, and a
// response the fast path does not handle, goes through gRPC's standard
// proto codec. A tablet server's reads spend a fifth of their CPU in that
// marshaller: sizing each chunk by reflection, then copying every value
// into one buffer.
//
// The fast path writes each chunk's fields and values into one buffer and
// hands values of valueAliasBytes or more to gRPC as they are, without
// copying them: the transport copies them once, into its frames. This is safe
// because the values a DataService sends are never modified (they alias
// memtable arenas and SSTable blocks, see storage/tablet), and gRPC is done
// with a message's buffers once its frames are written.
//
// The bytes are those proto.Marshal produces (field order, proto3 presence);
// TestReadRowsCodecMatchesProto checks them against it.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(readRowsCodec{}) }

// Codec is the codec ServerCodec installs, for a server that needs a codec
// of its own around it (the cluster's proxy of unknown services).
func Codec() encoding.CodecV2 { return readRowsCodec{} }

type readRowsCodec struct{}

// valueAliasBytes is the size from which a value is handed to gRPC as its
// own buffer instead of being copied into the header buffer. Up to an
// HTTP/2 frame, copying is cheaper: every buffer of a message costs gRPC's
// sender a slice header, a step of its reader (Peek, Discard, Len) and a
// write into its frame buffer, and a message of aliased values had two
// per cell. A scan of 1 KB values spent 0.122 server CPU-s per 60k rows
// aliasing values from 256 bytes up, 0.100 copying those under 4 KiB
// (and 0.098–0.107 under 64 KiB); the SSTable blocks the values come from
// are in the CPU's cache by then (storage/sstable's warm).
const valueAliasBytes = 16 << 10

func fallbackCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (readRowsCodec) Name() string { return "proto" }

func (readRowsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *EncodedReadRows:
		// The data is freed when this returns: keep a reference (one
		// buffer, not a copy, when the message came in one).
		m.Release()
		m.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
		return nil
	case *RawFrame:
		m.Release()
		m.bufs = mem.BufferSlice{data.MaterializeToBuffer(mem.DefaultBufferPool())}
		return nil
	case *bigtablepb.MutateRowsRequest:
		return unmarshalMutateRows(data, m) // mutatecodec.go
	case *bigtablepb.MutateRowRequest:
		return unmarshalMutateRow(data, m) // mutatecodec.go
	case *bigtablepb.SessionRequest: // sessioncodec.go
		return unmarshalSessionRequest(data, m)
	case *bigtablepb.ReadRowsRequest: // request_decode.go
		if len(data) == 1 {
			return unmarshalReadRowsRequest(data[0].ReadOnlyData(), m)
		}
		return unmarshalReadRowsRequest(bufpool.Materialize(data), m)
	}
	return fallbackCodec().Unmarshal(data, v)
}

func (readRowsCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *bigtablepb.ReadRowsResponse:
		if fastEncodable(m) {
			return encodeReadRows(m)
		}
	case *bigtablepb.SessionResponse: // sessioncodec.go
		if b, ok := marshalSessionResponse(m); ok {
			return b, nil
		}
	case *RawFrame:
		if m.bufs == nil {
			return nil, fmt.Errorf("tabletserver: RawFrame sent twice or never set")
		}
		b := m.bufs
		m.bufs = nil
		return b, nil
	case *EncodedReadRows:
		if m.buf == nil {
			return nil, fmt.Errorf("tabletserver: EncodedReadRows sent twice or never received")
		}
		// gRPC frees the buffers it is given once written: the
		// message's reference goes with them.
		b := m.buf
		m.buf = nil
		return mem.BufferSlice{b}, nil
	}
	return fallbackCodec().Marshal(v)
}

// EncodedReadRows is one google.bigtable.v2.ReadRowsResponse in its wire
// form: what a gateway relays from a tablet's owner to its caller without
// decoding the cells and encoding them again. Receive it with RelayCodec
// on a client stream (RecvMsg); send it with SendMsg on a server stream of
// a server using ServerCodec or Codec, which hand its bytes to gRPC as they
// are. Sending gives the bytes away (Bytes is empty afterwards); a message
// that is not sent must be Released. Not safe for concurrent use.
type EncodedReadRows struct{ buf mem.Buffer }

// Bytes returns the message's wire form, valid until it is sent, received
// into again or released; nil when it holds nothing.
func (e *EncodedReadRows) Bytes() []byte {
	if e.buf == nil {
		return nil
	}
	return e.buf.ReadOnlyData()
}

// Release frees the bytes held, if any.
func (e *EncodedReadRows) Release() {
	if e.buf != nil {
		e.buf.Free()
		e.buf = nil
	}
}

// RawFrame is a message of an internal stream whose two ends encode it
// themselves (the gateway's point-read stream): the codecs of this package
// receive it as one buffer and send its buffers as they are. Sending gives
// them away; a frame that is not sent must be Released.
type RawFrame struct{ bufs mem.BufferSlice }

// SetFrame makes f the concatenation of parts, taking their references.
func (f *RawFrame) SetFrame(parts mem.BufferSlice) {
	f.Release()
	f.bufs = parts
}

// Bytes returns a received frame's bytes, valid until it is released.
func (f *RawFrame) Bytes() []byte {
	if len(f.bufs) == 0 {
		return nil
	}
	return f.bufs[0].ReadOnlyData()
}

// Release frees the frame's buffers, if any.
func (f *RawFrame) Release() {
	if f.bufs != nil {
		f.bufs.Free()
		f.bufs = nil
	}
}

// IsRaw reports whether v is a message the codecs of this package pass
// through as bytes (EncodedReadRows, RawFrame), for a codec of its own
// around them.
func IsRaw(v any) bool {
	switch v.(type) {
	case *EncodedReadRows, *RawFrame:
		return true
	}
	return false
}

// NewEncodedReadRows returns an EncodedReadRows holding a copy of b, the
// wire form of a ReadRowsResponse.
func NewEncodedReadRows(b []byte) *EncodedReadRows {
	return &EncodedReadRows{buf: mem.Copy(b, mem.DefaultBufferPool())}
}

// MarshalReadRows encodes resp as the server codec sends it (values of
// valueAliasBytes or more not copied: resp's values must stay unmodified
// until the buffers are freed).
func MarshalReadRows(resp *bigtablepb.ReadRowsResponse) (mem.BufferSlice, error) {
	return readRowsCodec{}.Marshal(resp)
}

// RelayCodec is the client codec (grpc.ForceCodecV2) of a stream whose
// ReadRowsResponses are received as EncodedReadRows; every other message
// is protobuf.
func RelayCodec() encoding.CodecV2 { return readRowsCodec{} }

// fastEncodable reports whether r holds only what encodeReadRows writes
// as proto.Marshal would: no unknown fields anywhere (a relayed response
// from a newer server could carry some) and only valid UTF-8 in string
// fields (which proto.Marshal refuses).
func fastEncodable(r *bigtablepb.ReadRowsResponse) bool {
	if len(r.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, c := range r.Chunks {
		if c == nil || len(c.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
		if c.FamilyName != nil && (len(c.FamilyName.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(c.FamilyName.Value)) {
			return false
		}
		for _, l := range c.Labels {
			if !utf8.ValidString(l) {
				return false
			}
		}
		if c.Qualifier != nil && len(c.Qualifier.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// Field numbers of google.bigtable.v2.ReadRowsResponse and its CellChunk.
const (
	fieldChunks            = 1
	fieldLastScannedRowKey = 2
	fieldRequestStats      = 3

	fieldRowKey          = 1
	fieldFamilyName      = 2
	fieldQualifier       = 3
	fieldTimestampMicros = 4
	fieldLabels          = 5
	fieldValue           = 6
	fieldValueSize       = 7
	fieldResetRow        = 8
	fieldCommitRow       = 9

	fieldWrapperValue = 1 // StringValue.value, BytesValue.value
)

// bytesFieldSize is the encoded size of a length-delimited field of n bytes.
func bytesFieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// wrapperSize is the size of a StringValue or BytesValue holding n bytes
// (proto3: an empty value is omitted).
func wrapperSize(n int) int {
	if n == 0 {
		return 0
	}
	return bytesFieldSize(fieldWrapperValue, n)
}

// encodeReadRows encodes r as proto.Marshal would, values of
// valueAliasBytes or more as buffers of their own (wireResponse).
func encodeReadRows(r *bigtablepb.ReadRowsResponse) (mem.BufferSlice, error) {
	// The header buffer: everything but the aliased values.
	est := 16 + len(r.LastScannedRowKey)
	for _, c := range r.Chunks {
		f := chunkFieldsOf(c)
		est += 24 + f.size()
		if len(c.Value) >= valueAliasBytes {
			est -= len(c.Value)
		}
	}
	if r.RequestStats != nil {
		est += bytesFieldSize(fieldRequestStats, proto.Size(r.RequestStats))
	}
	var w wireResponse
	w.start(est)
	for _, c := range r.Chunks {
		f := chunkFieldsOf(c)
		w.chunk(&f)
	}
	return w.finish(r.LastScannedRowKey, r.RequestStats)
}

// sameArray reports whether a and b share their backing array's start.
func sameArray(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][0] == &b[:cap(b)][0]
}
