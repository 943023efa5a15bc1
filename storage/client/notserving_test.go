package client

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

func TestNotServingDetail(t *testing.T) {
	want := &tabletpb.NotServing{TableName: "projects/-/instances/i/tables/t", RowKey: []byte("row\x00"),
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
