package tabletpb

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestNotServingDetail(t *testing.T) {
	want := &NotServing{TableName: "projects/-/instances/i/tables/t", RowKey: []byte("row\x00"),
		TabletId: "t-1", TabletStart: []byte("m"), Reason: "closed"}
	st, err := status.New(codes.FailedPrecondition, "tablet t-1: not serving: closed").WithDetails(want)
	if err != nil {
		t.Fatal(err)
	}
	// As received: the status travels as its proto.
	received := status.ErrorProto(st.Proto())
	for _, e := range []error{received, fmt.Errorf("read row: %w", received)} {
		got, ok := NotServingDetail(e)
		if !ok || !proto.Equal(got, want) {
			t.Fatalf("NotServingDetail(%v) = %v, %v", e, got, ok)
		}
	}
	if id, err := meta.ParseTableName(want.TableName); err != nil || id != (meta.TableID{Instance: "i", Table: "t"}) {
		t.Fatalf("ParseTableName(%q) = %v, %v", want.TableName, id, err)
	}

	// Absent: the detail on another code, a FAILED_PRECONDITION without it,
	// other errors.
	other, err := status.New(codes.Unavailable, "x").WithDetails(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{
		nil,
		other.Err(),
		status.Error(codes.FailedPrecondition, "entries[0]: the existing value is 3 bytes"),
		status.Error(codes.NotFound, "table not found"),
		errors.New("tablet t-1: not serving: closed"),
	} {
		if got, ok := NotServingDetail(e); ok || got != nil {
			t.Fatalf("NotServingDetail(%v) = %v, %v; want nothing", e, got, ok)
		}
	}
}

// TestNotServingRoundTrip encodes with NotServingStatus and decodes what a
// gRPC client receives with NotServingDetail: the two ends of the wire.
func TestNotServingRoundTrip(t *testing.T) {
	ne := &tabletdesc.NotServingError{Tablet: "t-3", Row: []byte("row\x00"), Reason: "row outside the tablet's range"}
	describe := func(d *NotServing) {
		d.TableName = "projects/-/instances/i/tables/t"
		d.TabletStart, d.TabletEnd = []byte("a"), []byte("m")
	}
	for _, tc := range []struct {
		name     string
		err      error
		describe func(*NotServing)
		want     *NotServing
	}{
		{"described", fmt.Errorf("reading: %w", ne), describe, &NotServing{TableName: "projects/-/instances/i/tables/t",
			RowKey: []byte("row\x00"), TabletId: "t-3", TabletStart: []byte("a"), TabletEnd: []byte("m"), Reason: "row outside the tablet's range"}},
		{"no describer", ne, nil, &NotServing{RowKey: []byte("row\x00"), TabletId: "t-3", Reason: "row outside the tablet's range"}},
		// Only the sentinel: the reason is the error's text; nothing to describe.
		{"sentinel", tabletdesc.ErrNotServing, describe, &NotServing{Reason: tabletdesc.ErrNotServing.Error()}},
	} {
		sent := NotServingStatus(tc.err, tc.describe)
		st := status.Convert(sent)
		if st.Code() != codes.FailedPrecondition || st.Message() != tc.err.Error() {
			t.Fatalf("%s: status %v %q", tc.name, st.Code(), st.Message())
		}
		received := status.ErrorProto(st.Proto())
		got, ok := NotServingDetail(received)
		if !ok || !proto.Equal(got, tc.want) || !IsNotServing(received) {
			t.Fatalf("%s: got %v, %v; want %v", tc.name, got, ok, tc.want)
		}
	}
	if IsNotServing(status.Error(codes.FailedPrecondition, "entries[0]: the existing value is 3 bytes")) || IsNotServing(nil) {
		t.Fatal("IsNotServing of a plain FAILED_PRECONDITION or nil")
	}
}
