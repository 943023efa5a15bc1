package tabletserver

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomResponse builds a ReadRowsResponse exercising every field the
// fast path writes, with the edge values of each (empty wrappers, values
// on both sides of valueAliasBytes, negative numbers, both row statuses).
func randomResponse(r *rand.Rand) *bigtablepb.ReadRowsResponse {
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	randString := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	sizes := []int{0, 1, 127, 128, valueAliasBytes - 1, valueAliasBytes, 1000, 70000}
	resp := &bigtablepb.ReadRowsResponse{}
	for range r.IntN(12) {
		c := &bigtablepb.ReadRowsResponse_CellChunk{}
		if r.IntN(2) == 0 {
			c.RowKey = randBytes(r.IntN(40))
		}
		if r.IntN(2) == 0 {
			c.FamilyName = wrapperspb.String(randString(r.IntN(3) * 5))
		}
		if r.IntN(2) == 0 {
			c.Qualifier = wrapperspb.Bytes(randBytes(r.IntN(3) * 7))
		}
		switch r.IntN(4) {
		case 0:
			c.TimestampMicros = -1 - r.Int64N(1000)
		case 1:
			c.TimestampMicros = r.Int64()
		case 2:
			c.TimestampMicros = math.MinInt64
		}
		for range r.IntN(3) {
			c.Labels = append(c.Labels, randString(r.IntN(6))+"é")
		}
		c.Value = randBytes(sizes[r.IntN(len(sizes))])
		switch r.IntN(4) {
		case 0:
			c.ValueSize = int32(r.IntN(1 << 20))
		case 1:
			c.ValueSize = -5
		}
		switch r.IntN(5) {
		case 0:
			c.RowStatus = &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}
		case 1:
			c.RowStatus = &bigtablepb.ReadRowsResponse_CellChunk_ResetRow{ResetRow: true}
		case 2:
			c.RowStatus = &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: false}
		}
		resp.Chunks = append(resp.Chunks, c)
	}
	if r.IntN(3) == 0 {
		resp.LastScannedRowKey = randBytes(1 + r.IntN(20))
	}
	if r.IntN(4) == 0 {
		resp.RequestStats = &bigtablepb.RequestStats{StatsView: &bigtablepb.RequestStats_FullReadStatsView{
			FullReadStatsView: &bigtablepb.FullReadStatsView{
				ReadIterationStats:  &bigtablepb.ReadIterationStats{RowsSeenCount: r.Int64N(100), CellsReturnedCount: 3},
				RequestLatencyStats: &bigtablepb.RequestLatencyStats{FrontendServerLatency: durationpb.New(1234567)},
			}}}
	}
	return resp
}

func marshalWith(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := readRowsCodec{}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	return data.Materialize()
}

// TestReadRowsCodecMatchesProto: the fast path writes exactly the bytes
// proto.Marshal writes, and they decode to the same message.
func TestReadRowsCodecMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 16))
	aliased := 0
	for i := range 3000 {
		resp := randomResponse(r)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		data, err := readRowsCodec{}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 1 {
			aliased++
		}
		got := data.Materialize()
		data.Free()
		if !bytes.Equal(got, want) {
			t.Fatalf("response %d: fast path wrote %d bytes, proto.Marshal %d; differ\nmessage: %v", i, len(got), len(want), resp)
		}
		var back bigtablepb.ReadRowsResponse
		if err := (readRowsCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(got)}, &back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, resp) {
			t.Fatalf("response %d: decoded differently", i)
		}
	}
	if aliased == 0 {
		t.Fatal("no response handed a value over without copying it")
	}
}

// TestReadRowsCodecFallback: messages the fast path does not handle —
// other types, responses with unknown fields — are encoded by gRPC's
// proto codec.
func TestReadRowsCodecFallback(t *testing.T) {
	other := &bigtablepb.MutateRowResponse{}
	if got := marshalWith(t, other); len(got) != 0 {
		t.Fatalf("MutateRowResponse: %x", got)
	}
	resp := &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{{RowKey: []byte("r"), Value: []byte("v")}}}
	// Field 15, varint 1: unknown to this version of the message.
	unknown := []byte{15<<3 | 0, 1}
	resp.Chunks[0].ProtoReflect().SetUnknown(unknown)
	if fastEncodable(resp) {
		t.Fatal("a chunk with unknown fields passed for fast-encodable")
	}
	want, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if got := marshalWith(t, resp); !bytes.Equal(got, want) {
		t.Fatalf("with unknown fields: %x, want %x", got, want)
	}
	if !bytes.Contains(want, unknown) {
		t.Fatal("proto.Marshal dropped the unknown field: the check above proves nothing")
	}

	// Invalid UTF-8 in a label: refused, as proto.Marshal refuses it.
	bad := &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{{RowKey: []byte("r"), Labels: []string{"\xff"}}}}
	if _, err := (readRowsCodec{}).Marshal(bad); err == nil {
		t.Fatal("a label of invalid UTF-8 was encoded")
	}
}

// TestEncodedReadRowsRelaysBytes: a response received as EncodedReadRows
// (in one buffer or several, as gRPC may hand it over) is sent as exactly
// the bytes received, once; sending it again is an error, not a resend.
func TestEncodedReadRowsRelaysBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 50 {
		want, err := proto.Marshal(randomResponse(r))
		if err != nil {
			t.Fatal(err)
		}
		var in mem.BufferSlice
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(64<<10))
			if i%2 == 0 {
				n = len(rest) // one buffer: kept, not copied
			}
			in = append(in, mem.SliceBuffer(bytes.Clone(rest[:n])))
			rest = rest[n:]
		}
		var msg EncodedReadRows
		if err := RelayCodec().Unmarshal(in, &msg); err != nil {
			t.Fatal(err)
		}
		in.Free() // what gRPC does once Unmarshal returns
		if !bytes.Equal(msg.Bytes(), want) {
			t.Fatalf("response %d: received bytes differ", i)
		}
		out, err := Codec().Marshal(&msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("response %d: sent bytes differ", i)
		}
		out.Free()
		if msg.Bytes() != nil {
			t.Fatalf("response %d: still holds its bytes after being sent", i)
		}
		if _, err := Codec().Marshal(&msg); err == nil {
			t.Fatalf("response %d: sent twice", i)
		}
		msg.Release() // a no-op after sending
	}
}
