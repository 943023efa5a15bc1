package client

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// NotServingDetail returns the tabletpb.NotServing detail of err: a tablet
// server's FAILED_PRECONDITION for a row or tablet it does not serve
// (DESIGN.md, "Wire protocol"). ok is false for nil, for errors that are
// not gRPC statuses (errors wrapping one are looked through), for other
// codes, and for a FAILED_PRECONDITION without the detail (a request whose
// precondition failed, such as an increment of a value that is not 8
// bytes: not a reason to refresh locations).
//
// On ok the caller drops the location it sent the request to
// (LocationCache.Invalidate), looks the row up again and retries. The
// detail's table_name is projects/-/instances/I/tables/T (the server does
// not know the client's project; meta.ParseTableName accepts it); its
// other fields are empty where the server did not know them.
func NotServingDetail(err error) (*tabletpb.NotServing, bool) {
	if err == nil {
		return nil, false
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if ns, ok := d.(*tabletpb.NotServing); ok {
			return ns, true
		}
	}
	return nil, false
}
