package gateway

import (
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A sub-request keeps every field of the caller's request but its rows,
// sharing the filter rather than copying it.
func TestSubRequestKeepsAllButRows(t *testing.T) {
	filter := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
		{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "f"}},
		{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
	}}}}
	req := &bigtablepb.ReadRowsRequest{
		TableName:            "projects/p/instances/i/tables/t",
		AuthorizedViewName:   "projects/p/instances/i/tables/t/authorizedViews/v",
		MaterializedViewName: "projects/p/instances/i/materializedViews/m",
		AppProfileId:         "profile",
		Rows:                 &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("a"), []byte("b")}},
		Filter:               filter,
		RowsLimit:            7,
		RequestStatsView:     bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL,
		Reversed:             true,
	}
	// A field this version does not know travels on too.
	unknown := protowire.AppendTag(nil, 999, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 5)
	req.ProtoReflect().SetUnknown(unknown)
	before := proto.Clone(req)

	sub := subRequest(req)
	if sub.Rows != nil {
		t.Fatalf("sub-request has the caller's rows %v", sub.Rows)
	}
	if sub.Filter != filter {
		t.Error("sub-request's filter is a copy, want the caller's own")
	}
	want := proto.Clone(req).(*bigtablepb.ReadRowsRequest)
	want.Rows = nil
	if !proto.Equal(sub, want) {
		t.Errorf("sub-request %v, want %v", sub, want)
	}
	sub.Rows = &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("c")}}
	sub.RowsLimit = 1
	if !proto.Equal(req, before) {
		t.Errorf("setting the sub-request's fields changed the caller's request: %v, was %v", req, before)
	}
}
