// Package gateways lets a gRPC client — the official Cloud Bigtable
// clients above all — enter a Tabula cluster through every tablet server
// rather than one. Each tablet server serves the whole data API (its
// gateway forwards what it does not hold), so a client bound to one
// address loses the whole cluster while that server is down or paused,
// although its tablets are served elsewhere seconds later.
//
// Dial returns a connection whose resolver asks the cluster for its live
// tablet servers (the Locator service's ListGateways, through any of the
// seed addresses) and keeps the list current; calls go round robin over
// the servers that are up. A server leaves the rotation when its
// connection breaks, when it reports NOT_SERVING through the gRPC health
// service (its lease lapsed: it refuses every call until the lock service
// answers again), or when it leaves a health check unanswered for
// ProbeTimeout (a paused process, which accepts connections and answers
// nothing: gRPC's own keepalive pings come at most every 10 s). A target
// that does not know ListGateways (`tabula dev`, the emulator) is used as
// given.
//
//	conn, err := gateways.Dial([]string{"ts1:8086", "ts2:8086"}, grpc.WithTransportCredentials(insecure.NewCredentials()))
//	client, err := bigtable.NewClient(ctx, project, instance, option.WithGRPCConn(conn))
package gateways

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/health" // client-side health checking, named in serviceConfig
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
)

// Scheme is the resolver scheme of Dial's targets: tabula:///addr1,addr2.
const Scheme = "tabula"

// Defaults of Options.
const (
	// DefaultRefresh is how often the list of tablet servers is asked for
	// again. A server restarted on its address keeps its place in the
	// rotation meanwhile (gRPC reconnects to it); only servers that join
	// or leave wait for the next refresh.
	DefaultRefresh = 10 * time.Second
	// ProbeEvery is how often each listed server's health is checked,
	// and ProbeTimeout how long a check may take before the server
	// leaves the rotation (until a check succeeds again).
	ProbeEvery   = 500 * time.Millisecond
	ProbeTimeout = time.Second
	// minResolveGap bounds how often a failing connection's ResolveNow
	// makes the resolver ask the cluster again.
	minResolveGap = time.Second
	// askTimeout bounds one ListGateways call.
	askTimeout = 2 * time.Second
)

// serviceConfig spreads calls round robin over the servers whose
// connections are ready and whose health service does not say
// NOT_SERVING ("" names the server's overall status).
const serviceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`

// Options tunes Dial. The zero value means defaults.
type Options struct {
	// Refresh is how often the list of servers is asked for again;
	// default DefaultRefresh.
	Refresh time.Duration
	// Logger receives the list's changes (Debug) and failures to get it
	// (Warn); default slog.Default().
	Logger *slog.Logger
}

// Dial returns a connection spread over the live tablet servers of the
// cluster that seeds (host:port of one or more of its tablet servers)
// belong to. opts are the caller's dial options — transport and per-call
// credentials above all — used for the calls and for the resolver's own
// ListGateways calls and health checks; Dial adds the resolver, round
// robin and health checking.
func Dial(seeds []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return DialWith(seeds, Options{}, opts...)
}

// DialWith is Dial with Options.
func DialWith(seeds []string, o Options, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(seeds) == 0 {
		return nil, errors.New("gateways: no seed address")
	}
	for _, s := range seeds {
		if s == "" || strings.Contains(s, ",") {
			return nil, fmt.Errorf("gateways: seed %q: want host:port", s)
		}
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	b := &builder{opts: o, dialOpts: opts}
	all := append([]grpc.DialOption{
		grpc.WithResolvers(b),
		grpc.WithDefaultServiceConfig(serviceConfig),
	}, opts...)
	return grpc.NewClient(Target(seeds...), all...)
}

// Target is the target string Dial uses for seeds.
func Target(seeds ...string) string { return Scheme + ":///" + strings.Join(seeds, ",") }

// lister asks servers for the cluster's live tablet servers and for
// their health.
type lister interface {
	// ListGateways returns the addresses addr lists; an error wrapping
	// errNotACluster when the server does not know the call.
	ListGateways(ctx context.Context, addr string) ([]string, error)
	// Healthy reports whether addr answers a health check, saying it
	// serves (a server without the health service counts as serving).
	Healthy(ctx context.Context, addr string) bool
	// Close releases what the lister holds.
	Close()
}

// errNotACluster: the target serves no Locator (`tabula dev`, the
// emulator): its seeds are used as given.
var errNotACluster = errors.New("gateways: the server lists no tablet servers")

// builder builds the resolvers of one Dial.
type builder struct {
	opts     Options
	dialOpts []grpc.DialOption
	lister   lister // nil: a grpcLister over dialOpts (tests set it)
}

func (b *builder) Scheme() string { return Scheme }

func (b *builder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	seeds := strings.Split(strings.TrimPrefix(t.Endpoint(), "/"), ",")
	seeds = slices.DeleteFunc(seeds, func(s string) bool { return s == "" })
	if len(seeds) == 0 {
		return nil, fmt.Errorf("gateways: target %q names no address", t.URL.String())
	}
	lister := b.lister
	if lister == nil {
		lister = &grpcLister{opts: b.dialOpts, conns: make(map[string]*grpc.ClientConn)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &listResolver{cc: cc, seeds: seeds, lister: lister, opts: b.opts, cancel: cancel,
		now: make(chan struct{}, 1), done: make(chan struct{}), listed: seeds}
	// The seeds at once, so that the first calls need not wait for the
	// first list.
	r.publish(seeds)
	go r.run(ctx)
	return r, nil
}

// listResolver keeps a ClientConn's addresses equal to the cluster's live
// tablet servers that answer health checks.
type listResolver struct {
	cc     resolver.ClientConn
	seeds  []string
	lister lister
	opts   Options
	cancel context.CancelFunc
	now    chan struct{} // ResolveNow's wake-ups
	done   chan struct{}

	// Owned by run.
	listed    []string        // the cluster's last list (or the seeds)
	unhealthy map[string]bool // listed servers whose last check failed
	published []string        // the addresses gRPC has
}

// ResolveNow asks for the list again soon (gRPC calls it when a
// connection fails).
func (r *listResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close stops the refreshes and the checks.
func (r *listResolver) Close() {
	r.cancel()
	<-r.done
	r.lister.Close()
}

// run lists the servers every Options.Refresh (and after a ResolveNow, at
// most every minResolveGap) and checks their health every ProbeEvery,
// publishing the healthy listed servers whenever they change.
func (r *listResolver) run(ctx context.Context) {
	defer close(r.done)
	list := time.NewTimer(0)
	defer list.Stop()
	probe := time.NewTicker(ProbeEvery)
	defer probe.Stop()
	var lastList time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-list.C:
			r.refresh(ctx)
			lastList = time.Now()
			list.Reset(r.opts.Refresh)
		case <-r.now:
			if time.Since(lastList) >= minResolveGap {
				r.refresh(ctx)
				lastList = time.Now()
				list.Reset(r.opts.Refresh)
			}
		case <-probe.C:
			r.unhealthy = r.check(ctx, r.listed)
			r.publish(healthyOf(r.listed, r.unhealthy))
		}
	}
}

// refresh asks for the list and publishes its healthy servers.
func (r *listResolver) refresh(ctx context.Context) {
	addrs, err := r.ask(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.opts.Logger.Warn("gateways: listing the tablet servers", "err", err)
		}
		return
	}
	r.listed = addrs
	r.publish(healthyOf(r.listed, r.unhealthy))
}

// check health-checks addrs at once, each for at most ProbeTimeout, and
// returns those that failed.
func (r *listResolver) check(ctx context.Context, addrs []string) map[string]bool {
	failed := make(map[string]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
			defer cancel()
			if !r.lister.Healthy(pctx, a) {
				mu.Lock()
				failed[a] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// healthyOf returns the addresses of listed not in unhealthy; all of
// listed when none is healthy (the checks may be what fails: a client
// with no address to call would fail every call instead of some).
func healthyOf(listed []string, unhealthy map[string]bool) []string {
	out := slices.DeleteFunc(slices.Clone(listed), func(a string) bool { return unhealthy[a] })
	if len(out) == 0 {
		return listed
	}
	return out
}

// ask returns the cluster's live tablet servers, asking the servers of
// the last list and the seeds in turn until one answers; the seeds
// themselves when the first to answer serves no Locator.
func (r *listResolver) ask(ctx context.Context) ([]string, error) {
	candidates := slices.Clone(r.listed)
	for _, s := range r.seeds {
		if !slices.Contains(candidates, s) {
			candidates = append(candidates, s)
		}
	}
	// A server whose last check failed is asked last.
	slices.SortStableFunc(candidates, func(a, b string) int {
		switch {
		case r.unhealthy[a] == r.unhealthy[b]:
			return 0
		case r.unhealthy[a]:
			return 1
		}
		return -1
	})
	var errs []error
	for _, addr := range candidates {
		actx, cancel := context.WithTimeout(ctx, askTimeout)
		addrs, err := r.lister.ListGateways(actx, addr)
		cancel()
		switch {
		case errors.Is(err, errNotACluster):
			return r.seeds, nil
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		case len(addrs) > 0:
			addrs = slices.Clone(addrs)
			slices.Sort(addrs)
			return slices.Compact(addrs), nil
		default:
			errs = append(errs, fmt.Errorf("%s: no live tablet server", addr))
		}
	}
	return nil, errors.Join(errs...)
}

// publish hands addrs to gRPC when they differ from what it has.
func (r *listResolver) publish(addrs []string) {
	if slices.Equal(addrs, r.published) {
		return
	}
	r.published = slices.Clone(addrs)
	r.opts.Logger.Debug("gateways: tablet servers", "addrs", addrs)
	st := resolver.State{}
	for _, a := range addrs {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	if err := r.cc.UpdateState(st); err != nil {
		r.opts.Logger.Debug("gateways: update state", "err", err)
	}
}

// grpcLister calls ListGateways over connections of its own, one per
// address, dialled with the caller's options.
type grpcLister struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Close closes the lister's connections.
func (l *grpcLister) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for addr, cc := range l.conns {
		_ = cc.Close()
		delete(l.conns, addr)
	}
}

// conn returns the lister's connection to addr.
func (l *grpcLister) conn(addr string) (*grpc.ClientConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cc, ok := l.conns[addr]; ok {
		return cc, nil
	}
	// Reconnect soon: with gRPC's default back-off (growing to two
	// minutes) a server back after a long absence would fail its checks,
	// and stay out of the rotation, long after it serves again.
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: ProbeTimeout,
	})}, l.opts...)
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, err
	}
	l.conns[addr] = cc
	return cc, nil
}

// Healthy checks addr's overall health (service ""). A check refused as
// unknown or unauthorized still proves the server answers.
func (l *grpcLister) Healthy(ctx context.Context, addr string) bool {
	cc, err := l.conn(addr)
	if err != nil {
		return false
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	switch status.Code(err) {
	case codes.OK:
		return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

func (l *grpcLister) ListGateways(ctx context.Context, addr string) ([]string, error) {
	cc, err := l.conn(addr)
	if err != nil {
		return nil, err
	}
	resp, err := clusterpb.NewLocatorClient(cc).ListGateways(ctx, &clusterpb.ListGatewaysRequest{})
	if status.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("%w: %v", errNotACluster, err)
	}
	if err != nil {
		return nil, err
	}
	return resp.GetAddrs(), nil
}
