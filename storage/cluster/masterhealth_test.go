package cluster

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveHealth serves hs on a loopback port and returns its address.
func serveHealth(t *testing.T, hs healthpb.HealthServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestProbeMasterWantsTheActiveMaster: the standby's probe passes only
// while the master at the address leads; one answering as a standby
// fails it (its session is one nobody acts on), as does an address where
// nothing answers. A master of an earlier version, which has no
// ActiveMasterHealthService, is probed for an answer only.
func TestProbeMasterWantsTheActiveMaster(t *testing.T) {
	ctx := t.Context()
	var leading atomic.Bool
	addr := serveHealth(t, masterHealth{Server: health.NewServer(), leading: leading.Load})
	older := serveHealth(t, health.NewServer())
	m := &Master{conns: newConns(nil)}
	defer m.conns.close()

	if err := m.probeMaster(ctx, addr); !errors.Is(err, errNotActive) {
		t.Fatalf("probe of a standby = %v, want errNotActive", err)
	}
	leading.Store(true)
	if err := m.probeMaster(ctx, addr); err != nil {
		t.Fatalf("probe of the active master = %v", err)
	}
	leading.Store(false)
	if err := m.probeMaster(ctx, addr); !errors.Is(err, errNotActive) {
		t.Fatalf("probe of a master that stood down = %v, want errNotActive", err)
	}
	// The process's own health (the empty service) does not depend on
	// leading: balancers and supervisors see a standby as healthy.
	cc, err := m.conns.get(addr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a standby's process health = %v, %v; want SERVING", resp.GetStatus(), err)
	}
	if err := m.probeMaster(ctx, older); err != nil {
		t.Fatalf("probe of a master without %s = %v, want its plain health (SERVING)", ActiveMasterHealthService, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	if err := m.probeMaster(ctx, gone); err == nil {
		t.Fatal("probe of an address where nothing listens succeeded")
	}
}
