package remote

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/coord"
)

// fastPool heartbeats quickly so that loss is detected in well under a
// second.
var fastPool = PoolOptions{HeartbeatInterval: 20 * time.Millisecond, LostAfter: 200 * time.Millisecond}

func startTestWorker(t *testing.T, addr string, svc coord.Service, slots int, opts ...grpc.ServerOption) *Worker {
	t.Helper()
	w, err := StartWorker(context.Background(), WorkerConfig{
		Addr: addr, Coord: svc,
		Worker:        mapreduce.LocalWorkerConfig{Dir: t.TempDir(), Slots: slots},
		ServerOptions: opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func waitLost(t *testing.T, w mapreduce.Worker) error {
	t.Helper()
	select {
	case <-w.Lost():
		return w.(*Client).LostErr()
	case <-time.After(10 * time.Second):
		t.Fatalf("worker %s not declared lost after 10s", w.Name())
	}
	return nil
}

// The Consul pool follows registrations: workers join as they register,
// and one that unregisters is lost at once.
func TestConsulPoolFollowsRegistrations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	defer svc.Close()
	a := startTestWorker(t, "127.0.0.1:0", svc, 2)
	pool, err := NewConsulPool(svc, fastPool)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b := startTestWorker(t, "127.0.0.1:0", svc, 3)
	ws, err := pool.WaitWorkers(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]mapreduce.Worker{}
	for _, w := range ws {
		byName[w.Name()] = w
	}
	if wa, wb := byName[a.Name()], byName[b.Name()]; wa == nil || wb == nil || wa.Slots() != 2 || wb.Slots() != 3 || wa.Host() != "127.0.0.1" {
		t.Fatalf("pool workers %v, want %s (2 slots) and %s (3 slots) on 127.0.0.1", ws, a.Name(), b.Name())
	}
	a.Close()
	err = waitLost(t, byName[a.Name()])
	if err == nil || !strings.Contains(err.Error(), "unregistered") {
		t.Fatalf("lost because %v, want unregistered", err)
	}
	if got := pool.Workers(); len(got) != 1 || got[0].Name() != b.Name() {
		t.Fatalf("workers after a left: %v", got)
	}
	select {
	case <-byName[b.Name()].Lost():
		t.Fatal("b lost")
	default:
	}
}

// A worker that stops answering while still registered (hung, or its
// session not yet expired after a kill -9) is lost after LostAfter.
func TestPoolHeartbeatLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	defer svc.Close()
	w := startTestWorker(t, "127.0.0.1:0", svc, 1)
	pool, err := NewConsulPool(svc, fastPool)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.grpc.Stop() // the registration stays
	err = waitLost(t, ws[0])
	if err == nil || !strings.Contains(err.Error(), "no heartbeat") {
		t.Fatalf("lost because %v, want no heartbeat", err)
	}
}

// A static pool asks its addresses who serves there: a worker restarted at
// the same address is a new member, and the old one is lost.
func TestStaticPoolSeesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := startTestWorker(t, "127.0.0.1:0", nil, 1)
	addr := first.Addr()
	pool, err := NewStaticPool([]string{addr}, fastPool)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	old := ws[0]
	if old.Name() != first.Name() {
		t.Fatalf("pool member %s, want %s", old.Name(), first.Name())
	}
	first.Close()
	second := startTestWorker(t, addr, nil, 1)
	waitLost(t, old)
	waitUntil(t, "restarted worker joins", func() bool {
		ws := pool.Workers()
		return len(ws) == 1 && ws[0].Name() == second.Name()
	})
	if second.Name() == first.Name() {
		t.Fatal("a restarted worker kept its name")
	}
}

func TestStaticPoolRejectsEmpty(t *testing.T) {
	if _, err := NewStaticPool(nil, PoolOptions{}); err == nil {
		t.Fatal("empty address list accepted")
	}
}

// A Consul pool's worker that stops answering while it stays registered
// (paused, cut off) is lost, and rejoins under its name once it answers
// again — its registration will not announce it a second time.
func TestConsulPoolRejoinsSilentWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	defer svc.Close()
	w := startTestWorker(t, "127.0.0.1:0", svc, 1)
	var cut atomic.Bool
	opts := fastPool
	opts.DialOptions = []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if cut.Load() {
			return status.Error(codes.Unavailable, "test: cut off")
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	})}
	pool, err := NewConsulPool(svc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cut.Store(true)
	if err := waitLost(t, ws[0]); err == nil || !strings.Contains(err.Error(), "no heartbeat") {
		t.Fatalf("lost because %v, want no heartbeat", err)
	}
	if got := pool.Workers(); len(got) != 0 {
		t.Fatalf("workers while cut off: %v", got)
	}
	cut.Store(false)
	back, err := pool.WaitWorkers(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if back[0].Name() != w.Name() || back[0] == ws[0] || isLostNow(back[0]) {
		t.Fatalf("after the cut: member %s (same client: %v), want a new live member named %s", back[0].Name(), back[0] == ws[0], w.Name())
	}
	// A late declaration by the replaced client (a probe of a call that
	// failed on its connection) leaves its successor of the same name be.
	ws[0].(*Client).declare(errors.New("test: a late probe of the old client"))
	if isLostNow(back[0]) {
		t.Fatalf("the rejoined member was lost by its predecessor's late probe: %v", back[0].(*Client).LostErr())
	}
	if got := pool.Workers(); len(got) != 1 || got[0] != back[0] {
		t.Fatalf("workers after the old client's late probe: %v, want the rejoined member", got)
	}
}

func isLostNow(w mapreduce.Worker) bool {
	select {
	case <-w.Lost():
		return true
	default:
		return false
	}
}

// TestStartWorkerFailsCleanly: a worker whose registration fails — after
// its gRPC server began serving — returns the error, every time.
func TestStartWorkerFailsCleanly(t *testing.T) {
	svc := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		w, err := StartWorker(context.Background(), WorkerConfig{
			Addr: "127.0.0.1:0", Coord: svc,
			Worker: mapreduce.LocalWorkerConfig{Dir: t.TempDir(), Slots: 1},
		})
		if err == nil {
			w.Close()
			t.Fatal("a worker registered with a closed lock service")
		}
	}
}
