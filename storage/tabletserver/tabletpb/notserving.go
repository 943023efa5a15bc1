package tabletpb

import (
	"bytes"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// This file is the one encoder and the one decoder of the "not serving"
// answer on the wire (DESIGN.md, "Wire protocol"): tablet servers and the
// gateway encode with NotServingStatus; the client and the gateway decode
// with NotServingDetail.

// NotServingStatus returns the FAILED_PRECONDITION status error a tablet
// server answers for err, an error matching tabletdesc.ErrNotServing, with a
// NotServing detail: the row, tablet and reason of err's
// *tabletdesc.NotServingError, or err's text as the reason when err holds
// none. describe, when not nil and err holds a NotServingError, completes
// the detail with what the server knows beyond the error (the table and the
// tablet's range). The status message is err's text.
func NotServingStatus(err error, describe func(*NotServing)) error {
	st := status.New(codes.FailedPrecondition, err.Error())
	d := &NotServing{}
	var ne *tabletdesc.NotServingError
	if errors.As(err, &ne) {
		d.RowKey = bytes.Clone(ne.Row)
		d.TabletId = ne.Tablet
		d.Reason = ne.Reason
		if describe != nil {
			describe(d)
		}
	} else {
		d.Reason = err.Error()
	}
	if ds, derr := st.WithDetails(d); derr == nil {
		st = ds
	}
	return st.Err()
}

// NotServingDetail returns the NotServing detail of err: a tablet server's
// FAILED_PRECONDITION for a row or tablet it does not serve. ok is false
// for nil, for errors that are not gRPC statuses (errors wrapping one are
// looked through), for other codes, and for a FAILED_PRECONDITION without
// the detail (a request whose precondition failed, such as an increment of
// a value that is not 8 bytes: not a reason to refresh locations).
//
// On ok the caller drops the location it sent the request to, looks the
// row up again and retries. The detail's table_name is
// projects/-/instances/I/tables/T (the server does not know the client's
// project; meta.ParseTableName accepts it); its other fields are empty
// where the server did not know them.
func NotServingDetail(err error) (*NotServing, bool) {
	if err == nil {
		return nil, false
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if ns, ok := d.(*NotServing); ok {
			return ns, true
		}
	}
	return nil, false
}

// IsNotServing reports whether err is a "not serving" answer: whether
// NotServingDetail finds a detail in it.
func IsNotServing(err error) bool {
	_, ok := NotServingDetail(err)
	return ok
}
