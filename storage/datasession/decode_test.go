package datasession

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/proto"
)

// TestDecodeCallMatchesProto: the fast decoder of a call's payload either
// declines or decodes exactly what proto.Unmarshal does, on the payloads
// clients send and on damaged, reordered and extended ones.
func TestDecodeCallMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var payloads [][]byte
	add := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, b)
	}
	for i := range 200 {
		key := []byte(fmt.Sprintf("row%d", i))
		if i%7 == 0 {
			key = nil
		}
		read := &bigtablepb.SessionReadRowRequest{Key: key}
		if i%3 == 0 {
			read.Filter = &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "f"}}
		}
		add(&bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_ReadRow{ReadRow: read}})
		mut := &bigtablepb.SessionMutateRowRequest{Key: key}
		for j := range i % 4 {
			mut.Mutations = append(mut.Mutations, &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte{byte(j)}, TimestampMicros: int64(j * 1000), Value: key}}})
		}
		if i%5 == 0 {
			mut.Mutations = append(mut.Mutations, &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}})
		}
		add(&bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_MutateRow{MutateRow: mut}})
	}
	add(&bigtablepb.TableRequest{})
	// Damaged copies: truncated, a byte flipped, a field appended.
	for _, b := range payloads[:len(payloads):len(payloads)] {
		if len(b) > 1 {
			payloads = append(payloads, b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			payloads = append(payloads, c)
		}
		payloads = append(payloads, append(append([]byte(nil), b...), 0x1a, 0x01, 'x'))
	}
	fast := 0
	for i, b := range payloads {
		read, mutate, ok := decodeCallFast(b)
		if !ok {
			continue
		}
		fast++
		var want bigtablepb.TableRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("payload %d: decoded fast, but proto.Unmarshal refuses it: %v", i, err)
		}
		var got bigtablepb.TableRequest
		switch {
		case read != nil && mutate == nil:
			got.Payload = &bigtablepb.TableRequest_ReadRow{ReadRow: read}
		case mutate != nil && read == nil:
			got.Payload = &bigtablepb.TableRequest_MutateRow{MutateRow: mutate}
		default:
			t.Fatalf("payload %d: decoded as both or neither call", i)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("payload %d: fast %v, proto %v", i, &got, &want)
		}
	}
	if fast < 400 {
		t.Errorf("only %d of %d payloads took the fast path", fast, len(payloads))
	}
}

// TestEncodeAnswersMatchProto: the read and write answers encoded here
// decode, as a TableResponse and as an AuthorizedViewResponse, to the
// messages they stand for.
func TestEncodeAnswersMatchProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rows := []*bigtablepb.Row{nil, {Key: []byte("k")}}
	for i := range 100 {
		row := &bigtablepb.Row{Key: []byte(fmt.Sprintf("row%d", i))}
		for f := range r.IntN(3) + 1 {
			fam := &bigtablepb.Family{Name: fmt.Sprintf("f%d", f)}
			for c := range r.IntN(3) + 1 {
				col := &bigtablepb.Column{Qualifier: []byte(fmt.Sprintf("q%d", c))}
				if c == 0 && i%5 == 0 {
					col.Qualifier = nil // the empty qualifier
				}
				for v := range r.IntN(3) + 1 {
					cell := &bigtablepb.Cell{TimestampMicros: int64(r.IntN(3)) * 1000 * int64(v+1), Value: make([]byte, r.IntN(300))}
					if i%4 == 0 {
						cell.Labels = []string{"l1", fmt.Sprint(v)}
					}
					col.Cells = append(col.Cells, cell)
				}
				fam.Columns = append(fam.Columns, col)
			}
			row.Families = append(row.Families, fam)
		}
		rows = append(rows, row)
	}
	for i, row := range rows {
		b, ok := encodeReadAnswer(row)
		if !ok {
			t.Fatalf("row %d: not encoded", i)
		}
		var tr bigtablepb.TableResponse
		if err := proto.Unmarshal(b, &tr); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want := &bigtablepb.TableResponse{Payload: &bigtablepb.TableResponse_ReadRow{ReadRow: &bigtablepb.SessionReadRowResponse{Row: row}}}
		if !proto.Equal(&tr, want) {
			t.Fatalf("row %d: decodes to %v, want %v", i, &tr, want)
		}
		var vr bigtablepb.AuthorizedViewResponse
		if err := proto.Unmarshal(b, &vr); err != nil || !proto.Equal(vr.GetReadRow(), want.GetReadRow()) {
			t.Fatalf("row %d as a view's answer: %v, %v", i, &vr, err)
		}
	}
	if _, ok := encodeReadAnswer(&bigtablepb.Row{Key: []byte("k"), Families: []*bigtablepb.Family{{Name: "\xff"}}}); ok {
		t.Error("a family name that is not UTF-8 was encoded")
	}
	for _, m := range []proto.Message{
		&bigtablepb.TableResponse{Payload: &bigtablepb.TableResponse_MutateRow{MutateRow: &bigtablepb.SessionMutateRowResponse{}}},
		&bigtablepb.AuthorizedViewResponse{Payload: &bigtablepb.AuthorizedViewResponse_MutateRow{MutateRow: &bigtablepb.SessionMutateRowResponse{}}},
	} {
		if b, err := proto.Marshal(m); err != nil || string(b) != string(mutateAnswer) {
			t.Errorf("%T marshals to %x (%v), the constant is %x", m, b, err, mutateAnswer)
		}
	}
}
