package tabletserver

import (
	"math/rand/v2"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomReadRowsRequest is a request as clients send them: row keys
// (empty ones too), ranges of every bound kind, a filter among a few
// (readers repeat theirs) or a random one, limits, stats views (an
// unknown enum value too), names.
func randomReadRowsRequest(r *rand.Rand) *bigtablepb.ReadRowsRequest {
	req := &bigtablepb.ReadRowsRequest{TableName: "projects/p/instances/i/tables/t" + string(rune('a'+r.IntN(3)))}
	if r.IntN(2) == 0 {
		req.Rows = &bigtablepb.RowSet{}
		for range r.IntN(4) {
			req.Rows.RowKeys = append(req.Rows.RowKeys, []byte("row" + string(rune('a'+r.IntN(26))))[:r.IntN(5)])
		}
		for range r.IntN(3) {
			rr := &bigtablepb.RowRange{}
			switch r.IntN(3) {
			case 0:
				rr.StartKey = &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: []byte("a")}
			case 1:
				rr.StartKey = &bigtablepb.RowRange_StartKeyOpen{StartKeyOpen: []byte("b")}
			}
			switch r.IntN(3) {
			case 0:
				rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: []byte("x")}
			case 1:
				rr.EndKey = &bigtablepb.RowRange_EndKeyClosed{EndKeyClosed: []byte("y")}
			}
			req.Rows.RowRanges = append(req.Rows.RowRanges, rr)
		}
	}
	filters := []*bigtablepb.RowFilter{
		nil,
		{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
			{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "^f$"}},
			{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
		}}}},
		{Filter: &bigtablepb.RowFilter_PassAllFilter{PassAllFilter: true}},
		{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte("q" + string(rune('0'+r.IntN(10))))}},
		{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: []*bigtablepb.RowFilter{
			{Filter: &bigtablepb.RowFilter_StripValueTransformer{StripValueTransformer: true}},
			{Filter: &bigtablepb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &bigtablepb.TimestampRange{StartTimestampMicros: r.Int64N(100), EndTimestampMicros: 1000}}},
		}}}},
	}
	req.Filter = filters[r.IntN(len(filters))]
	if r.IntN(3) == 0 {
		req.RowsLimit = r.Int64N(100) - 10
	}
	if r.IntN(3) == 0 {
		req.RequestStatsView = bigtablepb.ReadRowsRequest_RequestStatsView([]int32{0, 1, 2, 99}[r.IntN(4)])
	}
	req.Reversed = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		req.AppProfileId = "profile"
	}
	if r.IntN(4) == 0 {
		req.AuthorizedViewName = "projects/p/instances/i/tables/t/authorizedViews/v"
	}
	if r.IntN(8) == 0 {
		req.MaterializedViewName = "m"
	}
	return req
}

// oddEncodings appends to an encoded request what proto.Marshal never
// writes but a decoder must take as proto.Unmarshal does: repeated
// scalar and message fields, unknown fields, wrong wire types, invalid
// UTF-8.
func oddEncodings(r *rand.Rand, b []byte) []byte {
	switch r.IntN(9) {
	case 0:
		b = protowire.AppendString(protowire.AppendTag(b, reqTableName, protowire.BytesType), "again") // last one wins
	case 1:
		rs, _ := proto.Marshal(&bigtablepb.RowSet{RowKeys: [][]byte{[]byte("more")}})
		b = protowire.AppendBytes(protowire.AppendTag(b, reqRows, protowire.BytesType), rs) // merged
	case 2:
		f, _ := proto.Marshal(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_BlockAllFilter{BlockAllFilter: true}})
		b = protowire.AppendBytes(protowire.AppendTag(b, reqFilter, protowire.BytesType), f) // merged
	case 3:
		b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1) // unknown
	case 4:
		b = protowire.AppendVarint(protowire.AppendTag(b, reqTableName, protowire.VarintType), 1) // wrong type
	case 5:
		b = protowire.AppendBytes(protowire.AppendTag(b, reqAppProfileID, protowire.BytesType), []byte{0xff, 0xfe}) // not UTF-8
	case 6:
		b = protowire.AppendVarint(protowire.AppendTag(b, reqRowsLimit, protowire.VarintType), 1<<63) // negative
	case 7:
		b = protowire.AppendVarint(protowire.AppendTag(b, reqReversed, protowire.VarintType), 2) // true
	}
	return b
}

// TestReadRowsRequestDecodeMatchesProto: the direct decoding gives the
// message, or the error, proto.Unmarshal gives — for requests as clients
// send them, for encodings proto.Marshal never writes, and for every
// truncation and random corruption of them.
func TestReadRowsRequestDecodeMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	check := func(b []byte) {
		t.Helper()
		want := &bigtablepb.ReadRowsRequest{}
		werr := proto.Unmarshal(b, want)
		got := &bigtablepb.ReadRowsRequest{TableName: "stale", Reversed: true}
		gerr := unmarshalReadRowsRequest(b, got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("% x: proto.Unmarshal %v, direct %v", b, werr, gerr)
		}
		if werr == nil && !proto.Equal(got, want) {
			t.Fatalf("% x:\n got %v\nwant %v", b, got, want)
		}
	}
	for range 3000 {
		b, err := proto.Marshal(randomReadRowsRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		b = oddEncodings(r, b)
		check(b)
		check(b[:r.IntN(len(b)+1)])
		g := append([]byte(nil), b...)
		g[r.IntN(len(g))] = byte(r.IntN(256))
		check(g)
	}
}

// TestReadRowsRequestFilterShared: requests sending the same filter bytes
// share one decoded filter (decoded once), equal to the filter sent; the
// shared table stays bounded.
func TestReadRowsRequestFilterShared(t *testing.T) {
	f := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "^shared$"}}
	b, err := proto.Marshal(&bigtablepb.ReadRowsRequest{TableName: "t", Filter: f})
	if err != nil {
		t.Fatal(err)
	}
	var a, c bigtablepb.ReadRowsRequest
	if err := unmarshalReadRowsRequest(b, &a); err != nil {
		t.Fatal(err)
	}
	if err := unmarshalReadRowsRequest(b, &c); err != nil {
		t.Fatal(err)
	}
	if a.Filter != c.Filter || !proto.Equal(a.Filter, f) {
		t.Fatalf("filters %p %v and %p %v, want one shared %v", a.Filter, a.Filter, c.Filter, c.Filter, f)
	}
	for i := range 3 * sharedFiltersMax {
		g, _ := proto.Marshal(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: int32(i + 1)}})
		if _, ok := sharedFilter(g); !ok {
			t.Fatal("a valid filter did not decode")
		}
	}
	sharedFilters.RLock()
	n := len(sharedFilters.m)
	sharedFilters.RUnlock()
	if n > sharedFiltersMax {
		t.Fatalf("%d shared filters, want at most %d", n, sharedFiltersMax)
	}
}

// BenchmarkReadRowsRequestUnmarshal decodes a point read's request as the
// official client sends it (`tabula bench`'s: one row key, a family filter
// chained with the latest version) directly and with proto.Unmarshal.
func BenchmarkReadRowsRequestUnmarshal(b *testing.B) {
	req := &bigtablepb.ReadRowsRequest{
		TableName:    "projects/tabula/instances/dev/tables/bench",
		AppProfileId: "",
		Rows:         &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("b0012345")}},
		Filter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
			{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "^f$"}},
			{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
		}}}},
		RowsLimit: 1,
	}
	buf, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m bigtablepb.ReadRowsRequest
			if err := unmarshalReadRowsRequest(buf, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m bigtablepb.ReadRowsRequest
			if err := proto.Unmarshal(buf, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
