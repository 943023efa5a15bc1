package client

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestReconnectAfterServerRestart: a connection dialed with the client's
// options, whose server was down for 6 s (calls failing meanwhile, the
// reconnect back-off growing), answers again within ReconnectParams'
// MaxDelay and some slack after a server is back on the same address.
// With gRPC's default back-off (1 s growing by 1.6) the next dial would
// come about 3 s after the restart.
func TestReconnectAfterServerRestart(t *testing.T) {
	serve := func(addr string) (*grpc.Server, string) {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		go s.Serve(lis)
		return s, lis.Addr().String()
	}
	srv, addr := serve("127.0.0.1:0")
	var opts Options
	cc, err := grpc.NewClient(addr, opts.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	down := time.Now()
	for time.Since(down) < 6*time.Second {
		if err := check(); err == nil {
			t.Fatal("a call succeeded with the server stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv, _ = serve(addr)
	defer srv.Stop()
	back := time.Now()
	for check() != nil {
		if waited := time.Since(back); waited > ReconnectParams.Backoff.MaxDelay*2 {
			t.Fatalf("calls still fail %v after the server came back on %s", waited, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("answered %v after the server came back", time.Since(back).Round(time.Millisecond))
}
