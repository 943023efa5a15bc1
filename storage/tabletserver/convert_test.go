package tabletserver

import (
	"errors"
	"fmt"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestRowRanges(t *testing.T) {
	closedOpen := func(s, e string) *bigtablepb.RowRange {
		r := &bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: []byte(s)}}
		if e != "" {
			r.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: []byte(e)}
		}
		return r
	}
	format := func(rs []tabletdesc.KeyRange) string {
		out := ""
		for _, r := range rs {
			end := "∞"
			if r.End != nil {
				end = fmt.Sprintf("%q", r.End)
			}
			out += fmt.Sprintf("[%q,%s)", r.Start, end)
		}
		return out
	}
	cases := []struct {
		name string
		rs   *bigtablepb.RowSet
		want string
	}{
		{"nil is everything", nil, `["",∞)`},
		{"empty is everything", &bigtablepb.RowSet{}, `["",∞)`},
		{"keys sorted, deduplicated", &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("b"), []byte("a"), []byte("b")}}, `["a","a\x00")["b","b\x00")`},
		{"key inside a range merges", &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("b")}, RowRanges: []*bigtablepb.RowRange{closedOpen("a", "c")}}, `["a","c")`},
		{"adjacent ranges merge", &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{closedOpen("c", "d"), closedOpen("a", "c")}}, `["a","d")`},
		{"unbounded swallows", &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{closedOpen("b", ""), closedOpen("c", "d")}}, `["b",∞)`},
		{"empty range dropped", &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{closedOpen("b", "b")}}, ``},
		{"open start, closed end", &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{{
			StartKey: &bigtablepb.RowRange_StartKeyOpen{StartKeyOpen: []byte("a")},
			EndKey:   &bigtablepb.RowRange_EndKeyClosed{EndKeyClosed: []byte("c")}}}}, `["a\x00","c\x00")`},
	}
	for _, c := range cases {
		got, err := RowRanges(c.rs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if format(got) != c.want {
			t.Errorf("%s: got %s want %s", c.name, format(got), c.want)
		}
	}
	if _, err := RowRanges(&bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{closedOpen("c", "b")}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("inverted range: %v", err)
	}
	if !(tabletdesc.KeyRange{Start: []byte("k"), End: []byte("k\x00")}).SingleRow() || (tabletdesc.KeyRange{Start: []byte("k"), End: []byte("l")}).SingleRow() {
		t.Fatal("SingleRow")
	}
}

func TestToStatus(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{&cell.InvalidArgumentError{Field: "row_key", Reason: "empty"}, codes.InvalidArgument},
		{fmt.Errorf("x: %w", meta.ErrBadName), codes.InvalidArgument},
		{&tablet.FamilyNotFoundError{Family: "f"}, codes.NotFound},
		{fmt.Errorf("%w: t", ErrTableNotFound), codes.NotFound},
		{&tabletdesc.NotServingError{Tablet: "t", Reason: "split"}, codes.FailedPrecondition},
		{fmt.Errorf("flush: %w", commitlog.ErrFailed), codes.Unavailable},
		{fmt.Errorf("tablet: %w", tablet.ErrFailed), codes.Unavailable},
		{status.Error(codes.ResourceExhausted, "kept"), codes.ResourceExhausted},
		{errors.New("mystery"), codes.Internal},
	}
	for _, c := range cases {
		if got := status.Code(toStatus(c.err)); got != c.code {
			t.Errorf("%v: got %v want %v", c.err, got, c.code)
		}
	}
	if toStatus(nil) != nil {
		t.Fatal("nil error became a status")
	}
}
