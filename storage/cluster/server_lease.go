package cluster

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/tabletserver"
)

// DefaultServerLease is ServerConfig.Lease's default: a tablet server
// fences itself 4 s after the start of its last successful session
// renewal (renewing every second), and the master reassigns an
// unreachable server's tablets 4.4 s after ending its session
// (coord.FenceWait) instead of the 11 s a 10 s TTL needs. Three renewals
// in a row may fail (a lock service slow under load) before the server
// stops serving; it serves again once a renewal succeeds (the lock
// service back within the TTL), and stops for good only when a whole TTL
// passes or the master ended its session. A false verdict costs
// availability or a reassignment, never safety.
const DefaultServerLease = 4 * time.Second

// leaseFence returns the interceptors that refuse every request while the
// server's lease is not valid (coord.Session.Valid, checked synchronously:
// the goroutine that stops a server whose lease lapsed may run late, for
// example right after a SIGCONT), so that a server that may have been
// replaced serves no read either — the Host fences writes and state saves
// itself (tabletserver.HostOptions.Lease). A read admitted while the lease
// is valid is linearizable at its admission: no other server can have
// acknowledged a write to the tablet before this server's lease ran out
// (the master waits coord.FenceWait of it). The refusal is
// tabletserver.ErrLeaseLapsed's UNAVAILABLE, which clients retry
// elsewhere.
func leaseFence(lease tabletserver.Lease) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	refuse := func() error {
		if lease.Valid() {
			return nil
		}
		return status.Error(codes.Unavailable, tabletserver.ErrLeaseLapsed.Error()+": this tablet server no longer serves")
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := refuse(); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := refuse(); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}
