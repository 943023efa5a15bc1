package gateways

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
)

// fakeServer is a tablet server as a client of this package sees it: the
// data API (PingAndWarm, counted), the health service and, unless
// noLocator, the Locator's ListGateways answering list().
type fakeServer struct {
	bigtablepb.UnimplementedBigtableServer
	clusterpb.UnimplementedLocatorServer
	addr   string
	calls  atomic.Int64
	health *health.Server
	list   func() []string
	stop   func() // stops serving, closing every connection
}

func (f *fakeServer) PingAndWarm(context.Context, *bigtablepb.PingAndWarmRequest) (*bigtablepb.PingAndWarmResponse, error) {
	f.calls.Add(1)
	return &bigtablepb.PingAndWarmResponse{}, nil
}

func (f *fakeServer) ListGateways(context.Context, *clusterpb.ListGatewaysRequest) (*clusterpb.ListGatewaysResponse, error) {
	return &clusterpb.ListGatewaysResponse{Addrs: f.list()}, nil
}

// startServer serves a fakeServer on lis (a loopback listener when nil).
func startServer(t *testing.T, lis net.Listener, noLocator bool, list func() []string) *fakeServer {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeServer{addr: lis.Addr().String(), health: health.NewServer(), list: list}
	s := grpc.NewServer()
	f.stop = s.Stop
	bigtablepb.RegisterBigtableServer(s, f)
	healthpb.RegisterHealthServer(s, f.health)
	if !noLocator {
		clusterpb.RegisterLocatorServer(s, f)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return f
}

// cluster starts n fake servers that list one another.
func cluster(t *testing.T, n int) []*fakeServer {
	t.Helper()
	var mu sync.Mutex
	var addrs []string
	list := func() []string { mu.Lock(); defer mu.Unlock(); return addrs }
	var out []*fakeServer
	for range n {
		f := startServer(t, nil, false, list)
		mu.Lock()
		addrs = append(addrs, f.addr)
		mu.Unlock()
		out = append(out, f)
	}
	return out
}

func dial(t *testing.T, seeds ...string) bigtablepb.BigtableClient {
	t.Helper()
	cc, err := DialWith(seeds, Options{Refresh: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return bigtablepb.NewBigtableClient(cc)
}

// pingUntil calls PingAndWarm (each call with a deadline of its own) until
// done says so or 10 s pass.
func pingUntil(t *testing.T, c bigtablepb.BigtableClient, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, _ = c.PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{})
		cancel()
	}
}

func counts(fs []*fakeServer) []int64 {
	var out []int64
	for _, f := range fs {
		out = append(out, f.calls.Load())
	}
	return out
}

// Given one seed, the client learns every server from it and spreads its
// calls over all of them.
func TestDialSpreadsOverListedServers(t *testing.T) {
	fs := cluster(t, 3)
	c := dial(t, fs[0].addr)
	pingUntil(t, c, "calls on every server", func() bool {
		for _, n := range counts(fs) {
			if n < 5 {
				return false
			}
		}
		return true
	})
}

// A server whose health service says NOT_SERVING (a tablet server whose
// lease lapsed) gets no calls until it says SERVING again.
func TestDialSkipsServersNotServing(t *testing.T) {
	fs := cluster(t, 3)
	c := dial(t, fs[0].addr)
	pingUntil(t, c, "calls on every server", func() bool { return min(counts(fs)[0], counts(fs)[1], counts(fs)[2]) > 0 })
	fs[1].health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	// The health watch tells the client at once, the checks within a
	// second: from then on, 60 calls in a row go to the others.
	changed := time.Now()
	var before int64
	for {
		if time.Since(changed) > 5*time.Second {
			t.Fatalf("the server not serving still gets calls %v after it said so", time.Since(changed))
		}
		before = fs[1].calls.Load()
		for range 60 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if _, err := c.PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{}); err != nil {
				t.Fatalf("a call failed while two servers serve: %v", err)
			}
			cancel()
		}
		if fs[1].calls.Load() == before {
			break
		}
	}
	t.Logf("60 calls in a row skipped the server not serving, done %v after it said so", time.Since(changed).Round(time.Millisecond))
	fs[1].health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	pingUntil(t, c, "calls on the server serving again", func() bool { return fs[1].calls.Load() > before })
}

// A server that stops answering without closing its connections (a paused
// process) leaves the rotation once a health check goes unanswered:
// within a second or two every call succeeds on the others.
func TestDialLeavesSilentServer(t *testing.T) {
	fs := cluster(t, 2)
	// The third server behind a proxy that can go silent.
	var mu sync.Mutex
	var addrs []string
	p := newFreezingProxy(t)
	third := startServer(t, p.backend, false, func() []string { mu.Lock(); defer mu.Unlock(); return addrs })
	mu.Lock()
	addrs = []string{fs[0].addr, fs[1].addr, p.addr}
	mu.Unlock()
	for _, f := range fs {
		f.list = func() []string { mu.Lock(); defer mu.Unlock(); return addrs }
	}
	all := append(fs, third)
	c := dial(t, fs[0].addr)
	pingUntil(t, c, "calls on every server", func() bool { return min(counts(all)[0], counts(all)[1], counts(all)[2]) > 0 })

	p.freeze()
	frozenAt := time.Now()
	// Calls in a row: those sent to the silent server time out; once it
	// is out of the rotation, 20 in a row succeed.
	ok := 0
	for ok < 20 {
		if time.Since(frozenAt) > 15*time.Second {
			t.Fatalf("calls still failing %v after the server went silent", time.Since(frozenAt))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{})
		cancel()
		if err != nil {
			ok = 0
			continue
		}
		ok++
	}
	t.Logf("calls succeed again %v after the server went silent", time.Since(frozenAt).Round(10*time.Millisecond))
}

// A server that stops and comes back on its address (a supervisor's
// restart) is back in the rotation within seconds, however long it was
// away.
func TestDialTakesBackRestartedServer(t *testing.T) {
	fs := cluster(t, 2)
	c := dial(t, fs[0].addr)
	pingUntil(t, c, "calls on both servers", func() bool { return min(counts(fs)[0], counts(fs)[1]) > 0 })
	addr, list := fs[1].addr, fs[1].list
	fs[1].stop()
	// Away long enough for gRPC's default reconnect back-off to grow
	// past 3 s (attempts about 1, 2.6, 5.2, 9.3 and 16 s after the stop).
	// A call made as the connection breaks may fail with it (the client
	// retries such a call); once the break is seen, calls go to the
	// other server.
	time.Sleep(time.Second)
	for range 11 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := c.PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{}); err != nil {
			t.Errorf("a call failed with one server away for a second or more: %v", err)
		}
		cancel()
		time.Sleep(time.Second)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	back := startServer(t, lis, false, list)
	start := time.Now()
	pingUntil(t, c, "calls on the restarted server", func() bool { return back.calls.Load() > 0 })
	took := time.Since(start)
	t.Logf("back in the rotation %v after its restart", took.Round(10*time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("back in the rotation %v after its restart, want within 3 s", took)
	}
}

// A target without ListGateways (`tabula dev`, the emulator) is used as
// given: every seed gets calls.
func TestDialWithoutLocatorUsesSeeds(t *testing.T) {
	a := startServer(t, nil, true, nil)
	b := startServer(t, nil, true, nil)
	c := dial(t, a.addr, b.addr)
	pingUntil(t, c, "calls on both seeds", func() bool { return a.calls.Load() > 0 && b.calls.Load() > 0 })
}

func TestDialRejectsBadSeeds(t *testing.T) {
	for _, seeds := range [][]string{nil, {""}, {"a:1,b:2"}} {
		if _, err := Dial(seeds, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			t.Errorf("Dial(%q): no error", seeds)
		}
	}
}

// The resolver asks the servers of its last list before the seeds, and
// falls back to the seeds when none of those answers.
func TestAskOrder(t *testing.T) {
	l := &scriptedLister{answers: map[string][]string{"s1:1": {"a:1", "b:1"}}, down: map[string]bool{}}
	r := &listResolver{seeds: []string{"s1:1"}, lister: l}
	got, err := r.ask(context.Background())
	if err != nil || strings.Join(got, ",") != "a:1,b:1" {
		t.Fatalf("first ask: %v, %v", got, err)
	}
	r.listed = got
	l.answers["b:1"] = []string{"b:1", "c:1"}
	l.down["a:1"] = true
	l.asked = nil
	got, err = r.ask(context.Background())
	if err != nil || strings.Join(got, ",") != "b:1,c:1" || strings.Join(l.asked, ",") != "a:1,b:1" {
		t.Fatalf("second ask: %v, %v after asking %v; want b:1,c:1 from b:1 after a:1", got, err, l.asked)
	}
	l.down["b:1"], l.down["s1:1"] = true, true
	if got, err = r.ask(context.Background()); err == nil {
		t.Fatalf("every server down: got %v, want an error", got)
	}
	l.notCluster = true
	l.down = map[string]bool{}
	if got, err = r.ask(context.Background()); err != nil || strings.Join(got, ",") != "s1:1" {
		t.Fatalf("not a cluster: %v, %v; want the seeds", got, err)
	}
}

type scriptedLister struct {
	answers    map[string][]string
	down       map[string]bool
	notCluster bool
	asked      []string
}

func (l *scriptedLister) ListGateways(_ context.Context, addr string) ([]string, error) {
	l.asked = append(l.asked, addr)
	switch {
	case l.down[addr]:
		return nil, errors.New("connection refused")
	case l.notCluster:
		return nil, errNotACluster
	}
	return l.answers[addr], nil
}

func (l *scriptedLister) Healthy(_ context.Context, addr string) bool { return !l.down[addr] }

func (l *scriptedLister) Close() {}

// The servers whose checks failed leave the list, unless none is left.
func TestHealthyOf(t *testing.T) {
	listed := []string{"a:1", "b:1", "c:1"}
	if got := healthyOf(listed, map[string]bool{"b:1": true}); strings.Join(got, ",") != "a:1,c:1" {
		t.Errorf("b unhealthy: %v", got)
	}
	if got := healthyOf(listed, map[string]bool{"a:1": true, "b:1": true, "c:1": true}); strings.Join(got, ",") != "a:1,b:1,c:1" {
		t.Errorf("none healthy: %v, want all", got)
	}
	if got := healthyOf(listed, nil); strings.Join(got, ",") != "a:1,b:1,c:1" {
		t.Errorf("no check yet: %v", got)
	}
}

// freezingProxy forwards TCP connections to a backend listener until
// frozen; then it forwards nothing more either way, and keeps the
// connections open, as a paused process's kernel does.
type freezingProxy struct {
	addr    string
	backend net.Listener
	frozen  chan struct{}
	once    sync.Once
}

func newFreezingProxy(t *testing.T) *freezingProxy {
	t.Helper()
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{addr: front.Addr().String(), backend: back, frozen: make(chan struct{})}
	t.Cleanup(func() { _ = front.Close() })
	go func() {
		for {
			c, err := front.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", back.Addr().String())
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = b.Close() })
			go p.pipe(c, b)
			go p.pipe(b, c)
		}
	}()
	return p
}

func (p *freezingProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *freezingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			<-make(chan struct{}) // silent for good (the test's cleanup closes the conns)
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
