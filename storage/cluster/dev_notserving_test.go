package cluster

import (
	"context"
	"errors"
	"testing"

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

// ctxStream is a ServerStream with only a context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
