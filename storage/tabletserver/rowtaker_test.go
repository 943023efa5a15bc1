package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/filter"
)

// takerStream is a ReadRows server stream whose context carries a
// RowTaker: a response sent on it is a failure.
type takerStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent int
}

func (s *takerStream) Context() context.Context { return s.ctx }

func (s *takerStream) Send(*bigtablepb.ReadRowsResponse) error { s.sent++; return nil }

func (s *takerStream) SendMsg(any) error { s.sent++; return nil }

// TestReadRowsHandsRowsToTaker: with a RowTaker in its stream's context,
// ReadRows hands it every row the official client reads through the
// same filter — keys, cells and labels, in order, rows the filter empties
// left out — sends no response, and refuses a request for request stats.
func TestReadRowsHandsRowsToTaker(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "take", families: []string{"a", "b"}, splits: []string{"m"}})
	for i := range 30 {
		m := bigtable.NewMutation()
		m.Set("a", "x", 1000, fmt.Appendf(nil, "x%d", i))
		m.Set("a", "x", 2000, fmt.Appendf(nil, "X%d", i))
		if i%3 != 0 {
			m.Set("b", "y", 1000, fmt.Appendf(nil, "y%d", i))
		}
		if err := tbl.Apply(e.ctx, fmt.Sprintf("%c%02d", 'a'+i%26, i), m); err != nil {
			t.Fatal(err)
		}
	}
	ds := NewDataService(e.host, DataOptions{EncodedResponses: true})
	// Each filter twice: for the official client, and as the request's.
	label := func(l string) *bigtablepb.RowFilter {
		return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ApplyLabelTransformer{ApplyLabelTransformer: l}}
	}
	chain := func(fs ...*bigtablepb.RowFilter) *bigtablepb.RowFilter {
		return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: fs}}}
	}
	filters := []struct {
		client bigtable.Filter
		req    *bigtablepb.RowFilter
	}{
		{bigtable.PassAllFilter(), nil},
		{bigtable.ChainFilters(bigtable.FamilyFilter("b"), bigtable.LabelFilter("l")),
			chain(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "b"}}, label("l"))},
		{bigtable.InterleaveFilters(bigtable.LatestNFilter(1), bigtable.ChainFilters(bigtable.ColumnFilter("y"), bigtable.LabelFilter("again"))),
			&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: []*bigtablepb.RowFilter{
				{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
				chain(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte("y")}}, label("again")),
			}}}}},
	}
	for i, fc := range filters {
		f := fc.client
		var want []string
		if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			want = append(want, formatRow(r))
			return true
		}, bigtable.RowFilter(f)); err != nil {
			t.Fatal(err)
		}
		var got []string
		stream := &takerStream{ctx: WithRowTaker(e.ctx, func(key []byte, cells []filter.LabeledCell) error {
			got = append(got, formatTaken(key, cells))
			return nil
		})}
		req := &bigtablepb.ReadRowsRequest{TableName: tableName("take"), Filter: fc.req}
		if err := ds.ReadRows(req, stream); err != nil {
			t.Fatalf("filter %d: %v", i, err)
		}
		if stream.sent != 0 {
			t.Errorf("filter %d: %d responses sent besides the rows taken", i, stream.sent)
		}
		if g, w := strings.Join(got, " "), strings.Join(want, " "); g != w {
			t.Errorf("filter %d:\n took %s\n read %s", i, g, w)
		}
		if len(want) == 0 {
			t.Fatalf("filter %d reads nothing: the comparison would hold for any taker", i)
		}
	}

	// An error of the taker ends the read with it.
	stop := errors.New("taker stops")
	calls := 0
	err := ds.ReadRows(&bigtablepb.ReadRowsRequest{TableName: tableName("take")}, &takerStream{ctx: WithRowTaker(e.ctx, func([]byte, []filter.LabeledCell) error {
		calls++
		return stop
	})})
	if err == nil || !strings.Contains(err.Error(), stop.Error()) || calls != 1 {
		t.Errorf("a failing taker: ReadRows returned %v after %d calls, want its error after 1", err, calls)
	}

	// Request stats travel in a response: refused, naming the field.
	err = ds.ReadRows(&bigtablepb.ReadRowsRequest{TableName: tableName("take"), RequestStatsView: bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL},
		&takerStream{ctx: WithRowTaker(e.ctx, func([]byte, []filter.LabeledCell) error { return nil })})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request_stats_view") {
		t.Errorf("request stats with a taker: %v, want INVALID_ARGUMENT naming request_stats_view", err)
	}
}

// formatTaken renders taken cells as formatRow renders the official
// client's row: families by name, each family's cells in order.
func formatTaken(key []byte, cells []filter.LabeledCell) string {
	r := bigtable.Row{}
	for _, c := range cells {
		r[c.Family] = append(r[c.Family], bigtable.ReadItem{Row: string(key), Column: c.Family + ":" + string(c.Qualifier),
			Timestamp: bigtable.Timestamp(c.Timestamp), Value: c.Value, Labels: c.Labels})
	}
	if len(r) == 0 {
		return string(key) + "{}"
	}
	return formatRow(r)
}
