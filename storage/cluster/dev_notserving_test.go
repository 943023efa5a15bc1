package cluster

import (
	"context"
	"errors"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// TestDevNotServingAnswers: tabula dev answers a tablet not served for a
// moment as UNAVAILABLE to the data API's callers, which the official
// clients retry, and keeps FAILED_PRECONDITION with its detail for
// Tabula's own client (its user agent), for which it means "not applied,
// look the tablet up again", and for the other services.
func TestDevNotServingAnswers(t *testing.T) {
	notServing := tabletpb.NotServingStatus(&tabletdesc.NotServingError{Tablet: "t1", Reason: "merging"}, nil)
	other := status.Error(codes.InvalidArgument, "bad")
	incoming := func(ua string) context.Context {
		if ua == "" {
			return context.Background()
		}
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", ua))
	}
	for _, tc := range []struct {
		name, method, ua string
		err              error
		want             codes.Code
	}{
		{"official client", "/google.bigtable.v2.Bigtable/ReadRows", "grpc-go/1.79.0", notServing, codes.Unavailable},
		{"no user agent", "/google.bigtable.v2.Bigtable/MutateRow", "", notServing, codes.Unavailable},
		{"tabula's client", "/google.bigtable.v2.Bigtable/ReadRows", client.UserAgent + " grpc-go/1.79.0", notServing, codes.FailedPrecondition},
		{"other service", "/tabula.scripts.v1.Scripts/Run", "grpc-go/1.79.0", notServing, codes.FailedPrecondition},
		{"other error", "/google.bigtable.v2.Bigtable/ReadRows", "grpc-go/1.79.0", other, codes.InvalidArgument},
		{"no error", "/google.bigtable.v2.Bigtable/ReadRows", "grpc-go/1.79.0", nil, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, uerr := notServingUnary(incoming(tc.ua), nil, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { return nil, tc.err })
			serr := notServingStream(nil, &ctxStream{ctx: incoming(tc.ua)}, &grpc.StreamServerInfo{FullMethod: tc.method},
				func(any, grpc.ServerStream) error { return tc.err })
			for what, err := range map[string]error{"unary": uerr, "stream": serr} {
				if status.Code(err) != tc.want {
					t.Errorf("%s: %v, want %v", what, err, tc.want)
				}
				if tc.err != nil && status.Convert(err).Message() != status.Convert(tc.err).Message() {
					t.Errorf("%s: message %q, want %q", what, status.Convert(err).Message(), status.Convert(tc.err).Message())
				}
				if tc.want == codes.FailedPrecondition && !errors.Is(err, tc.err) && !tabletpb.IsNotServing(err) {
					t.Errorf("%s: the not-serving detail was lost: %v", what, err)
				}
			}
		})
	}
}

// TestDevNotServingEntries: in a MutateRows response, an entry answered
// "not serving" reaches an official client as UNAVAILABLE (which it
// retries), the OK entries stay OK, and Tabula's own client sees the
// entries as they were.
func TestDevNotServingEntries(t *testing.T) {
	notServing := status.Convert(tabletpb.NotServingStatus(&tabletdesc.NotServingError{Tablet: "t1", Reason: "merging"}, nil)).Proto()
	for _, tc := range []struct {
		ua   string
		want codes.Code
	}{
		{"grpc-go/1.79.0", codes.Unavailable},
		{client.UserAgent + " grpc-go/1.79.0", codes.FailedPrecondition},
	} {
		ok := &statuspb.Status{}
		resp := &bigtablepb.MutateRowsResponse{Entries: []*bigtablepb.MutateRowsResponse_Entry{
			{Index: 0, Status: ok}, {Index: 1, Status: notServing}, {Index: 2, Status: ok}}}
		ss := &ctxStream{ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", tc.ua))}
		err := notServingStream(nil, ss, &grpc.StreamServerInfo{FullMethod: "/google.bigtable.v2.Bigtable/MutateRows"},
			func(_ any, s grpc.ServerStream) error { return s.SendMsg(resp) })
		if err != nil {
			t.Fatal(err)
		}
		got := ss.sent[0].(*bigtablepb.MutateRowsResponse).GetEntries()
		if codes.Code(got[1].GetStatus().GetCode()) != tc.want || got[1].GetStatus().GetMessage() != notServing.GetMessage() {
			t.Errorf("%s: the not-serving entry is %v, want %v with its message", tc.ua, got[1].GetStatus(), tc.want)
		}
		if got[0].GetStatus().GetCode() != 0 || got[2].GetStatus().GetCode() != 0 || ok.GetCode() != 0 {
			t.Errorf("%s: OK entries changed: %v", tc.ua, got)
		}
	}
}

// ctxStream is a ServerStream with only a context, keeping what is sent.
type ctxStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []any
}

func (s *ctxStream) Context() context.Context { return s.ctx }

func (s *ctxStream) SendMsg(m any) error {
	s.sent = append(s.sent, m)
	return nil
}
