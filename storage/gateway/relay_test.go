package gateway

import (
	"bytes"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// decodedScan is what relay computes from a decoded response: the
// reference scanEncodedReadRows must agree with.
func decodedScan(resp *bigtablepb.ReadRowsResponse, cur []byte) encodedScan {
	sc := encodedScan{cur: cur, stats: resp.RequestStats != nil}
	for _, ch := range resp.Chunks {
		sc.content = true
		if len(ch.RowKey) > 0 {
			sc.cur = ch.RowKey
		}
		if ch.GetCommitRow() {
			sc.rows++
			sc.last = sc.cur
		}
	}
	if len(resp.LastScannedRowKey) > 0 {
		sc.content = true
		sc.last = resp.LastScannedRowKey
	}
	return sc
}

func TestScanEncodedReadRowsMatchesDecoded(t *testing.T) {
	commit := &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}
	reset := &bigtablepb.ReadRowsResponse_CellChunk_ResetRow{ResetRow: true}
	fam := func(s string) *wrapperspb.StringValue { return &wrapperspb.StringValue{Value: s} }
	qual := func(s string) *wrapperspb.BytesValue { return &wrapperspb.BytesValue{Value: []byte(s)} }
	big := bytes.Repeat([]byte("v"), 5000)
	cases := []struct {
		name string
		resp *bigtablepb.ReadRowsResponse
		cur  []byte
	}{
		{"empty", &bigtablepb.ReadRowsResponse{}, nil},
		{"one row", &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
			{RowKey: []byte("r1"), FamilyName: fam("f"), Qualifier: qual("c"), TimestampMicros: 7, Value: []byte("x"), RowStatus: commit}}}, nil},
		{"rows, labels, split value", &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
			{RowKey: []byte("a"), FamilyName: fam("f"), Qualifier: qual("c"), Labels: []string{"l"}, Value: big[:100], ValueSize: 5000},
			{Value: big[100:]},
			{Qualifier: qual("d"), Value: []byte("y"), RowStatus: commit},
			{RowKey: []byte("b"), FamilyName: fam("g"), Qualifier: qual(""), RowStatus: commit},
			{RowKey: []byte("c"), FamilyName: fam("g"), Qualifier: qual("q"), Value: big}}}, []byte("zz")},
		{"continued row", &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
			{Value: []byte("tail"), RowStatus: commit}}}, []byte("prev")},
		{"reset", &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
			{RowKey: []byte("a"), FamilyName: fam("f"), Qualifier: qual("c"), Value: []byte("x")},
			{RowStatus: reset},
			{RowKey: []byte("a"), FamilyName: fam("f"), Qualifier: qual("c"), Value: []byte("y"), RowStatus: commit}}}, nil},
		{"last scanned", &bigtablepb.ReadRowsResponse{LastScannedRowKey: []byte("k9"), Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
			{RowKey: []byte("k1"), FamilyName: fam("f"), Qualifier: qual("c"), RowStatus: commit}}}, nil},
		{"only last scanned", &bigtablepb.ReadRowsResponse{LastScannedRowKey: []byte("k9")}, nil},
		{"stats", &bigtablepb.ReadRowsResponse{RequestStats: &bigtablepb.RequestStats{}}, nil},
	}
	for _, c := range cases {
		b, err := proto.Marshal(c.resp)
		if err != nil {
			t.Fatal(err)
		}
		// An unknown field (a newer server's) is skipped.
		b = protowire.AppendTag(b, 99, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("future"))
		got, err := scanEncodedReadRows(b, c.cur)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := decodedScan(c.resp, c.cur)
		if got.rows != want.rows || !bytes.Equal(got.last, want.last) || !bytes.Equal(got.cur, want.cur) || got.stats != want.stats || got.content != want.content ||
			(got.last == nil) != (want.last == nil) {
			t.Errorf("%s: scanned %+v, decoded %+v", c.name, got, want)
		}
	}
}

func TestScanEncodedReadRowsRefusesTruncated(t *testing.T) {
	resp := &bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{
		{RowKey: []byte("r1"), Value: []byte("value"), RowStatus: &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}}}}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		if _, err := scanEncodedReadRows(b[:n], nil); err == nil {
			t.Errorf("%d of %d bytes: no error", n, len(b))
		}
	}
}
