package filter

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is an invalid RowFilter: Field is the path of the offending field in
// the request, in the proto's field names (for example
// "filter.chain.filters[1].value_regex_filter"), and Reason says what is wrong
// with it and, for limits, what the limit is.
//
// An Error is always the client's fault: it carries the gRPC code
// INVALID_ARGUMENT, which status.FromError and status.Code pick up through
// GRPCStatus, so the server can return it as is.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// GRPCStatus reports the error as INVALID_ARGUMENT with the field and reason
// in the message, as Cloud Bigtable names the offending field.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, "invalid row filter: "+e.Error())
}

func errorf(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}
