package coord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tabuladb/tabula/internal/ctxtime"
)

// ConsulConfig configures NewConsul. Zero fields take the defaults.
type ConsulConfig struct {
	// Address is the agent's HTTP address, host:port; default
	// 127.0.0.1:8500.
	Address string
	// Token is the ACL token, if the agent enforces ACLs; default
	// CONSUL_HTTP_TOKEN. See deploy/consul-policy.hcl for the rights it
	// needs.
	Token string
	// CAFile, when set, makes the client speak HTTPS to the agent and
	// verify it with these PEM CA certificates (CONSUL_CACERT with
	// CONSUL_HTTP_SSL=true does the same). CertFile and KeyFile are a
	// client certificate, for agents that verify incoming HTTPS.
	CAFile, CertFile, KeyFile string
	// Prefix is prepended to every key; default ClusterPrefix("").
	// It should end in "/".
	Prefix string
	// SessionTTL is the default session TTL; default and minimum 10s
	// (Consul's bounds are 10s to 24h).
	SessionTTL time.Duration
	// LockDelay is the default lock-delay; default 15s (Consul's), at
	// most 60s.
	LockDelay time.Duration
	// WaitTime bounds one blocking query; default 1m. Shorter values make
	// watches notice a lost agent sooner.
	WaitTime time.Duration
	// RetryInterval is the pause after a failed call in background loops
	// (watches, destroy after a lapse); default 1s.
	RetryInterval time.Duration
}

// Consul is the Service backed by a Consul agent.
type Consul struct {
	cfg    ConsulConfig
	client *api.Client
	kv     *api.KV
	ctx    context.Context // cancelled by Close; parent of every loop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ Service = (*Consul)(nil)

// NewConsul returns a Service that talks to the agent at cfg.Address. It
// does not contact the agent: a wrong address shows up as errors from the
// first calls.
func NewConsul(cfg ConsulConfig) (*Consul, error) {
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:8500"
	}
	if cfg.Prefix == "" {
		cfg.Prefix = ClusterPrefix("")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = 15 * time.Second
	}
	if cfg.WaitTime <= 0 {
		cfg.WaitTime = time.Minute
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	// Pooled: renewals and queries reuse connections (the agent may be
	// remote). Like every Consul client it also reads CONSUL_HTTP_* from the
	// environment; the fields set here win.
	acfg := api.DefaultConfig()
	acfg.Address = cfg.Address
	if cfg.Token != "" { // else CONSUL_HTTP_TOKEN's, which DefaultConfig read
		acfg.Token = cfg.Token
	}
	if cfg.CAFile != "" {
		acfg.Scheme = "https"
		acfg.TLSConfig.CAFile = cfg.CAFile
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		acfg.TLSConfig.CertFile, acfg.TLSConfig.KeyFile = cfg.CertFile, cfg.KeyFile
	}
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("coord: consul client for %s: %w", cfg.Address, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Consul{cfg: cfg, client: client, kv: client.KV(), ctx: ctx, cancel: cancel}, nil
}

// Close stops every renewal, lock watch and watch, and waits for them.
// Sessions are not destroyed: they expire after their TTL, as if the process
// had died, which is what a crash test wants; destroy them first for a
// clean exit.
func (c *Consul) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// Prefix is the key prefix of the service, as configured.
func (c *Consul) Prefix() string { return c.cfg.Prefix }

func (c *Consul) full(key string) string { return c.cfg.Prefix + key }

func (c *Consul) rel(key string) string { return strings.TrimPrefix(key, c.cfg.Prefix) }

// opCtx is ctx, also cancelled when the service closes.
func (c *Consul) opCtx(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if c.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	octx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return octx, func() { stop(); cancel() }, nil
}

// wrap names the operation in a transport error; a cancelled service turns
// into ErrClosed.
func (c *Consul) wrap(op, key string, ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("coord: consul %s %q: %w", op, key, err)
}

func (c *Consul) entry(kv *api.KVPair) Entry {
	return Entry{
		Key:         c.rel(kv.Key),
		Value:       kv.Value,
		CreateIndex: kv.CreateIndex,
		ModifyIndex: kv.ModifyIndex,
		Session:     kv.Session,
	}
}

// Get implements KV.
func (c *Consul) Get(ctx context.Context, key string) (Entry, error) {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return Entry{}, err
	}
	defer done()
	kv, _, err := c.kv.Get(c.full(key), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return Entry{}, c.wrap("get", key, ctx, err)
	}
	if kv == nil {
		return Entry{}, ErrNotFound
	}
	return c.entry(kv), nil
}

// Put implements KV.
func (c *Consul) Put(ctx context.Context, key string, value []byte) error {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = c.kv.Put(&api.KVPair{Key: c.full(key), Value: value}, (&api.WriteOptions{}).WithContext(ctx))
	return c.wrap("put", key, ctx, err)
}

// CAS implements KV.
func (c *Consul) CAS(ctx context.Context, key string, value []byte, index uint64) error {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	ok, _, err := c.kv.CAS(&api.KVPair{Key: c.full(key), Value: value, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return c.wrap("cas", key, ctx, err)
	}
	if !ok {
		return ErrConflict
	}
	return nil
}

// Delete implements KV.
func (c *Consul) Delete(ctx context.Context, key string) error {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	_, err = c.kv.Delete(c.full(key), (&api.WriteOptions{}).WithContext(ctx))
	return c.wrap("delete", key, ctx, err)
}

// DeleteCAS implements KV.
func (c *Consul) DeleteCAS(ctx context.Context, key string, index uint64) error {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Consul's own delete-with-cas succeeds on an absent key, whatever the
	// index; a transaction whose check-index fails on an absent key gives
	// the contract's answer.
	full := c.full(key)
	ok, _, _, err := c.client.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: full, Index: index}},
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: full}},
	}, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return c.wrap("delete-cas", key, ctx, err)
	}
	if !ok {
		if _, err := c.Get(ctx, key); err != nil {
			return err
		}
		return ErrConflict
	}
	return nil
}

// List implements KV.
func (c *Consul) List(ctx context.Context, prefix string) ([]Entry, error) {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	kvs, _, err := c.kv.List(c.full(prefix), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, c.wrap("list", prefix, ctx, err)
	}
	out := make([]Entry, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, c.entry(kv))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Watch implements KV. It runs blocking queries on the prefix and reports
// the difference between successive answers, so changes between two
// answers are coalesced.
func (c *Consul) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	return c.watch(ctx, prefix, false)
}

// WatchKey implements KV.
func (c *Consul) WatchKey(ctx context.Context, key string) (<-chan Event, error) {
	return c.watch(ctx, key, true)
}

func (c *Consul) watch(ctx context.Context, prefix string, exact bool) (<-chan Event, error) {
	wctx, done, err := c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	// The first answer is read here so that a bad address fails the call
	// and the initial state is the one at the time of the call.
	kvs, index, err := c.query(wctx, prefix, exact, 0)
	if err != nil {
		done()
		return nil, c.wrap("watch", prefix, wctx, err)
	}
	out := make(chan Event)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(out)
		defer done()
		seen := map[string]uint64{} // key → ModifyIndex last delivered
		for {
			if !c.deliverDiff(wctx, out, seen, kvs) {
				return
			}
			var next uint64
			for {
				kvs, next, err = c.query(wctx, prefix, exact, index)
				if err == nil {
					break
				}
				if ctxtime.Sleep(wctx, c.cfg.RetryInterval) != nil {
					return
				}
			}
			// Consul's index can go backwards (a snapshot restore, a
			// new leader's state): start over from zero then, as its
			// documentation says.
			if next < index {
				next = 0
			}
			index = next
		}
	}()
	return out, nil
}

// query reads the prefix (or key) with a blocking query at index.
func (c *Consul) query(ctx context.Context, prefix string, exact bool, index uint64) (api.KVPairs, uint64, error) {
	opts, cancel := c.blocking(ctx, index)
	defer cancel()
	if exact {
		kv, meta, err := c.kv.Get(c.full(prefix), opts)
		if err != nil {
			return nil, 0, err
		}
		if kv == nil {
			return nil, meta.LastIndex, nil
		}
		return api.KVPairs{kv}, meta.LastIndex, nil
	}
	kvs, meta, err := c.kv.List(c.full(prefix), opts)
	if err != nil {
		return nil, 0, err
	}
	return kvs, meta.LastIndex, nil
}

// deliverDiff sends the events that take seen to kvs: puts in ModifyIndex
// order, then deletes in key order. It reports false if ctx ended.
func (c *Consul) deliverDiff(ctx context.Context, out chan<- Event, seen map[string]uint64, kvs api.KVPairs) bool {
	var events []Event
	now := map[string]bool{}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].ModifyIndex < kvs[j].ModifyIndex })
	for _, kv := range kvs {
		e := c.entry(kv)
		now[e.Key] = true
		if idx, ok := seen[e.Key]; ok && idx == e.ModifyIndex {
			continue
		}
		seen[e.Key] = e.ModifyIndex
		events = append(events, Event{Kind: EventPut, Entry: e})
	}
	var gone []string
	for key := range seen {
		if !now[key] {
			gone = append(gone, key)
		}
	}
	sort.Strings(gone)
	for _, key := range gone {
		delete(seen, key)
		events = append(events, Event{Kind: EventDelete, Entry: Entry{Key: key}})
	}
	for _, ev := range events {
		select {
		case out <- ev:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// blocking returns query options for a blocking query at index, under a
// context that gives up a little after the longest answer Consul may take
// (WaitTime plus up to WaitTime/16 of jitter): across a partition that
// drops packets without resetting the connection, a query would otherwise
// wait for TCP to notice, minutes later.
func (c *Consul) blocking(ctx context.Context, index uint64) (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WaitTime+c.cfg.WaitTime/16+5*time.Second)
	return (&api.QueryOptions{WaitIndex: index, WaitTime: c.cfg.WaitTime}).WithContext(ctx), cancel
}

// NewSession implements Service. Sessions have the "release" behaviour
// (see the package documentation) and no health checks: the holder's
// renewals are its only sign of life, so a session does not die with the
// agent the holder happens to talk to.
func (c *Consul) NewSession(ctx context.Context, opts SessionOptions) (Session, error) {
	if opts.TTL <= 0 {
		opts.TTL = c.cfg.SessionTTL
	}
	if opts.LockDelay == 0 {
		opts.LockDelay = c.cfg.LockDelay
	}
	if opts.LockDelay < 0 {
		opts.LockDelay = 0
	}
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	entry := &api.SessionEntry{
		// The holder's own lease travels in the name, where EndSession
		// reads it back (lease.go).
		Name:     holderName(opts.Name, opts.TTL, opts.Lease),
		TTL:      opts.TTL.String(),
		Behavior: api.SessionBehaviorRelease,
		// The api package sends LockDelay 0 as "unset", which Consul
		// reads as its 15s default; 1ms is as good as none.
		LockDelay: max(opts.LockDelay, time.Millisecond),
	}
	// The lease starts no later than the request is sent.
	start := time.Now()
	id, _, err := c.client.Session().CreateNoChecks(entry, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, c.wrap("create session", opts.Name, ctx, err)
	}
	s := &consulSession{
		c:           c,
		id:          id,
		ttl:         opts.TTL,
		lease:       HolderLease(opts.TTL, opts.Lease),
		delay:       opts.LockDelay,
		manual:      opts.ManualRenew,
		validUntil:  start.Add(opts.TTL),
		holderUntil: LeaseUntil(start, opts.TTL, opts.Lease),
		renewed:     make(chan struct{}, 1),
		lapsed:      make(chan struct{}),
		done:        make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	c.wg.Add(2)
	go s.run()
	go s.monitor()
	return s, nil
}

// EndSession implements Service. The TTL and the holder's lease (in the
// session's name) are read from the session before it is destroyed; a
// session destroyed in between is gone all the same.
func (c *Consul) EndSession(ctx context.Context, id string) (time.Duration, error) {
	ctx, done, err := c.opCtx(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	entry, _, err := c.client.Session().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, c.wrap("session info", id, ctx, err)
	}
	if entry == nil {
		return 0, ErrSessionGone
	}
	ttl, err := time.ParseDuration(entry.TTL)
	if err != nil {
		return 0, fmt.Errorf("coord: session %s has TTL %q: %w", id, entry.TTL, err)
	}
	if _, err := c.client.Session().Destroy(id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return 0, c.wrap("destroy session", id, ctx, err)
	}
	return nameLease(entry.Name, ttl), nil
}

type consulSession struct {
	c          *Consul
	id         string
	ttl, delay time.Duration
	lease      time.Duration // the holder's (HolderLease)
	manual     bool
	ctx        context.Context // ends when the session is done
	cancel     context.CancelFunc
	renewed    chan struct{} // a manual Renew moved validUntil

	mu         sync.Mutex
	validUntil time.Time // monotonic; zero after a lapse
	// holderUntil is when the holder's own lease ends (lease.go): Valid
	// is false past it until a renewal succeeds again.
	holderUntil time.Time
	isLapsed    bool
	isDone      bool
	err         error

	lapsed, done chan struct{}
}

func (s *consulSession) ID() string               { return s.id }
func (s *consulSession) TTL() time.Duration       { return s.ttl }
func (s *consulSession) LockDelay() time.Duration { return s.delay }
func (s *consulSession) Lapsed() <-chan struct{}  { return s.lapsed }
func (s *consulSession) Done() <-chan struct{}    { return s.done }

func (s *consulSession) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *consulSession) Valid() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	return !s.isLapsed && now.Before(s.validUntil) && now.Before(s.holderUntil)
}

// lapse marks the lease lapsed; it reports whether this call did.
func (s *consulSession) lapse(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isLapsed {
		return false
	}
	s.isLapsed = true
	s.validUntil = time.Time{}
	s.err = err
	close(s.lapsed)
	return true
}

// finish marks the session gone from the service (or abandoned because the
// service closed) and stops its loops.
func (s *consulSession) finish(err error) {
	s.lapse(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isDone {
		return
	}
	s.isDone = true
	close(s.done)
	s.cancel()
}

// renew sends one renewal and moves the lease on if it succeeds.
func (s *consulSession) renew(ctx context.Context) error {
	s.mu.Lock()
	if s.isLapsed {
		err := s.err
		s.mu.Unlock()
		return err
	}
	deadline := s.validUntil
	s.mu.Unlock()
	if !time.Now().Before(deadline) {
		s.lapse(ErrSessionLapsed)
		return ErrSessionLapsed
	}
	// A renewal answered after the lease ran out cannot revive it: the
	// holder may already have acted on the lapse.
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	start := time.Now()
	entry, _, err := s.c.client.Session().Renew(s.id, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return s.c.wrap("renew session", s.id, ctx, err)
	}
	if entry == nil {
		// Consul answers a renewal from its leader's state as applied so
		// far, and a leader just elected (Consul restarted) may not have
		// applied the session's creation yet: it answers "not found" for
		// a live session. A consistent read waits until the leader has
		// caught up; only its "not found" means the session is gone.
		if gone, err := s.goneForSure(ctx); err != nil || !gone {
			if err == nil {
				err = errors.New("not found by the leader, but a consistent read finds it (a leader catching up)")
			}
			return s.c.wrap("renew session", s.id, ctx, err)
		}
		s.finish(ErrSessionGone)
		return ErrSessionGone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isLapsed {
		return s.err
	}
	s.validUntil = start.Add(s.ttl)
	if u := start.Add(s.lease); u.After(s.holderUntil) {
		s.holderUntil = u
	}
	return nil
}

// goneForSure reports whether a consistent read of the session finds it
// gone from the service.
func (s *consulSession) goneForSure(ctx context.Context) (bool, error) {
	entry, _, err := s.c.client.Session().Info(s.id, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return false, err
	}
	return entry == nil, nil
}

// run renews the session every RenewEvery (retrying sooner after a
// failure) and lapses it when a full TTL passes without success. (The
// holder's own lease, when shorter, makes Valid false sooner, until the
// next success: see lease.go.)
func (s *consulSession) run() {
	defer s.c.wg.Done()
	every := RenewEvery(s.ttl, s.lease)
	retry := min(s.c.cfg.RetryInterval, s.lease/10)
	next := every
	for {
		s.mu.Lock()
		until := time.Until(s.validUntil)
		lapsed := s.isLapsed
		s.mu.Unlock()
		if lapsed {
			break
		}
		if until <= 0 {
			s.lapse(ErrSessionLapsed)
			break
		}
		wait := until
		if !s.manual {
			wait = min(wait, next)
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			if s.c.ctx.Err() != nil {
				s.finish(ErrClosed)
			}
			return
		case <-s.renewed:
			t.Stop()
			continue
		case <-s.lapsed:
			t.Stop()
			continue
		case <-t.C:
		}
		if s.manual {
			continue
		}
		// A renewal that hangs must not use up a short lease: give it up
		// after a period and try again.
		rctx, cancel := s.ctx, context.CancelFunc(func() {})
		if s.lease < s.ttl {
			rctx, cancel = context.WithTimeout(s.ctx, every)
		}
		err := s.renew(rctx)
		cancel()
		if err != nil {
			next = retry
		} else {
			next = every
		}
	}
	// Lapsed: destroy the session so its locks are released (after the
	// lock-delay) as soon as the service can be reached, rather than
	// after its own TTL.
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		_, err := s.c.client.Session().Destroy(s.id, (&api.WriteOptions{}).WithContext(ctx))
		cancel()
		if err == nil {
			s.finish(ErrSessionLapsed)
			return
		}
		if ctxtime.Sleep(s.ctx, s.c.cfg.RetryInterval) != nil {
			if s.c.ctx.Err() != nil {
				s.finish(ErrClosed)
			}
			return
		}
	}
}

// monitor watches the session's entry with blocking queries and finishes
// the session when Consul no longer has it.
func (s *consulSession) monitor() {
	defer s.c.wg.Done()
	var index uint64
	for s.ctx.Err() == nil {
		opts, cancel := s.c.blocking(s.ctx, index)
		entry, meta, err := s.c.client.Session().Info(s.id, opts)
		cancel()
		if err != nil {
			if ctxtime.Sleep(s.ctx, s.c.cfg.RetryInterval) != nil {
				break
			}
			continue
		}
		if entry == nil {
			s.finish(ErrSessionGone)
			return
		}
		// An index that went backwards means Consul's state was reset:
		// start over, as its documentation says.
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
	if s.c.ctx.Err() != nil {
		s.finish(ErrClosed)
	}
}

func (s *consulSession) Renew(ctx context.Context) error {
	if err := s.renew(ctx); err != nil {
		return err
	}
	select {
	case s.renewed <- struct{}{}:
	default:
	}
	return nil
}

func (s *consulSession) Destroy(ctx context.Context) error {
	// Stop renewing first, whatever becomes of the call: a session whose
	// destroy failed (Consul unreachable, or restarting) must not be kept
	// alive by our own renewals once Consul is back — it would hold its
	// locks for ever (two masters once waited minutes on the master lock
	// of a session their predecessor had given up that way). Not renewed,
	// it expires within its TTL.
	s.finish(ErrSessionGone)
	ctx, done, err := s.c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	if _, err := s.c.client.Session().Destroy(s.id, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		err = s.c.wrap("destroy session", s.id, ctx, err)
		if !errors.Is(err, ErrClosed) {
			s.c.destroyLater(s.id, s.ttl)
		}
		return err
	}
	return nil
}

// destroyLater keeps trying, every RetryInterval, to destroy session id,
// whose Destroy failed (Consul down or restarting, say), until it succeeds
// or the service closes. Left to Consul, the session would hold its locks
// until it expires — and an agent that restarts resets every session's
// timer to twice its TTL from its new leader's start — so a master that
// stepped down during a Consul restart kept every master out for 2×TTL
// plus the lock-delay after Consul was back (25 s with a 10 s TTL; the
// fault campaign waited 17 s for an active master). Destroyed as soon as
// Consul answers, the lock comes free after the lock-delay alone. The
// retries give up after destroyRetryWindow(ttl): by then Consul has
// expired the session itself unless it was unreachable for that long.
func (c *Consul) destroyLater(id string, ttl time.Duration) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		deadline := time.Now().Add(destroyRetryWindow(ttl))
		for time.Now().Before(deadline) {
			if ctxtime.Sleep(c.ctx, c.cfg.RetryInterval) != nil {
				return
			}
			ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
			_, err := c.client.Session().Destroy(id, (&api.WriteOptions{}).WithContext(ctx))
			cancel()
			if err == nil {
				return
			}
		}
	}()
}

// destroyRetryWindow is how long destroyLater keeps trying: twice the TTL
// (Consul's own expiry) plus a minute, and at least 10 minutes, so that an
// agent restart, however slow, is outlasted.
func destroyRetryWindow(ttl time.Duration) time.Duration {
	return max(2*ttl+time.Minute, 10*time.Minute)
}

// usable returns the error that keeps the session from taking locks.
func (s *consulSession) usable() error {
	if s.c.ctx.Err() != nil {
		return ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isLapsed {
		return s.err
	}
	if now := time.Now(); !now.Before(s.validUntil) || !now.Before(s.holderUntil) {
		return ErrSessionLapsed
	}
	return nil
}

// acquire is one attempt; on ErrLocked it also returns the index to wait
// from and whether the key is held (as opposed to in lock-delay).
func (s *consulSession) acquire(ctx context.Context, key string, value []byte) (Lock, uint64, bool, error) {
	if err := s.usable(); err != nil {
		return nil, 0, false, err
	}
	ok, _, err := s.c.kv.Acquire(&api.KVPair{Key: s.c.full(key), Value: value, Session: s.id}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		// Consul answers 500 "invalid session" when the session is gone
		// (it expired before the holder noticed).
		if strings.Contains(strings.ToLower(err.Error()), "invalid session") {
			s.finish(ErrSessionGone)
			return nil, 0, false, ErrSessionGone
		}
		return nil, 0, false, s.c.wrap("acquire", key, ctx, err)
	}
	if !ok {
		kv, meta, err := s.c.kv.Get(s.c.full(key), (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, 0, false, s.c.wrap("acquire", key, ctx, err)
		}
		held := kv != nil && kv.Session != "" && kv.Session != s.id
		return nil, meta.LastIndex, held, ErrLocked
	}
	return s.newLock(key), 0, false, nil
}

func (s *consulSession) newLock(key string) *consulLock {
	h := &consulLock{s: s, key: key, lost: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(s.ctx)
	s.c.wg.Add(1)
	go h.watch()
	return h
}

// TryLockExisting locks key in a transaction that checks the key's modify
// index read just before, so a key deleted (or recreated) in between is
// never locked: Consul's plain acquire would create it.
func (s *consulSession) TryLockExisting(ctx context.Context, key string, value []byte) (Lock, error) {
	ctx, done, err := s.c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	full := s.c.full(key)
	for {
		if err := s.usable(); err != nil {
			return nil, err
		}
		kv, _, err := s.c.kv.Get(full, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return nil, s.c.wrap("acquire", key, ctx, err)
		}
		if kv == nil {
			return nil, ErrNotFound
		}
		if kv.Session != "" && kv.Session != s.id {
			return nil, ErrLocked
		}
		ok, resp, _, err := s.c.client.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: full, Index: kv.ModifyIndex}},
			{KV: &api.KVTxnOp{Verb: api.KVLock, Key: full, Value: value, Session: s.id}},
		}, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, s.c.wrap("acquire", key, ctx, err)
		}
		if ok {
			return s.newLock(key), nil
		}
		for _, e := range resp.Errors {
			switch {
			case strings.Contains(strings.ToLower(e.What), "invalid session"):
				s.finish(ErrSessionGone)
				return nil, ErrSessionGone
			case e.OpIndex == 1:
				// Held by another session or in lock-delay.
				return nil, ErrLocked
			}
		}
		// The check failed: the key changed since it was read. Read again.
	}
}

func (s *consulSession) TryLock(ctx context.Context, key string, value []byte) (Lock, error) {
	ctx, done, err := s.c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	h, _, _, err := s.acquire(ctx, key, value)
	return h, err
}

func (s *consulSession) Lock(ctx context.Context, key string, value []byte) (Lock, error) {
	ctx, done, err := s.c.opCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// Stop waiting when the session lapses.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	go func() {
		select {
		case <-s.lapsed:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		h, index, held, err := s.acquire(ctx, key, value)
		if err != ErrLocked {
			if err != nil && ctx.Err() != nil {
				if uerr := s.usable(); uerr != nil {
					return nil, uerr
				}
			}
			return h, err
		}
		if held {
			// Wait for the holder to change.
			opts, cancelQuery := s.c.blocking(ctx, index)
			_, _, err = s.c.kv.Get(s.c.full(key), opts)
			cancelQuery()
		}
		// In lock-delay nothing in Consul changes when the delay ends,
		// so poll; after a failed query, pause before the next attempt.
		if !held || err != nil {
			_ = ctxtime.Sleep(ctx, min(500*time.Millisecond, s.c.cfg.RetryInterval))
		}
		if ctx.Err() != nil {
			if uerr := s.usable(); uerr != nil {
				return nil, uerr
			}
			return nil, ctx.Err()
		}
	}
}

type consulLock struct {
	s      *consulSession
	key    string
	ctx    context.Context
	cancel context.CancelFunc
	lost   chan struct{}
	once   sync.Once
}

func (h *consulLock) Key() string           { return h.key }
func (h *consulLock) Lost() <-chan struct{} { return h.lost }

func (h *consulLock) lose() {
	h.once.Do(func() {
		close(h.lost)
		h.cancel()
	})
}

// watch follows the key with blocking queries and loses the lock when the
// key is gone or held by another session, or when the session lapses.
func (h *consulLock) watch() {
	defer h.s.c.wg.Done()
	defer h.lose()
	go func() {
		select {
		case <-h.s.lapsed:
			h.lose()
		case <-h.ctx.Done():
		}
	}()
	var index uint64
	// confirm: the last read found the key gone or taken. A leader just
	// elected answers from state it may not have caught up yet (as renew
	// notes), so a consistent read, which waits for that, decides.
	confirm := false
	for {
		var opts *api.QueryOptions
		var cancel context.CancelFunc
		if confirm {
			var ctx context.Context
			ctx, cancel = context.WithTimeout(h.ctx, h.s.c.cfg.WaitTime)
			opts = (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
		} else {
			opts, cancel = h.s.c.blocking(h.ctx, index)
		}
		kv, meta, err := h.s.c.kv.Get(h.s.c.full(h.key), opts)
		cancel()
		if h.ctx.Err() != nil {
			return
		}
		if err != nil {
			if ctxtime.Sleep(h.ctx, h.s.c.cfg.RetryInterval) != nil {
				return
			}
			continue
		}
		if kv == nil || kv.Session != h.s.id {
			if confirm {
				return
			}
			confirm = true
			continue
		}
		confirm = false
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
}

func (h *consulLock) Release(ctx context.Context) error {
	select {
	case <-h.lost:
		return nil
	default:
	}
	ctx, done, err := h.s.c.opCtx(ctx)
	if err != nil {
		return err
	}
	defer done()
	// Consul's release writes the request body as the new value, so the
	// current value is read and written back, in a transaction that checks
	// nobody changed the key in between.
	full := h.s.c.full(h.key)
	for {
		kv, _, err := h.s.c.kv.Get(full, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return h.s.c.wrap("release", h.key, ctx, err)
		}
		if kv == nil || kv.Session != h.s.id {
			h.lose()
			return nil
		}
		ok, _, _, err := h.s.c.client.Txn().Txn(api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: full, Index: kv.ModifyIndex}},
			{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: full, Value: kv.Value, Flags: kv.Flags, Session: h.s.id}},
		}, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return h.s.c.wrap("release", h.key, ctx, err)
		}
		if ok {
			h.lose()
			return nil
		}
	}
}
