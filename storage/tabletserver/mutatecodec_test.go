package tabletserver

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// randomMutateRows builds a MutateRowsRequest of SetCell entries (what the
// fast path decodes) and, when mixed, entries the fast path leaves to
// protobuf: other mutation kinds, an idempotency token, a timestamp origin.
func randomMutateRows(r *rand.Rand, mixed bool) *bigtablepb.MutateRowsRequest {
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	families := []string{"cf", "f2", "", "família"}
	req := &bigtablepb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/t"}
	if r.IntN(3) == 0 {
		req.AppProfileId = "profile"
	}
	if r.IntN(4) == 0 {
		req.AuthorizedViewName = "projects/p/instances/i/tables/t/authorizedViews/v"
	}
	for range r.IntN(40) {
		e := &bigtablepb.MutateRowsRequest_Entry{}
		if r.IntN(8) != 0 {
			e.RowKey = randBytes(r.IntN(30))
		}
		for range r.IntN(4) {
			sc := &bigtablepb.Mutation_SetCell{
				FamilyName:      families[r.IntN(len(families))],
				ColumnQualifier: randBytes(r.IntN(10)),
				TimestampMicros: []int64{0, -1, 1000, 1 << 50}[r.IntN(4)],
				Value:           randBytes([]int{0, 1, 100, 1000, 20000}[r.IntN(5)]),
			}
			mu := &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: sc}}
			if mixed {
				switch r.IntN(6) {
				case 0:
					mu = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}}
				case 1:
					mu.TimestampOrigin = bigtablepb.Mutation_TimestampOrigin(1)
				case 2:
					e.Idempotency = &bigtablepb.Idempotency{Token: randBytes(8)}
				}
			}
			e.Mutations = append(e.Mutations, mu)
		}
		req.Entries = append(req.Entries, e)
	}
	return req
}

// splitBuffers returns b as a BufferSlice of pieces of random sizes, as
// gRPC hands a message received in several frames to its codec; each
// piece a copy of its own.
func splitBuffers(r *rand.Rand, b []byte) mem.BufferSlice {
	var bs mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1+r.IntN(3000))
		bs = append(bs, mem.SliceBuffer(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return bs
}

func TestMutateRowsDecoderMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 400 {
		req := randomMutateRows(r, i%2 == 1)
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		data := splitBuffers(r, wire)
		got := &bigtablepb.MutateRowsRequest{TableName: "stale", Entries: []*bigtablepb.MutateRowsRequest_Entry{{RowKey: []byte("stale")}}}
		if err := (readRowsCodec{}).Unmarshal(data, got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		// gRPC reuses its receive buffers once the codec returns:
		// the decoded message must not depend on them.
		for _, b := range data {
			clear(b.ReadOnlyData())
		}
		if !proto.Equal(got, req) {
			t.Fatalf("request %d: decoded\n%v\nwant\n%v", i, got, req)
		}
		if decodeMutateRows(bytes.Clone(wire), &bigtablepb.MutateRowsRequest{}) {
			fast++
		} else if i%2 == 0 {
			t.Fatalf("request %d of SetCell entries only was not decoded by the fast path", i)
		}
	}
	if fast == 400 {
		t.Fatal("every mixed request took the fast path: the fallback went untested")
	}
}

// TestMutateRowsDecoderAliasesItsOwnCopy checks that decoded values point
// into one buffer of the decoder's own — not into the buffers gRPC passed,
// which go back to its pool — and keep their bytes when those are
// overwritten.
func TestMutateRowsDecoderAliasesItsOwnCopy(t *testing.T) {
	val := bytes.Repeat([]byte("v"), 1000)
	req := &bigtablepb.MutateRowsRequest{TableName: "t"}
	for i := range 3 {
		req.Entries = append(req.Entries, &bigtablepb.MutateRowsRequest_Entry{RowKey: []byte{'r', byte('0' + i)}, Mutations: []*bigtablepb.Mutation{
			{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{FamilyName: "cf", Value: val}}}}})
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	pooled := mem.NewBuffer(&wire, nil)
	got := &bigtablepb.MutateRowsRequest{}
	if err := (readRowsCodec{}).Unmarshal(mem.BufferSlice{pooled}, got); err != nil {
		t.Fatal(err)
	}
	v0 := got.Entries[0].Mutations[0].GetSetCell().Value
	v2 := got.Entries[2].Mutations[0].GetSetCell().Value
	if &v0[0] == &wire[bytes.Index(wire, val)] {
		t.Fatal("the decoded value aliases the receive buffer")
	}
	// One copy for the whole message: the values are at the distances
	// they have on the wire.
	gap := bytes.Index(wire[bytes.Index(wire, val)+1000:], val) + 1000
	if d := int(uintptrOf(v2) - uintptrOf(v0)); d != 2*gap {
		t.Fatalf("values %d bytes apart, want %d (aliasing one copy of the message)", d, 2*gap)
	}
	for i := range wire {
		wire[i] = 0xff
	}
	for i, e := range got.Entries {
		if v := e.Mutations[0].GetSetCell().Value; !bytes.Equal(v, val) || string(e.RowKey) != string([]byte{'r', byte('0' + i)}) {
			t.Fatalf("entry %d changed after the receive buffer was overwritten: row %q", i, e.RowKey)
		}
	}
}

func FuzzMutateRowsDecoder(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 20 {
		req := randomMutateRows(r, i%2 == 1)
		// Small seeds: the fuzzer mutates kilobytes much faster than
		// the megabytes of the large values.
		req.Entries = req.Entries[:min(len(req.Entries), 4)]
		for _, e := range req.Entries {
			if sc := e.GetMutations(); len(sc) > 0 && sc[0].GetSetCell() != nil {
				v := &sc[0].GetSetCell().Value
				*v = (*v)[:min(len(*v), 16)]
			}
		}
		wire, _ := proto.Marshal(req)
		f.Add(wire)
	}
	f.Add([]byte{0x12, 0x05, 0x12, 0x03, 0x0a, 0x01, 0xff}) // family not UTF-8
	f.Add([]byte{0x12, 0x04, 0x12, 0x02, 0x0a, 0x00, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, wire []byte) {
		want := &bigtablepb.MutateRowsRequest{}
		wantErr := proto.Unmarshal(wire, want)
		got := &bigtablepb.MutateRowsRequest{}
		err := unmarshalMutateRows(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(wire))}, got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, protobuf's %v", err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded\n%v\nprotobuf\n%v", got, want)
		}
	})
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// BenchmarkMutateRowsUnmarshal decodes the request of a 100-row bulk write
// of 1000-byte values (what `tabula bench` sends) with gRPC's proto codec
// and with the server's; compare the two in the same run.
func BenchmarkMutateRowsUnmarshal(b *testing.B) {
	req := &bigtablepb.MutateRowsRequest{TableName: "projects/p/instances/i/tables/bench"}
	val := bytes.Repeat([]byte{7}, 1000)
	for i := range 100 {
		req.Entries = append(req.Entries, &bigtablepb.MutateRowsRequest_Entry{RowKey: []byte("row" + string(rune('a'+i%26)) + "0000012345"),
			Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{FamilyName: "cf", ColumnQualifier: []byte("q"), TimestampMicros: -1, Value: val}}}}})
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	data := splitBuffers(rand.New(rand.NewPCG(1, 1)), wire)
	for _, c := range []struct {
		name  string
		codec interface {
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"proto", fallbackCodec()}, {"server", readRowsCodec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				m := &bigtablepb.MutateRowsRequest{}
				if err := c.codec.Unmarshal(data, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMutateRowsDecoderBoundsItsSlabs checks that a request of more
// entries or mutations than a request may carry goes to protobuf's decoder
// — decoded the same — instead of sizing the fast path's slabs by it.
func TestMutateRowsDecoderBoundsItsSlabs(t *testing.T) {
	sc := &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{FamilyName: "f"}}}
	for _, c := range []struct {
		name             string
		entries, perRow  int
		wantFastDecoding bool
	}{
		{"at the limit", 1000, maxFastMutations / 1000, true},
		{"mutations past it", 1000, maxFastMutations/1000 + 1, false},
		{"entries past it", maxFastMutations + 1, 0, false},
	} {
		req := &bigtablepb.MutateRowsRequest{TableName: "t"}
		for range c.entries {
			e := &bigtablepb.MutateRowsRequest_Entry{RowKey: []byte("r")}
			for range c.perRow {
				e.Mutations = append(e.Mutations, sc)
			}
			req.Entries = append(req.Entries, e)
		}
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeMutateRows(wire, &bigtablepb.MutateRowsRequest{}); got != c.wantFastDecoding {
			t.Errorf("%s: fast path %v, want %v", c.name, got, c.wantFastDecoding)
		}
		got := &bigtablepb.MutateRowsRequest{}
		if err := unmarshalMutateRows(mem.BufferSlice{mem.SliceBuffer(wire)}, got); err != nil || !proto.Equal(got, req) {
			t.Errorf("%s: decoded differently from the request (err %v)", c.name, err)
		}
	}
}

// TestMutateRowDecoderMatchesProto: single-row writes — each entry of
// randomMutateRows' requests as a MutateRowRequest with the request's
// names, SetCells only or mixed with other mutations, over split buffers,
// damaged and extended — decode as proto.Unmarshal decodes them, and
// keep nothing of gRPC's buffers.
func TestMutateRowDecoderMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	fast, total := 0, 0
	check := func(wire []byte, i int) {
		t.Helper()
		total++
		want := &bigtablepb.MutateRowRequest{}
		wantErr := proto.Unmarshal(wire, want)
		data := splitBuffers(r, bytes.Clone(wire))
		got := &bigtablepb.MutateRowRequest{TableName: "stale", Mutations: []*bigtablepb.Mutation{{}}}
		err := (readRowsCodec{}).Unmarshal(data, got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("request %d: error %v, protobuf's %v", i, err, wantErr)
		}
		for _, b := range data {
			clear(b.ReadOnlyData())
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("request %d: decoded\n%v\nwant\n%v", i, got, want)
		}
		if decodeMutateRow(bytes.Clone(wire), &bigtablepb.MutateRowRequest{}) {
			fast++
		}
	}
	for i := range 300 {
		rows := randomMutateRows(r, i%2 == 1)
		for _, e := range rows.Entries {
			req := &bigtablepb.MutateRowRequest{TableName: rows.TableName, AppProfileId: rows.AppProfileId,
				AuthorizedViewName: rows.AuthorizedViewName, RowKey: e.RowKey, Mutations: e.Mutations}
			wire, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			check(wire, i)
			if len(wire) > 1 {
				check(wire[:r.IntN(len(wire))], i)
				c := bytes.Clone(wire)
				c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
				check(c, i)
			}
			check(append(bytes.Clone(wire), 0x40, 0x01), i) // field 8, a varint
		}
	}
	if fast == 0 || fast == total {
		t.Fatalf("%d of %d requests took the fast path: one of the two paths went untested", fast, total)
	}
	t.Logf("%d of %d requests decoded by the fast path", fast, total)
}
