package cluster

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/coord"
)

// TestListGateways: any tablet server lists every tablet server whose key
// is held — a server that stopped cleanly (its key released, then gone)
// is left out.
func TestListGateways(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	t.Cleanup(func() { _ = kv.Close() })
	store := newLocalStore(t)
	start := func() *TabletServer {
		s, err := StartTabletServer(ctx, ServerConfig{Coord: kv, Store: store, LogDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := start(), start()
	// A released key (a server stopping, or one whose session the master
	// ended) is no gateway.
	if err := kv.Put(ctx, coord.ServerKey("released"), coord.ServerRecord{Addr: "127.0.0.1:1"}.Encode()); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	list := func() []string {
		t.Helper()
		resp, err := clusterpb.NewLocatorClient(cc).ListGateways(ctx, &clusterpb.ListGatewaysRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAddrs()
	}
	want := []string{a.addr, b.addr}
	slices.Sort(want)
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("ListGateways = %v, want %v", got, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("after b closed: ListGateways = %v, want [%s]", got, a.addr)
	}
}

// TestReportHealth: the health service says NOT_SERVING while the lease
// is not valid, SERVING again once it is, and NOT_SERVING from the moment
// the server begins stopping.
func TestReportHealth(t *testing.T) {
	hs := health.NewServer()
	var valid atomic.Bool
	valid.Store(true)
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() { reportHealth(hs, valid.Load, stopping, slog.New(slog.DiscardHandler)); close(done) }()
	wait := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health %v (%v), want %v", resp.GetStatus(), err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(healthpb.HealthCheckResponse_SERVING)
	valid.Store(false)
	wait(healthpb.HealthCheckResponse_NOT_SERVING)
	valid.Store(true)
	wait(healthpb.HealthCheckResponse_SERVING)
	close(stopping)
	<-done
	wait(healthpb.HealthCheckResponse_NOT_SERVING)
}
