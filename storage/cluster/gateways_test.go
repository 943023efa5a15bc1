package cluster

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/gateways"
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

// TestGatewaysDialDev: the official client works through a connection of
// storage/gateways seeded with a `tabula dev`: it writes and reads back a
// row, and every call goes to the dev's own address (its Locator lists
// itself, or it has none and the seed is used as given).
func TestGatewaysDialDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := StartDev(ctx, DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	conn, err := gateways.Dial([]string{d.Addr()}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, data := clientsOn(t, ctx, conn)
	defer admin.Close()
	defer data.Close()
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	tbl := data.Open("t")
	m := bigtable.NewMutation()
	m.Set("f", "q", bigtable.Now(), []byte("v"))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	row, err := tbl.ReadRow(ctx, "r")
	if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "v" {
		t.Fatalf("ReadRow through gateways: %v, %v", row, err)
	}
	var p peer.Peer
	if _, err := clusterpb.NewLocatorClient(conn).GetRoot(ctx, &clusterpb.GetRootRequest{}, grpc.Peer(&p)); err != nil && status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetRoot through gateways: %v", err)
	}
	if p.Addr == nil || p.Addr.String() != d.Addr() {
		t.Fatalf("call went to %v, want the dev at %s", p.Addr, d.Addr())
	}
}
