package coord

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// LocalConfig configures NewLocal. Zero fields take the defaults.
type LocalConfig struct {
	// Clock drives TTLs and lock-delays; default RealClock. Tests pass a
	// FakeClock.
	Clock Clock
	// SessionTTL and LockDelay are the defaults for sessions; 10s and 15s
	// (Consul's minimum TTL and default lock-delay) if zero.
	SessionTTL time.Duration
	LockDelay  time.Duration
	// Path, when set, keeps the keys in this file so that they survive
	// the process (OpenLocal; NewLocal ignores it): see OpenLocal.
	Path string
}

// Local is the in-process Service: one process's memory plays the lock
// service, for `tabula dev` and for tests. It has Consul's semantics
// (release-on-expiry, lock-delay, modify indexes, compare-and-set) with two
// differences that only make it more exact: a background session is renewed
// without any I/O, so it never lapses by itself (a session expires only with
// ManualRenew, when its TTL passes on the Clock without a Renew, or when
// Expire or Destroy end it), and watches deliver every change, none
// coalesced.
type Local struct {
	clock      Clock
	ttl, delay time.Duration

	mu       sync.Mutex
	closed   bool
	index    uint64 // the logical clock behind CreateIndex and ModifyIndex
	kv       map[string]*Entry
	delayEnd map[string]time.Time // key → end of its lock-delay
	sessions map[string]*localSession
	nextID   int
	locks    map[string]map[*localLock]bool // key → handles that may hold it
	watchers map[*localWatcher]bool
	// changed is closed and replaced on every change and when a
	// lock-delay ends: blocked Lock calls wait on it.
	changed chan struct{}

	// path is the file the keys are kept in ("": memory only); dirty
	// says the keys changed since it was last written (see
	// localfile.go).
	path  string
	dirty bool
}

var _ Service = (*Local)(nil)

// NewLocal returns an empty in-process service.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = 15 * time.Second
	}
	return &Local{
		clock:    cfg.Clock,
		ttl:      cfg.SessionTTL,
		delay:    cfg.LockDelay,
		kv:       map[string]*Entry{},
		delayEnd: map[string]time.Time{},
		sessions: map[string]*localSession{},
		locks:    map[string]map[*localLock]bool{},
		watchers: map[*localWatcher]bool{},
		changed:  make(chan struct{}),
	}
}

// Close ends every session with ErrClosed and every watch. The keys are
// left as they are.
func (l *Local) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *Local) closeLocked() {
	if l.closed {
		return
	}
	l.closed = true
	for _, s := range l.sessions {
		s.finishLocked(ErrClosed)
	}
	for key, hs := range l.locks {
		for h := range hs {
			h.loseLocked()
		}
		delete(l.locks, key)
	}
	for w := range l.watchers {
		w.cancel()
	}
	l.broadcastLocked()
}

// Expire ends session id as if its TTL had passed without a renewal: its
// locks are released and enter lock-delay. Tests of the master use it to
// kill a tablet server's session. It is a no-op for an unknown session.
func (l *Local) Expire(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sessions[id]; s != nil {
		l.endSessionLocked(s, ErrSessionGone)
	}
}

// EndSession implements Service.
func (l *Local) EndSession(ctx context.Context, id string) (time.Duration, error) {
	if err := l.begin(ctx); err != nil {
		return 0, err
	}
	defer l.mu.Unlock()
	s := l.sessions[id]
	if s == nil {
		return 0, ErrSessionGone
	}
	l.endSessionLocked(s, ErrSessionGone)
	return HolderLease(s.ttl, s.lease), nil
}

func (l *Local) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// NewSession implements Service.
func (l *Local) NewSession(ctx context.Context, opts SessionOptions) (Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.TTL <= 0 {
		opts.TTL = l.ttl
	}
	if opts.LockDelay == 0 {
		opts.LockDelay = l.delay
	}
	if opts.LockDelay < 0 {
		opts.LockDelay = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	l.nextID++
	l.index++
	s := &localSession{
		l:      l,
		id:     fmt.Sprintf("local-%d", l.nextID),
		ttl:    opts.TTL,
		lease:  HolderLease(opts.TTL, opts.Lease),
		delay:  opts.LockDelay,
		manual: opts.ManualRenew,
		lapsed: make(chan struct{}),
		done:   make(chan struct{}),
	}
	l.sessions[s.id] = s
	if s.manual {
		s.armLocked()
	}
	return s, nil
}

// endSessionLocked ends s: its keys are unlocked and enter lock-delay.
func (l *Local) endSessionLocked(s *localSession, err error) {
	if s.ended {
		return
	}
	s.finishLocked(err)
	delete(l.sessions, s.id)
	now := l.clock.Now()
	keys := make([]string, 0)
	for key, e := range l.kv {
		if e.Session == s.id {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		l.releaseLocked(key, s.delay, now)
		l.emitLocked(Event{Kind: EventPut, Entry: copyEntry(l.kv[key])})
		l.checkLocksLocked(key)
	}
	// Handles on keys this session no longer holds (already lost) are
	// cleaned by checkLocksLocked; any left belong to keys deleted earlier.
	for key, hs := range l.locks {
		for h := range hs {
			if h.s == s {
				h.loseLocked()
				delete(hs, h)
			}
		}
		if len(hs) == 0 {
			delete(l.locks, key)
		}
	}
	l.broadcastLocked()
	// Nobody to tell of a failure: it closes the service (commitLocked).
	_ = l.commitLocked()
}

// releaseLocked unlocks key (its session ended at now) and puts it in
// lock-delay for delay.
func (l *Local) releaseLocked(key string, delay time.Duration, now time.Time) {
	e := l.kv[key]
	l.index++
	e.Session = ""
	e.ModifyIndex = l.index
	if delay > 0 {
		l.delayEnd[key] = now.Add(delay)
		// Wake blocked Lock calls when the delay ends.
		l.clock.AfterFunc(delay, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.broadcastLocked()
		})
	}
}

// checkLocksLocked marks lost every handle on key whose session no longer
// holds it.
func (l *Local) checkLocksLocked(key string) {
	e := l.kv[key]
	for h := range l.locks[key] {
		if e == nil || e.Session != h.s.id || h.s.ended {
			h.loseLocked()
			delete(l.locks[key], h)
		}
	}
	if len(l.locks[key]) == 0 {
		delete(l.locks, key)
	}
}

func copyEntry(e *Entry) Entry {
	c := *e
	c.Value = bytes.Clone(e.Value)
	return c
}

// Get implements KV.
func (l *Local) Get(ctx context.Context, key string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Entry{}, ErrClosed
	}
	e := l.kv[key]
	if e == nil {
		return Entry{}, ErrNotFound
	}
	return copyEntry(e), nil
}

// setLocked writes key's value (and, if session is non-empty, its lock
// holder), bumping the index.
func (l *Local) setLocked(key string, value []byte, session string) {
	l.index++
	e := l.kv[key]
	if e == nil {
		e = &Entry{Key: key, CreateIndex: l.index}
		l.kv[key] = e
	}
	e.Value = bytes.Clone(value)
	e.ModifyIndex = l.index
	if session != "" {
		e.Session = session
	}
	l.emitLocked(Event{Kind: EventPut, Entry: copyEntry(e)})
	l.broadcastLocked()
}

func (l *Local) deleteLocked(key string) {
	l.index++
	delete(l.kv, key)
	l.emitLocked(Event{Kind: EventDelete, Entry: Entry{Key: key}})
	l.checkLocksLocked(key)
	l.broadcastLocked()
}

func (l *Local) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Put implements KV.
func (l *Local) Put(ctx context.Context, key string, value []byte) error {
	if err := l.begin(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	l.setLocked(key, value, "")
	return l.commitLocked()
}

// CAS implements KV.
func (l *Local) CAS(ctx context.Context, key string, value []byte, index uint64) error {
	if err := l.begin(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	e := l.kv[key]
	if (e == nil && index != 0) || (e != nil && e.ModifyIndex != index) {
		return ErrConflict
	}
	l.setLocked(key, value, "")
	return l.commitLocked()
}

// Delete implements KV.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := l.begin(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	if l.kv[key] != nil {
		l.deleteLocked(key)
	}
	return l.commitLocked()
}

// DeleteCAS implements KV.
func (l *Local) DeleteCAS(ctx context.Context, key string, index uint64) error {
	if err := l.begin(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	e := l.kv[key]
	if e == nil {
		return ErrNotFound
	}
	if e.ModifyIndex != index {
		return ErrConflict
	}
	l.deleteLocked(key)
	return l.commitLocked()
}

// List implements KV.
func (l *Local) List(ctx context.Context, prefix string) ([]Entry, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	defer l.mu.Unlock()
	var out []Entry
	for key, e := range l.kv {
		if strings.HasPrefix(key, prefix) {
			out = append(out, copyEntry(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Watch implements KV.
func (l *Local) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	return l.watch(ctx, prefix, false)
}

// WatchKey implements KV.
func (l *Local) WatchKey(ctx context.Context, key string) (<-chan Event, error) {
	return l.watch(ctx, key, true)
}

func (l *Local) watch(ctx context.Context, prefix string, exact bool) (<-chan Event, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	defer l.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	w := &localWatcher{
		prefix: prefix,
		exact:  exact,
		ctx:    wctx,
		cancel: cancel,
		wake:   make(chan struct{}, 1),
		out:    make(chan Event),
	}
	var initial []*Entry
	for _, e := range l.kv {
		if w.matches(e.Key) {
			initial = append(initial, e)
		}
	}
	sort.Slice(initial, func(i, j int) bool { return initial[i].ModifyIndex < initial[j].ModifyIndex })
	for _, e := range initial {
		w.queue = append(w.queue, Event{Kind: EventPut, Entry: copyEntry(e)})
	}
	l.watchers[w] = true
	go l.deliver(w)
	return w.out, nil
}

type localWatcher struct {
	prefix string
	exact  bool
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	out    chan Event
	queue  []Event // guarded by Local.mu; unbounded so writers never block
}

func (w *localWatcher) matches(key string) bool {
	if w.exact {
		return key == w.prefix
	}
	return strings.HasPrefix(key, w.prefix)
}

func (l *Local) emitLocked(ev Event) {
	l.dirty = true
	for w := range l.watchers {
		if w.matches(ev.Entry.Key) {
			w.queue = append(w.queue, ev)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// deliver moves w's queued events to its channel until its context ends.
func (l *Local) deliver(w *localWatcher) {
	defer close(w.out)
	defer func() {
		l.mu.Lock()
		delete(l.watchers, w)
		l.mu.Unlock()
	}()
	for {
		l.mu.Lock()
		var ev Event
		have := len(w.queue) > 0
		if have {
			ev = w.queue[0]
			w.queue = w.queue[1:]
		}
		l.mu.Unlock()
		if !have {
			select {
			case <-w.wake:
				continue
			case <-w.ctx.Done():
				return
			}
		}
		select {
		case w.out <- ev:
		case <-w.ctx.Done():
			return
		}
	}
}

type localSession struct {
	l          *Local
	id         string
	ttl, delay time.Duration
	lease      time.Duration // the holder's (HolderLease)
	manual     bool

	// Guarded by l.mu.
	ended    bool
	err      error
	deadline time.Time // ManualRenew: when the session expires (a TTL)
	// holderUntil (ManualRenew): when the holder's own lease runs out;
	// Valid is false past it until the next Renew.
	holderUntil time.Time
	stop        func() bool

	lapsed, done chan struct{}
}

func (s *localSession) ID() string               { return s.id }
func (s *localSession) TTL() time.Duration       { return s.ttl }
func (s *localSession) LockDelay() time.Duration { return s.delay }
func (s *localSession) Lapsed() <-chan struct{}  { return s.lapsed }
func (s *localSession) Done() <-chan struct{}    { return s.done }

func (s *localSession) Err() error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.err
}

func (s *localSession) Valid() bool {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.validLocked()
}

func (s *localSession) validLocked() bool {
	return s.aliveLocked() && (!s.manual || s.l.clock.Now().Before(s.holderUntil))
}

// aliveLocked reports whether the session has not ended nor passed its
// TTL (with a real clock the expiry timer can run late; the deadline is
// the truth).
func (s *localSession) aliveLocked() bool {
	if s.ended {
		return false
	}
	return !s.manual || s.l.clock.Now().Before(s.deadline)
}

// armLocked (re)starts a manual session's expiry timer for a full TTL,
// and its holder's lease.
func (s *localSession) armLocked() {
	if s.stop != nil {
		s.stop()
	}
	s.deadline = s.l.clock.Now().Add(s.ttl)
	s.holderUntil = s.l.clock.Now().Add(s.lease)
	deadline := s.deadline
	s.stop = s.l.clock.AfterFunc(s.ttl, func() {
		s.l.mu.Lock()
		defer s.l.mu.Unlock()
		// A Renew after this timer was set moved the deadline on.
		if s.deadline.Equal(deadline) {
			s.l.endSessionLocked(s, ErrSessionGone)
		}
	})
}

// finishLocked closes the session's channels; the caller releases its keys.
func (s *localSession) finishLocked(err error) {
	if s.ended {
		return
	}
	s.ended = true
	s.err = err
	if s.stop != nil {
		s.stop()
	}
	close(s.lapsed)
	close(s.done)
}

func (s *localSession) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.ended {
		return s.err
	}
	if !s.aliveLocked() {
		// The deadline passed but the timer has not run yet.
		s.l.endSessionLocked(s, ErrSessionGone)
		return s.err
	}
	if s.manual {
		s.armLocked()
	}
	return nil
}

func (s *localSession) Destroy(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.l.endSessionLocked(s, ErrSessionGone)
	return nil
}

// tryLockLocked is one attempt; it returns the channel that signals the
// next change, for Lock to wait on.
func (s *localSession) tryLockLocked(key string, value []byte, mustExist bool) (Lock, <-chan struct{}, error) {
	l := s.l
	changed := l.changed
	if l.closed {
		return nil, nil, ErrClosed
	}
	if !s.aliveLocked() {
		if !s.ended {
			l.endSessionLocked(s, ErrSessionGone)
		}
		return nil, nil, s.err
	}
	if !s.validLocked() {
		return nil, nil, ErrSessionLapsed // the holder's lease, until a Renew
	}
	if mustExist && l.kv[key] == nil {
		return nil, nil, ErrNotFound
	}
	if end, ok := l.delayEnd[key]; ok {
		if l.clock.Now().Before(end) {
			return nil, changed, ErrLocked
		}
		delete(l.delayEnd, key)
	}
	if e := l.kv[key]; e != nil && e.Session != "" && e.Session != s.id {
		return nil, changed, ErrLocked
	}
	l.setLocked(key, value, s.id)
	if err := l.commitLocked(); err != nil {
		return nil, nil, err
	}
	h := &localLock{s: s, key: key, lost: make(chan struct{})}
	if l.locks[key] == nil {
		l.locks[key] = map[*localLock]bool{}
	}
	l.locks[key][h] = true
	return h, nil, nil
}

func (s *localSession) TryLock(ctx context.Context, key string, value []byte) (Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	h, _, err := s.tryLockLocked(key, value, false)
	return h, err
}

func (s *localSession) TryLockExisting(ctx context.Context, key string, value []byte) (Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	h, _, err := s.tryLockLocked(key, value, true)
	return h, err
}

func (s *localSession) Lock(ctx context.Context, key string, value []byte) (Lock, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.l.mu.Lock()
		h, changed, err := s.tryLockLocked(key, value, false)
		s.l.mu.Unlock()
		if err != ErrLocked {
			return h, err
		}
		select {
		case <-changed:
		case <-s.lapsed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type localLock struct {
	s      *localSession
	key    string
	lost   chan struct{}
	isLost bool // guarded by Local.mu
}

func (h *localLock) Key() string           { return h.key }
func (h *localLock) Lost() <-chan struct{} { return h.lost }

func (h *localLock) loseLocked() {
	if !h.isLost {
		h.isLost = true
		close(h.lost)
	}
}

func (h *localLock) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := h.s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.isLost {
		return nil
	}
	if e := l.kv[h.key]; e != nil && e.Session == h.s.id {
		l.index++
		e.Session = ""
		e.ModifyIndex = l.index
		l.emitLocked(Event{Kind: EventPut, Entry: copyEntry(e)})
		l.broadcastLocked()
	}
	l.checkLocksLocked(h.key)
	return l.commitLocked()
}
