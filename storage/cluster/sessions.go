package cluster

import (
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/storage/datasession"
)

// sessionLoad is the share of their single-row calls the clients are sent
// to sessions with: all, unless the server is configured classic-only.
// With authentication on too: each call on a session runs through the
// guard's interceptors as the classic call it stands for.
func sessionLoad(classicOnly bool) float32 {
	if classicOnly {
		return 0
	}
	return 1
}

// withSessions puts the session data plane (storage/datasession) in
// front of data: each call on a session runs through the server's
// interceptors unary and stream as the classic call it stands for.
func withSessions(data bigtablepb.BigtableServer, load float32, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, stopping <-chan struct{}, reg prometheus.Registerer) bigtablepb.BigtableServer {
	return datasession.Wrap(data, datasession.Options{
		Load: load, Unary: unary, Stream: stream, Stopping: stopping,
		Metrics: datasession.NewMetrics(reg),
	})
}
