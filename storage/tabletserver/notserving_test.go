package tabletserver

import (
	"bytes"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// notServingOf returns the tabletpb.NotServing detail of a
// FAILED_PRECONDITION, read the way a gRPC client reads it.
func notServingOf(t *testing.T, err error) *tabletpb.NotServing {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		t.Fatalf("got %v, want FAILED_PRECONDITION", err)
	}
	var found *tabletpb.NotServing
	for _, d := range st.Details() {
		if ns, ok := d.(*tabletpb.NotServing); ok {
			if found != nil {
				t.Fatalf("two NotServing details in %v", st.Details())
			}
			found = ns
		}
	}
	if found == nil {
		t.Fatalf("no NotServing detail in %v (details %v)", err, st.Details())
	}
	return found
}

func wantDetail(t *testing.T, got, want *tabletpb.NotServing) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("detail\n got %v\nwant %v", got, want)
	}
}

func TestToStatusNotServingDetail(t *testing.T) {
	err := toStatus(&tabletdesc.NotServingError{Tablet: "t-3", Row: []byte("row\x00"), Reason: "row outside the tablet's range"})
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{TabletId: "t-3", RowKey: []byte("row\x00"), Reason: "row outside the tablet's range"})
	if msg := status.Convert(err).Message(); msg != `tablet t-3: not serving row "row\x00": row outside the tablet's range` {
		t.Fatalf("message %q", msg)
	}
	// Wrapped, whole tablet.
	err = toStatus(&rowError{key: []byte("k"), err: &tabletdesc.NotServingError{Tablet: "t-1", Reason: "closed"}})
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{TabletId: "t-1", Reason: "closed"})
	// Only the sentinel: the message is the reason.
	err = toStatus(tabletdesc.ErrNotServing)
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{Reason: tabletdesc.ErrNotServing.Error()})
	// Other codes carry no detail.
	if d := status.Convert(toStatus(&tablet.FamilyNotFoundError{Family: "f"})).Details(); len(d) != 0 {
		t.Fatalf("NOT_FOUND with details %v", d)
	}
}

// TestNotServingDetailOverGRPC makes the Host's routing stale in three ways
// and checks the detail a gRPC client reads (status.FromError → Details)
// once the server's internal retries give up.
func TestNotServingDetailOverGRPC(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	d := tableDef{name: "t", families: []string{"f"}, splits: []string{"m"}}
	tbl := e.createTable(d)
	ctx := e.ctx
	st, err := e.host.table(e.tableMeta(d).ID)
	if err != nil {
		t.Fatal(err)
	}
	orig := st.routes.Load()
	defer st.routes.Store(orig)
	left, right := orig.tabs[0], orig.tabs[1]
	if left.ID() != "t-0" || right.ID() != "t-1" {
		t.Fatalf("tablets %s, %s", left.ID(), right.ID())
	}
	table := "projects/-/instances/" + testInstance + "/tables/t"
	mut := bigtable.NewMutation()
	mut.Set("f", "q", ts(1), []byte("v"))

	setCell := []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
		FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 1000, Value: []byte("v")}}}}

	// 1. The routing sends every row to the left tablet: the row is
	// outside its range. Through the generated gRPC stub (what Tabula's
	// client uses) the detail arrives.
	st.routes.Store(&routing{tabs: []*tablet.Tablet{left}, ranges: []tabletdesc.KeyRange{{}}})
	_, err = e.stub.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tableName("t"), RowKey: []byte("z"), Mutations: setCell})
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{TableName: table, RowKey: []byte("z"), TabletId: "t-0",
		TabletEnd: []byte("m"), Reason: "row outside the tablet's range"})
	// cloud.google.com/go/bigtable rebuilds the status from code and
	// message (internal/metrics.ConvertToGrpcStatusErr): its users see
	// the code, not the detail.
	err = tbl.Apply(ctx, "z", mut)
	wantCode(t, err, codes.FailedPrecondition, "not serving", "row outside the tablet's range")
	// The same through MutateRows: the entry's status carries it.
	stream, err := e.stub.MutateRows(ctx, &bigtablepb.MutateRowsRequest{TableName: tableName("t"),
		Entries: []*bigtablepb.MutateRowsRequest_Entry{{RowKey: []byte("z"), Mutations: setCell}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetEntries()); n != 1 {
		t.Fatalf("%d entries", n)
	}
	wantDetail(t, notServingOf(t, status.ErrorProto(resp.Entries[0].GetStatus())), &tabletpb.NotServing{TableName: table,
		RowKey: []byte("z"), TabletId: "t-0", TabletEnd: []byte("m"), Reason: "row outside the tablet's range"})

	// 2. No tablet of the routing holds the row.
	st.routes.Store(&routing{tabs: []*tablet.Tablet{left}, ranges: []tabletdesc.KeyRange{{End: []byte("m")}}})
	_, err = e.stub.CheckAndMutateRow(ctx, &bigtablepb.CheckAndMutateRowRequest{TableName: tableName("t"), RowKey: []byte("z"), TrueMutations: setCell})
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{TableName: table, RowKey: []byte("z"), Reason: "no tablet holds the row"})

	// 3. The routing holds a tablet that was closed (as by an unload).
	st.routes.Store(orig)
	if err := right.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := e.stub.ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t"),
		Rows: &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("n")}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rows.Recv()
	wantDetail(t, notServingOf(t, err), &tabletpb.NotServing{TableName: table, RowKey: []byte("n"), TabletId: "t-1",
		TabletStart: []byte("m"), Reason: "closed"})
	// Rows of the left tablet are still served.
	if err := tbl.Apply(ctx, "a", mut); err != nil {
		t.Fatal(err)
	}

	// The script service converts with the same Host.
	ss := NewScriptService(e.host, ScriptOptions{Logger: quietLogger()})
	err = ss.runError("s.szl", &tabletdesc.NotServingError{Tablet: "t-1", Reason: "closed"})
	if got := notServingOf(t, err); got.GetTableName() != table || !bytes.Equal(got.GetTabletStart(), []byte("m")) {
		t.Fatalf("script service detail %v", got)
	}
}
