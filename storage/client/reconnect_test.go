package client

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/meta"
)

// TestReconnectAfterServerRestart: a connection dialed with the client's
// options, whose server was down for 6 s (calls failing meanwhile, the
// reconnect back-off growing), answers again within ReconnectParams'
// MaxDelay and some slack after a server is back on the same address.
// With gRPC's default back-off (1 s growing by 1.6) the next dial would
// come about 3 s after the restart.
func TestReconnectAfterServerRestart(t *testing.T) {
	srv, addr := serveHealth(t, "127.0.0.1:0")
	var opts Options
	cc, err := grpc.NewClient(addr, opts.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	check := func() error { return healthCheck(cc) }
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
	srv, _ = serveHealth(t, addr)
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

// TestRedialAfterUnavailable: a connection in reconnect back-off fails
// every call with its last dial's error, even once a server is back on
// its address; after redial — what the retrier does on UNAVAILABLE — the
// next call dials again and is answered.
func TestRedialAfterUnavailable(t *testing.T) {
	c := newUnconnectedClient(t)
	srv, addr := serveHealth(t, "127.0.0.1:0")
	cc, err := c.plane.connAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	check := func() error { return healthCheck(cc) }
	if err := check(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	// Failing calls until the connection is in back-off.
	for c.plane.conns[addr].GetState() != connectivity.TransientFailure {
		if check() == nil {
			t.Fatal("a call succeeded with the server stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv, _ = serveHealth(t, addr)
	defer srv.Stop()
	if err := check(); err == nil {
		t.Fatal("a call on a connection in back-off succeeded: the test shows nothing")
	}
	c.plane.redial(addr + "/nonce")
	// The retrier's own back-off comes between: the dial is under way by
	// then, and a call waits for it.
	time.Sleep(5 * backoffFirst)
	if err := check(); err != nil {
		t.Fatalf("after redial: %v", err)
	}
}

// TestDeadlineExceededDropsLocation: an operation that ran out of time at
// a tablet's server is not retried, and the next one looks the tablet up
// again instead of asking the same, perhaps paused, server; other errors
// than UNAVAILABLE and "not serving" leave the cache alone.
func TestDeadlineExceededDropsLocation(t *testing.T) {
	c := newUnconnectedClient(t)
	table := meta.TableID{Instance: "i", Table: "t"}
	loc := meta.Location{Table: table, TabletID: "t0", Server: "127.0.0.1:2/paused", Epoch: 3}
	for _, tc := range []struct {
		code    codes.Code
		dropped bool
	}{{codes.InvalidArgument, false}, {codes.DeadlineExceeded, true}} {
		c.CacheLocations(loc)
		r := retrier{idempotent: true}
		in := status.Error(tc.code, "x")
		if got := r.retry(context.Background(), c.plane, loc, in); got != in {
			t.Fatalf("%v: retry returned %v, want the error itself", tc.code, got)
		}
		_, cached := c.plane.cache.Lookup(table, []byte("row"))
		if cached == tc.dropped {
			t.Fatalf("after %v the location is cached: %v, want %v", tc.code, cached, !tc.dropped)
		}
	}
}

// serveHealth serves gRPC's health service on addr ("host:0": a free
// port) and returns the server and its address.
func serveHealth(t *testing.T, addr string) (*grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	return s, lis.Addr().String()
}

// healthCheck makes one health check on cc, waiting at most a second.
func healthCheck(cc grpc.ClientConnInterface) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// newUnconnectedClient returns a client whose own connection goes nowhere:
// for tests of the connections and locations it keeps for other servers.
// Closed at the test's end.
func newUnconnectedClient(t *testing.T) *Client {
	t.Helper()
	home, err := grpc.NewClient("127.0.0.1:1", (&Options{}).dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	c := New(home, Options{})
	t.Cleanup(func() {
		c.Close()
		home.Close()
	})
	return c
}
