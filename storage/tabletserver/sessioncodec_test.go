package tabletserver

import (
	"math/rand/v2"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestSessionCodecMatchesProto: the codec's session messages decode as
// proto.Unmarshal decodes them — calls as clients send them, the
// session's other messages, and damaged or extended copies — and the
// answers it encodes decode back to themselves.
func TestSessionCodecMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var msgs [][]byte
	add := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, b)
	}
	for i := range 300 {
		vr := &bigtablepb.VirtualRpcRequest{RpcId: int64(i * 7919)}
		if i%2 == 0 {
			vr.Payload = []byte{0x0a, 0x03, 0x0a, 0x01, byte(i)}
		}
		if i%3 == 0 {
			vr.Deadline = durationpb.New(0)
			vr.Deadline.Seconds, vr.Deadline.Nanos = int64(r.IntN(100)), int32(r.IntN(1e9))
		}
		if i%4 != 0 {
			vr.Metadata = &bigtablepb.VirtualRpcRequest_Metadata{AttemptNumber: int64(i % 5),
				AttemptStart: &timestamppb.Timestamp{Seconds: int64(1e9 + i), Nanos: int32(r.IntN(1e9))}}
			if i%7 == 0 {
				vr.Metadata.Traceparent = "00-abc-def-01"
			}
		}
		add(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_VirtualRpc{VirtualRpc: vr}})
	}
	add(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_OpenSession{OpenSession: &bigtablepb.OpenSessionRequest{ProtocolVersion: 1, Payload: []byte("x")}}})
	add(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_CloseSession{CloseSession: &bigtablepb.CloseSessionRequest{Description: "bye"}}})
	add(&bigtablepb.SessionRequest{})
	for _, b := range msgs[:len(msgs):len(msgs)] {
		if len(b) > 1 {
			msgs = append(msgs, b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			msgs = append(msgs, c)
		}
		msgs = append(msgs, append(append([]byte(nil), b...), 0x1a, 0x00))
	}
	fast := 0
	for i, b := range msgs {
		var want bigtablepb.SessionRequest
		wantErr := proto.Unmarshal(b, &want)
		if _, ok := decodeVirtualRPCRequest(b); ok {
			fast++
			if wantErr != nil {
				t.Fatalf("message %d: decoded fast, proto.Unmarshal refuses it: %v", i, wantErr)
			}
		}
		var got bigtablepb.SessionRequest
		err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("message %d: codec error %v, proto.Unmarshal's %v", i, err, wantErr)
		}
		if err == nil && !proto.Equal(&got, &want) {
			t.Fatalf("message %d: codec %v, proto.Unmarshal %v", i, &got, &want)
		}
	}
	if fast < 300 {
		t.Errorf("only %d messages took the fast path", fast)
	}

	// Answers.
	answers := []*bigtablepb.SessionResponse{
		{Payload: &bigtablepb.SessionResponse_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcResponse{RpcId: 1, Payload: []byte("row bytes"),
			Stats: &bigtablepb.SessionRequestStats{BackendLatency: durationpb.New(1234567)}}}},
		{Payload: &bigtablepb.SessionResponse_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcResponse{RpcId: 1 << 40}}},
		{Payload: &bigtablepb.SessionResponse_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcResponse{Payload: make([]byte, 70000),
			Stats: &bigtablepb.SessionRequestStats{}}}},
		{Payload: &bigtablepb.SessionResponse_Error{Error: &bigtablepb.ErrorResponse{RpcId: 3, Status: &statuspb.Status{Code: 5, Message: "not found"}}}},
		{Payload: &bigtablepb.SessionResponse_Heartbeat{Heartbeat: &bigtablepb.HeartbeatResponse{}}},
	}
	for i, m := range answers {
		bs, err := Codec().Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got bigtablepb.SessionResponse
		if err := proto.Unmarshal(bs.Materialize(), &got); err != nil {
			t.Fatalf("answer %d: undecodable: %v", i, err)
		}
		bs.Free()
		if !proto.Equal(&got, m) {
			t.Fatalf("answer %d: decodes to %v, want %v", i, &got, m)
		}
	}
}
