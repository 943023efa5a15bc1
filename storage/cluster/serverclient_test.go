package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/master"
)

// namedServer answers ListTablets as the tablet server named name, serving
// nothing.
type namedServer struct {
	clusterpb.UnimplementedTabletControlServer
	name string
}

func (s namedServer) ListTablets(context.Context, *clusterpb.ListTabletsRequest) (*clusterpb.ListTabletsResponse, error) {
	return &clusterpb.ListTabletsResponse{ServerId: s.name}, nil
}

// serveNamed starts a TabletControl server named addr+"/"+id on addr
// ("127.0.0.1:0": any port) and returns its address.
func serveNamed(t *testing.T, addr, id string) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	clusterpb.RegisterTabletControlServer(srv, namedServer{name: lis.Addr().String() + "/" + id})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// A tablet server killed and started again on its address is reported
// gone (another process answers there) as soon as the new one listens —
// not unreachable for as long as gRPC's reconnect back-off keeps failing
// calls with the refused dial of the meantime. The master ends a gone
// server's session after GoneAfter (1 s), an unreachable one's only after
// UnreachableAfter (3 s).
func TestListSeesServerRestartedOnItsAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, first := serveNamed(t, "127.0.0.1:0", "first")
	conns := newConns(nil)
	defer conns.close()
	sc := &serverClient{conns: conns}
	old := addr + "/first"
	if _, err := sc.List(ctx, old); err != nil {
		t.Fatalf("List of the running server: %v", err)
	}
	first.Stop() // killed: its connection breaks, nothing listens
	// The master's rounds ask every quarter second meanwhile; the
	// connection's dials fail, and its back-off grows.
	for gone := 0; gone < 4; {
		_, err := sc.List(ctx, old)
		if errors.Is(err, master.ErrServerGone) {
			gone++
		}
		if ctx.Err() != nil {
			t.Fatalf("List after the kill never said gone: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	serveNamed(t, addr, "second") // the supervisor starts it again
	for i := range 3 {
		_, err := sc.List(ctx, old)
		if !errors.Is(err, master.ErrServerGone) {
			t.Fatalf("List %d of the killed server once another listens at its address: %v, want ErrServerGone", i, err)
		}
	}
	if _, err := sc.List(ctx, addr+"/second"); err != nil {
		t.Fatalf("List of the new server: %v", err)
	}
}

// A connection that loses its ready transport — the server's process died
// — is reported at once (the master pokes its loop so), one that was
// never ready is not, and none after close.
func TestConnsNotifyBreaks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, srv := serveNamed(t, "127.0.0.1:0", "a")
	conns := newConns(nil)
	broke := make(chan struct{}, 10)
	conns.notifyBreaks(func() { broke <- struct{}{} })
	sc := &serverClient{conns: conns}
	if _, err := sc.List(ctx, addr+"/a"); err != nil {
		t.Fatal(err)
	}
	// An address nothing listens at: its dials fail, it is never ready.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	_ = lis.Close()
	if _, err := sc.List(ctx, dead+"/b"); !errors.Is(err, master.ErrServerGone) {
		t.Fatalf("List at %s: %v, want ErrServerGone", dead, err)
	}
	select {
	case <-broke:
		t.Fatal("a break reported before any ready connection broke")
	case <-time.After(200 * time.Millisecond):
	}
	srv.Stop()
	select {
	case <-broke:
	case <-ctx.Done():
		t.Fatal("the ready connection's break was not reported")
	}
	conns.close()
	select {
	case <-broke:
		t.Fatal("a second break reported for one")
	case <-time.After(200 * time.Millisecond):
	}
}
