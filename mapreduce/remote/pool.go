package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/coord"
)

// PoolOptions tune a Pool. Zero fields take the defaults.
type PoolOptions struct {
	// HeartbeatInterval is how often each worker is asked whether it lives
	// (and how often running attempts report); default
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// LostAfter is how long a worker may go without answering before it
	// is declared lost; default DefaultLostAfter.
	LostAfter time.Duration
	// TLS secures the connections to workers (nil: plaintext).
	TLS *tls.Config
	// DialOptions are added to the connections to workers.
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
}

func (o *PoolOptions) defaults() {
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.LostAfter <= 0 {
		o.LostAfter = DefaultLostAfter
	}
	if o.LostAfter < 2*o.HeartbeatInterval {
		o.LostAfter = 2 * o.HeartbeatInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Pool is the set of remote workers a coordinator may use: those
// registered in Consul (NewConsulPool) or at fixed addresses
// (NewStaticPool). It watches every worker's heartbeat and declares a
// worker lost (closing its Client's Lost channel) when it stops answering,
// unregisters, or restarts; the coordinator then fails its running
// attempts and re-runs its map outputs. A restarted worker comes back with
// a new name. One that only stopped answering (paused, cut off) and answers
// again under its old name — while still registered, in a Consul pool —
// rejoins as a new member of that name: a new Client, whose earlier map
// outputs the coordinator has already given up on.
type Pool struct {
	opts   PoolOptions
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	book   *addrBook
	wg     sync.WaitGroup

	// static: the addresses are fixed and probed for as long as the pool
	// lives, so their connections stay open when a worker leaves.
	static bool

	mu      sync.Mutex
	members map[string]*member // by worker name
	// registered holds a Consul pool's current registrations by worker
	// name, members or not: a member lost for silence is probed for as
	// long as it stays registered (rejoin).
	registered map[string]Registration
	conns      map[string]*grpc.ClientConn
	changed    chan struct{} // closed and replaced at every membership change
}

type member struct {
	client *Client
	stop   context.CancelFunc
}

func newPool(opts PoolOptions) *Pool {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, book: newAddrBook(),
		members: map[string]*member{}, registered: map[string]Registration{}, conns: map[string]*grpc.ClientConn{}, changed: make(chan struct{})}
}

// NewConsulPool returns the pool of the workers registered under
// PrefixWorkers in kv (the cluster's lock service), following them as they
// join and leave until Close.
func NewConsulPool(kv coord.KV, opts PoolOptions) (*Pool, error) {
	p := newPool(opts)
	events, err := WatchMembers(p.ctx, kv)
	if err != nil {
		p.cancel()
		return nil, err
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for ev := range events {
			p.mu.Lock()
			if ev.Joined {
				p.registered[ev.Worker.Name] = ev.Worker
			} else {
				delete(p.registered, ev.Worker.Name)
			}
			p.mu.Unlock()
			if ev.Joined {
				p.join(ev.Worker)
			} else {
				p.leaveNamed(ev.Worker.Name, errors.New("unregistered (session ended or key deleted)"))
			}
		}
	}()
	return p, nil
}

// NewStaticPool returns the pool of the workers at addrs, with no lock
// service: each address is asked who serves there, and asked again after
// the worker there is lost, so that a restarted worker rejoins (under its
// new name). It fails if an address is malformed; an address that does not
// answer yet is retried until Close.
func NewStaticPool(addrs []string, opts PoolOptions) (*Pool, error) {
	if len(addrs) == 0 {
		return nil, errors.New("remote: no worker addresses")
	}
	p := newPool(opts)
	p.static = true
	for _, addr := range addrs {
		conn, err := p.conn(addr)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("remote: worker address %q: %w", addr, err)
		}
		p.wg.Add(1)
		go p.probe(addr, workerpb.NewWorkerClient(conn))
	}
	return p, nil
}

// probe keeps a static address's worker in the pool: it asks who serves
// there until someone answers, adds that worker, waits until it is lost,
// and starts over.
func (p *Pool) probe(addr string, rpc workerpb.WorkerClient) {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.LostAfter)
		resp, err := rpc.Heartbeat(ctx, &workerpb.HeartbeatRequest{})
		cancel()
		if err != nil {
			p.log.Debug("worker not answering", "addr", addr, "err", err)
			select {
			case <-time.After(p.opts.HeartbeatInterval):
			case <-p.ctx.Done():
			}
			continue
		}
		c := p.join(Registration{Name: resp.Worker, Addr: addr, Host: resp.Host, Slots: int(resp.Slots)})
		if c == nil {
			return
		}
		select {
		case <-c.Lost():
		case <-p.ctx.Done():
		}
	}
}

func (p *Pool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{tlsconfig.DialOption(p.opts.TLS)}, p.opts.DialOptions...)...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// join adds a worker (or returns the member already known by that name)
// and starts watching its heartbeat. It returns nil after Close.
func (p *Pool) join(reg Registration) *Client {
	conn, err := p.conn(reg.Addr)
	if err != nil {
		p.log.Warn("worker address unusable", "worker", reg.Name, "addr", reg.Addr, "err", err)
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil
	}
	if m, ok := p.members[reg.Name]; ok {
		return m.client
	}
	var c *Client
	c = newClient(reg, conn, p.book, p.opts, func(err error) { p.leave(c, err) })
	ctx, stop := context.WithCancel(p.ctx)
	p.members[reg.Name] = &member{client: c, stop: stop}
	p.book.add(reg.Name, reg.Addr)
	p.notifyLocked()
	p.log.Info("worker joined", "worker", reg.Name, "addr", reg.Addr, "host", reg.Host, "slots", reg.Slots)
	p.wg.Add(1)
	go p.watch(ctx, c)
	return c
}

// leave declares worker client c lost and forgets it, if c is still the
// pool's member under its name. A member that left and joined again under
// the same name (a paused worker answering again) is a new Client: a late
// call of the old one — a probe of a call that failed on the old
// connection, its watch — must not drop the new member.
//
// The worker is lost before its connection closes: a call that then fails
// on the closed connection — another attempt's on the same worker, probing
// it in turn — must find it lost, or the coordinator counts that failure
// against the task. (A clean-clone CI run saw four attempts of one map
// fail so within a millisecond, the worker marked lost only after its
// connection closed: the job failed.)
func (p *Pool) leave(c *Client, why error) {
	p.mu.Lock()
	m, ok := p.members[c.reg.Name]
	if !ok || m.client != c {
		p.mu.Unlock()
		c.markLost(why) // replaced or gone already: nothing of the pool's to undo
		return
	}
	p.removeLocked(m, why)
}

// leaveNamed declares the member named name lost, whichever Client it is
// now (its registration is gone).
func (p *Pool) leaveNamed(name string, why error) {
	p.mu.Lock()
	m, ok := p.members[name]
	if !ok {
		p.mu.Unlock()
		return
	}
	p.removeLocked(m, why)
}

// removeLocked marks m lost, removes it and unlocks p.mu. Called under
// p.mu.
func (p *Pool) removeLocked(m *member, why error) {
	first := m.client.markLost(why)
	delete(p.members, m.client.reg.Name)
	m.stop()
	p.notifyLocked()
	if !p.static {
		p.closeUnusedLocked(m.client.reg.Addr)
	}
	p.mu.Unlock()
	if first {
		p.log.Warn("worker lost", "worker", m.client.reg.Name, "addr", m.client.reg.Addr, "why", why)
	}
}

// closeUnusedLocked closes the connection to addr unless a member still
// uses it: workers come and go, connections to the gone ones should not
// pile up. A call still in flight on it fails, as it would have anyway.
func (p *Pool) closeUnusedLocked(addr string) {
	for _, m := range p.members {
		if m.client.reg.Addr == addr {
			return
		}
	}
	if c, ok := p.conns[addr]; ok {
		delete(p.conns, addr)
		_ = c.Close()
	}
}

func (p *Pool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// watch asks the worker for a heartbeat every interval and declares it
// lost after LostAfter without an answer, or at once when another worker
// answers at its address (it restarted: its outputs are gone).
func (p *Pool) watch(ctx context.Context, c *Client) {
	defer p.wg.Done()
	lastOK := time.Now()
	tick := time.NewTicker(p.opts.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(ctx, p.opts.LostAfter)
		resp, err := c.rpc.Heartbeat(hctx, &workerpb.HeartbeatRequest{})
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && resp.Worker != c.reg.Name:
			p.leave(c, fmt.Errorf("%s now serves at %s (the worker restarted)", resp.Worker, c.reg.Addr))
			return
		case err == nil:
			lastOK = time.Now()
		case time.Since(lastOK) >= p.opts.LostAfter:
			p.leave(c, fmt.Errorf("no heartbeat answered for %v: %w", time.Since(lastOK).Round(time.Millisecond), err))
			if !p.static { // a static address has its probe already
				p.wg.Add(1)
				go p.rejoin(c.reg)
			}
			return
		}
	}
}

// rejoin probes a Consul pool's worker lost for silence for as long as it
// stays registered, and adds it again when it answers under its name: a
// paused or briefly cut-off worker is not lost to the pool for good, as
// its registration would never announce it a second time. A different
// name answering means the worker restarted; its new registration brings
// it back, so the probe ends.
func (p *Pool) rejoin(reg Registration) {
	defer p.wg.Done()
	for {
		select {
		case <-time.After(p.opts.HeartbeatInterval):
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		current, still := p.registered[reg.Name]
		_, member := p.members[reg.Name]
		p.mu.Unlock()
		if !still || member || current.Addr != reg.Addr {
			return
		}
		conn, err := p.conn(reg.Addr)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.LostAfter)
		resp, err := workerpb.NewWorkerClient(conn).Heartbeat(ctx, &workerpb.HeartbeatRequest{})
		cancel()
		switch {
		case err != nil:
			continue
		case resp.Worker != reg.Name:
			return
		}
		p.mu.Lock()
		_, still = p.registered[reg.Name]
		p.mu.Unlock()
		if still && p.join(reg) != nil {
			p.log.Info("worker answers again", "worker", reg.Name, "addr", reg.Addr)
		}
		return
	}
}

// Workers returns the workers in the pool now, sorted by name.
func (p *Pool) Workers() []mapreduce.Worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]mapreduce.Worker, 0, len(p.members))
	for _, m := range p.members {
		out = append(out, m.client)
	}
	slices.SortFunc(out, func(a, b mapreduce.Worker) int {
		if a.Name() < b.Name() {
			return -1
		}
		if a.Name() > b.Name() {
			return 1
		}
		return 0
	})
	return out
}

// WaitWorkers waits until the pool has at least n workers and returns
// them, or fails with ctx's error saying how many it had.
func (p *Pool) WaitWorkers(ctx context.Context, n int) ([]mapreduce.Worker, error) {
	for {
		p.mu.Lock()
		have, changed := len(p.members), p.changed
		p.mu.Unlock()
		if have >= n {
			return p.Workers(), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("remote: waiting for %d workers, have %d: %w", n, have, ctx.Err())
		}
	}
}

// Close stops watching the workers and closes the connections. The
// workers themselves keep running.
func (p *Pool) Close() error {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
	return nil
}
