package tabletserver

import (
	"unicode/utf8"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/tabuladb/tabula/internal/bufpool"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The messages of the official clients' sessions (storage/datasession)
// that carry their calls — a SessionRequest with a VirtualRpc, a
// SessionResponse with its answer — are decoded and encoded here rather
// than by protobuf's generic code, which allocates a oneof's wrapper by
// reflection and sized and wrote each answer field by field: together a
// tenth of the server's CPU of a point read on a session. Anything else
// (the session's opening and closing, unknown or repeated fields,
// malformed bytes) goes to the generic code, which decodes it exactly as
// before; TestSessionCodecMatchesProto checks both ways.

// Field numbers of the session messages handled here.
const (
	sessReqVirtualRPC = 3 // SessionRequest.virtual_rpc

	vrpcReqRPCID    = 1 // VirtualRpcRequest
	vrpcReqDeadline = 2
	vrpcReqMetadata = 3
	vrpcReqPayload  = 4

	vrpcMetaAttempt      = 1 // VirtualRpcRequest.Metadata
	vrpcMetaAttemptStart = 2
	vrpcMetaTraceparent  = 3

	sessRespVirtualRPC = 2 // SessionResponse.virtual_rpc

	vrpcRespRPCID   = 1 // VirtualRpcResponse
	vrpcRespPayload = 3
	vrpcRespStats   = 4

	statsBackendLatency = 1 // SessionRequestStats

	durationSeconds = 1 // Duration and Timestamp alike
	durationNanos   = 2
)

// unmarshalSessionRequest decodes data into m as proto.Unmarshal does. The
// payload of a call aliases a copy of data that the garbage collector
// owns (gRPC's buffers are reused once this returns).
func unmarshalSessionRequest(data mem.BufferSlice, m *bigtablepb.SessionRequest) error {
	b := bufpool.Materialize(data)
	proto.Reset(m)
	if vr, ok := decodeVirtualRPCRequest(b); ok {
		m.Payload = &bigtablepb.SessionRequest_VirtualRpc{VirtualRpc: vr}
		return nil
	}
	proto.Reset(m)
	return proto.Unmarshal(b, m)
}

// decodeVirtualRPCRequest decodes a SessionRequest holding exactly one
// VirtualRpc; false for anything else.
func decodeVirtualRPCRequest(b []byte) (*bigtablepb.VirtualRpcRequest, bool) {
	num, v, rest, ok := NextBytesField(b)
	if !ok || num != sessReqVirtualRPC || len(rest) > 0 {
		return nil, false
	}
	vr := &bigtablepb.VirtualRpcRequest{}
	var seen [vrpcReqPayload + 1]bool
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 || num < vrpcReqRPCID || num > vrpcReqPayload || seen[num] {
			return nil, false
		}
		seen[num], v = true, v[n:]
		if num == vrpcReqRPCID {
			x, n := protowire.ConsumeVarint(v)
			if typ != protowire.VarintType || n < 0 {
				return nil, false
			}
			vr.RpcId, v = int64(x), v[n:]
			continue
		}
		f, n := protowire.ConsumeBytes(v)
		if typ != protowire.BytesType || n < 0 {
			return nil, false
		}
		v = v[n:]
		switch num {
		case vrpcReqDeadline:
			d, ok := decodeDuration(f)
			if !ok {
				return nil, false
			}
			vr.Deadline = d
		case vrpcReqMetadata:
			md, ok := decodeVirtualRPCMetadata(f)
			if !ok {
				return nil, false
			}
			vr.Metadata = md
		case vrpcReqPayload:
			vr.Payload = f
		}
	}
	return vr, true
}

func decodeVirtualRPCMetadata(b []byte) (*bigtablepb.VirtualRpcRequest_Metadata, bool) {
	md := &bigtablepb.VirtualRpcRequest_Metadata{}
	var seen [vrpcMetaTraceparent + 1]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < vrpcMetaAttempt || num > vrpcMetaTraceparent || seen[num] {
			return nil, false
		}
		seen[num], b = true, b[n:]
		if num == vrpcMetaAttempt {
			x, n := protowire.ConsumeVarint(b)
			if typ != protowire.VarintType || n < 0 {
				return nil, false
			}
			md.AttemptNumber, b = int64(x), b[n:]
			continue
		}
		f, n := protowire.ConsumeBytes(b)
		if typ != protowire.BytesType || n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == vrpcMetaTraceparent {
			if !utf8.Valid(f) {
				return nil, false
			}
			md.Traceparent = string(f)
			continue
		}
		secs, nanos, ok := decodeSecondsNanos(f)
		if !ok {
			return nil, false
		}
		md.AttemptStart = &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
	}
	return md, true
}

func decodeDuration(b []byte) (*durationpb.Duration, bool) {
	secs, nanos, ok := decodeSecondsNanos(b)
	if !ok {
		return nil, false
	}
	return &durationpb.Duration{Seconds: secs, Nanos: nanos}, true
}

// decodeSecondsNanos decodes a Duration's or a Timestamp's fields.
func decodeSecondsNanos(b []byte) (secs int64, nanos int32, ok bool) {
	var seen [durationNanos + 1]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || num < durationSeconds || num > durationNanos || seen[num] {
			return 0, 0, false
		}
		seen[num], b = true, b[n:]
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		if num == durationSeconds {
			secs = int64(x)
		} else {
			nanos = int32(x)
		}
	}
	return secs, nanos, true
}

// marshalSessionResponse encodes a SessionResponse answering a call, false
// for any other (or one with fields this does not write).
func marshalSessionResponse(m *bigtablepb.SessionResponse) (mem.BufferSlice, bool) {
	vr := m.GetVirtualRpc()
	if vr == nil || vr.ClusterInfo != nil || len(m.ProtoReflect().GetUnknown()) > 0 || len(vr.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	var stats []byte
	if s := vr.Stats; s != nil {
		if len(s.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		if d := s.BackendLatency; d != nil {
			stats = protowire.AppendTag(stats, statsBackendLatency, protowire.BytesType)
			stats = protowire.AppendBytes(stats, appendSecondsNanos(nil, d.Seconds, d.Nanos))
		}
	}
	size := 0
	if vr.RpcId != 0 {
		size += protowire.SizeTag(vrpcRespRPCID) + protowire.SizeVarint(uint64(vr.RpcId))
	}
	if len(vr.Payload) > 0 {
		size += protowire.SizeTag(vrpcRespPayload) + protowire.SizeBytes(len(vr.Payload))
	}
	if vr.Stats != nil {
		size += protowire.SizeTag(vrpcRespStats) + protowire.SizeBytes(len(stats))
	}
	total := protowire.SizeTag(sessRespVirtualRPC) + protowire.SizeBytes(size)
	bufp := mem.DefaultBufferPool().Get(total)
	b := (*bufp)[:0]
	b = protowire.AppendTag(b, sessRespVirtualRPC, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if vr.RpcId != 0 {
		b = protowire.AppendTag(b, vrpcRespRPCID, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(vr.RpcId))
	}
	if len(vr.Payload) > 0 {
		b = protowire.AppendTag(b, vrpcRespPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, vr.Payload)
	}
	if vr.Stats != nil {
		b = protowire.AppendTag(b, vrpcRespStats, protowire.BytesType)
		b = protowire.AppendBytes(b, stats)
	}
	*bufp = b
	return mem.BufferSlice{mem.NewBuffer(bufp, mem.DefaultBufferPool())}, true
}

// appendSecondsNanos appends a Duration's or a Timestamp's fields (proto3:
// zeros left out).
func appendSecondsNanos(b []byte, secs int64, nanos int32) []byte {
	if secs != 0 {
		b = protowire.AppendTag(b, durationSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, durationNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(nanos)))
	}
	return b
}
