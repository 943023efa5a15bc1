package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// errLost is why a term ends when the master lock or session goes.
var errLost = errors.New("master: lock lost")

// term is one tenure as the active master. Its state lives only as long
// as the lock: a successor rebuilds everything from servers/, the servers'
// reports and METADATA (the paper's §5.2), so nothing here needs
// persisting except the epoch counter.
type term struct {
	c       *Loop
	elected time.Time // when the term began
	sess    coord.Session
	lock    coord.Lock
	ep      epochs

	// keys is the picture of servers/ from the watch, by key.
	keys map[string]coord.Entry
	// memory is what observations carry from round to round (buildState).
	memory
	// released holds, for the current round, the servers whose key is
	// released but not yet the master's: nothing is sent to them.
	released map[assign.ServerID]bool
	// fenced holds, by server key, the time before which the master must
	// not take a key whose session it ended (or found released at the
	// start of the term): the holder may believe its lease valid until
	// then.
	fenced map[string]time.Time
	// serverTTL is LoopOptions.ServerTTL, resolved.
	serverTTL time.Duration
	// sorted receives the outcome of the SortLog calls under way.
	sorted chan sortOutcome
	// merging holds the merges under way, by left tablet; merged receives
	// their outcomes (merge.go).
	merging map[assign.TabletID]assign.MergeUnderway
	merged  chan mergeOutcome
	// lease is the term's own lease (takeover.go).
	lease *masterLease
	// background holds the split repairs and repairs under way (the
	// Rescan case of prepare, run's repairs): the term waits for them
	// before it ends. rescanned receives the split repairs' outcomes; rescanning
	// holds the ranges with one under way (rescanKey).
	background sync.WaitGroup
	rescanned  chan string
	rescanning map[string]bool
	// callSlots bounds the loads and unloads under way in the term
	// (LoadParallelism); callDone receives the outcomes of those a round
	// stopped waiting for (send).
	callSlots chan struct{}
	callDone  chan callOutcome
	// stalled counts, per server, the calls a round stopped waiting for
	// whose outcome has not come: nothing more is sent to the server
	// meanwhile (prepare), so that every round does not wait callWait for
	// one more call it cannot answer.
	stalled map[assign.ServerID]int
}

// callOutcome is how a load or unload call ended: err is errLost for one
// not made because the term ended. stalled says the round that sent it
// counted it in term.stalled.
type callOutcome struct {
	action  assign.Action
	err     error
	stalled bool
}

type sortOutcome struct {
	dead assign.ServerID
	err  error
}

// lead runs the assignment loop while the lock holds. It returns errLost when
// the session lapses or the lock is lost, ctx's error, or ErrClosed.
func (c *Loop) lead(ctx context.Context, sess coord.Session, lock coord.Lock) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The term's own lease starts from the session's last renewal, which
	// the Lock call just preceded: renew now so that it starts here.
	lease := &masterLease{clock: c.opts.Clock, lease: c.opts.Lease}
	if lease.lease > 0 {
		sent := c.opts.Clock.Now()
		if err := sess.Renew(ctx); err != nil {
			return errLost
		}
		lease.until = sent.Add(lease.lease)
		go lease.keep(ctx, sess, cancel)
	}
	go func() {
		// Stop everything in progress as soon as the lease may be gone:
		// a request sent after that could race a successor's.
		select {
		case <-lock.Lost():
		case <-sess.Lapsed():
		case <-ctx.Done():
		}
		cancel()
	}()
	t := &term{
		c:          c,
		elected:    c.opts.Clock.Now(),
		sess:       sess,
		lock:       lock,
		ep:         epochs{kv: c.opts.Coord, block: c.opts.EpochBlock},
		keys:       make(map[string]coord.Entry),
		memory:     newMemory(),
		fenced:     make(map[string]time.Time),
		serverTTL:  c.opts.ServerTTL,
		sorted:     make(chan sortOutcome, 16),
		merging:    make(map[assign.TabletID]assign.MergeUnderway),
		merged:     make(chan mergeOutcome, 16),
		lease:      lease,
		rescanned:  make(chan string, 16),
		rescanning: make(map[string]bool),
		callSlots:  make(chan struct{}, c.opts.LoadParallelism),
		callDone:   make(chan callOutcome),
		stalled:    make(map[assign.ServerID]int),
	}
	if t.serverTTL <= 0 {
		t.serverTTL = sess.TTL()
	}
	err := t.run(ctx)
	// Nothing of this term may outlive it: a successor term of this
	// process plans on a picture its repairs must not change behind it.
	cancel()
	t.background.Wait()
	c.failMergeRequests(fmt.Errorf("master: the term carrying the merge out ended (METADATA tells whether it was committed): %w", errLost))
	if t.lost() {
		return errLost
	}
	return err
}

// lost reports whether the term must stop acting. Checked before every
// request: Lapsed is closed by a goroutine that may run late, Valid is not.
func (t *term) lost() bool {
	select {
	case <-t.lock.Lost():
		return true
	default:
	}
	return !t.sess.Valid() || !t.lease.valid()
}

func (t *term) run(ctx context.Context) error {
	log := t.c.opts.Logger
	// Watch first, then List: whatever changes after the List shows up as
	// an event, so there is no gap; the watch's initial snapshot, which
	// may be older than the List, is ignored key by key by ModifyIndex.
	events, err := t.c.opts.Coord.Watch(ctx, coord.PrefixServers)
	if err != nil {
		return err
	}
	entries, err := t.c.opts.Coord.List(ctx, coord.PrefixServers)
	if err != nil {
		return err
	}
	start := t.c.opts.Clock.Now()
	for _, e := range entries {
		t.keys[e.Key] = e
		if _, ok := coord.ServerID(e.Key); ok && e.Session == "" {
			// A predecessor may have ended this session moments ago.
			t.fenced[e.Key] = start.Add(coord.FenceWait(t.serverTTL))
		}
	}

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// The repairs (LoopOptions.Repair) are tried before the first round —
	// after a failover METADATA is served, and they are done before the
	// new master plans anything — and after each round until they succeed
	// (at a cold start METADATA is served only after some rounds). Those
	// later tries run in the background, one at a time: they read and
	// write METADATA, which a failed server may hold, and a try waiting
	// its RPCTimeout for it must not hold up the rounds that detect the
	// failure and reassign the tablets (a new master's first rounds after
	// Consul restarted and a server was killed came 3–6 s apart for it).
	// Running beside the rounds they are as any admin call writing
	// METADATA rows meanwhile (a table created or deleted).
	repaired := t.c.opts.Repair == nil
	repairing := false
	repairDone := make(chan error, 1)
	tryRepair := func(timeout time.Duration) error {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return t.c.opts.Repair(rctx)
	}
	noteRepair := func(err error) bool {
		if err != nil {
			log.Warn("master: repairing what a predecessor left unfinished (tried again after the next round)", "err", err)
			return false
		}
		repaired = true
		return true
	}
	// Before the first round only a Tick: METADATA may not be served.
	if !repaired && !t.lost() {
		noteRepair(tryRepair(t.c.opts.Tick))
	}
	for {
		progressed, err := t.round(ctx)
		if err != nil {
			if ctx.Err() != nil || t.lost() {
				return cmpErr(ctx, err)
			}
			log.Warn("master: round", "err", err)
		}
		if progressed {
			// Requests were sent: the reports may already allow the next
			// step (root, then METADATA, then user tablets).
			poke()
		}
		if !repaired && !repairing && !t.lost() {
			repairing = true
			t.background.Go(func() {
				err := tryRepair(t.c.opts.RPCTimeout)
				select {
				case repairDone <- err:
				case <-ctx.Done():
				}
			})
		}
		next := t.c.opts.Tick
		if len(t.unreachable) > 0 {
			// A server is failing: count its failures quickly.
			next /= 4
		}
		now := t.c.opts.Clock.Now()
		for _, until := range t.fenced {
			// Declare a fenced server dead as soon as its wait is over.
			if d := until.Sub(now); d > 0 && d < next {
				next = d + time.Millisecond
			}
		}
		stop := t.c.opts.Clock.AfterFunc(next, poke)
	wait:
		for {
			select {
			case <-ctx.Done():
				stop()
				return ctx.Err()
			case ev, ok := <-events:
				if !ok {
					stop()
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return errors.New("master: servers/ watch ended")
				}
				t.apply(ev)
			case r := <-t.sorted:
				t.sortDone(r)
			case o := <-t.merged:
				t.mergeDone(o)
			case key := <-t.rescanned:
				// The next round reads METADATA again at its time: a
				// repair that changed nothing is asked again then, not at
				// once (back to back, the repairs of a pending split ran
				// for as long as it was pending).
				delete(t.rescanning, key)
				continue wait
			case o := <-t.callDone:
				// A call a round stopped waiting for has ended: a load
				// answered may allow the next step, a failure is resent
				// after its back-off.
				if o.stalled {
					if t.stalled[o.action.Server]--; t.stalled[o.action.Server] <= 0 {
						delete(t.stalled, o.action.Server)
					}
				}
				t.noteOutcome(o)
			case err := <-repairDone:
				repairing = false
				if !noteRepair(err) {
					// Tried again after the next round, at its time.
					continue wait
				}
				// Rows may have been written: assign them now.
			case <-t.c.poke:
			case <-wake:
			}
			break
		}
		stop()
		// Take every event already delivered, so a round sees them all.
	drain:
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					break drain
				}
				t.apply(ev)
			default:
				break drain
			}
		}
	}
}

// apply folds a watch event into the picture of servers/.
func (t *term) apply(ev coord.Event) {
	switch ev.Kind {
	case coord.EventDelete:
		delete(t.keys, ev.Entry.Key)
	case coord.EventPut:
		if old, ok := t.keys[ev.Entry.Key]; ok && old.ModifyIndex > ev.Entry.ModifyIndex {
			return // the snapshot is older than what List showed
		}
		t.keys[ev.Entry.Key] = ev.Entry
	}
}

func (t *term) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.c.opts.RPCTimeout)
}

// detectDeaths declares dead every server whose key is no longer locked by
// its own session: the master takes the lock first (so the server, should
// it still be running, can neither hold its key nor serve), then deletes
// the key (so it exits). Only then are its tablets reassignable. A key in
// lock-delay is retried on later rounds.
//
// A server that a new one at its address succeeds (coord.ServerRecord's
// Succeeds: the newcomer took the lock the old process held until it
// exited) is dead already: its session is ended and its key deleted at
// once, with no wait for its lease or the lock-delay.
func (t *term) detectDeaths(ctx context.Context) error {
	keys := make([]string, 0, len(t.keys))
	successors := make(map[string]string) // server → the server that succeeds it
	for k, e := range t.keys {
		keys = append(keys, k)
		if id, ok := coord.ServerID(k); ok {
			if prev := coord.ParseServerRecord(e.Value).Succeeds; prev != "" && prev != id {
				successors[prev] = id
			}
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		e := t.keys[key]
		id, ok := coord.ServerID(key)
		successor, exited := successors[id]
		if !ok || (e.Session != "" && e.Session != t.sess.ID() && !exited) {
			continue
		}
		if t.lost() {
			return errLost
		}
		if exited {
			if err := t.retireExited(ctx, key); err != nil {
				t.c.opts.Logger.Warn("master: end the session of a server that exited", "server", id, "successor", successor, "err", err)
				continue
			}
		} else if until, ok := t.fenced[key]; ok && t.c.opts.Clock.Now().Before(until) {
			continue // the holder of an ended session may still act
		} else if e.Session != t.sess.ID() {
			_, err := t.sess.TryLockExisting(ctx, key, []byte(t.c.opts.Name))
			switch {
			case errors.Is(err, coord.ErrLocked):
				continue // lock-delay, or the server took it back
			case errors.Is(err, coord.ErrNotFound):
				delete(t.keys, key)
				continue
			case err != nil:
				return fmt.Errorf("master: lock %s: %w", key, err)
			}
		}
		// The lock is ours, or the server exited: it cannot serve any
		// more. (A stale watch event may show the key again after its
		// delete: the log's state, a sort under way or done, stays.)
		_, known := t.dead[assign.ServerID(id)]
		if !known {
			t.dead[assign.ServerID(id)] = assign.LogUnsorted
			t.held[assign.ServerID(id)] = len(t.reports[assign.ServerID(id)])
		}
		if err := t.c.opts.Coord.Delete(ctx, key); err != nil {
			// Still dead (we hold its lock); the delete is retried next
			// round, the key being locked by our session.
			return fmt.Errorf("master: delete %s: %w", key, err)
		}
		delete(t.keys, key)
		delete(t.fenced, key)
		switch {
		case known:
			// A stale watch event showed the key again: said already.
		case exited:
			t.c.opts.Logger.Info("master: server dead", "server", id, "succeeded_by", successor)
		default:
			t.c.opts.Logger.Info("master: server dead", "server", id)
		}
	}
	return nil
}

// retireExited ends the session of a server whose successor proved it
// exited (detectDeaths), unless it is ended already. Its key is not locked
// by the master: the lock-delay that would hold that up guards against a
// holder that has not yet noticed its loss, and this one is gone.
func (t *term) retireExited(ctx context.Context, key string) error {
	e := t.keys[key]
	if e.Session == "" || e.Session == t.sess.ID() {
		return nil
	}
	if _, err := t.c.opts.Coord.EndSession(ctx, e.Session); err != nil && !errors.Is(err, coord.ErrSessionGone) {
		return err
	}
	e.Session = ""
	t.keys[key] = e
	id, _ := coord.ServerID(key)
	delete(t.unreachable, assign.ServerID(id))
	return nil
}

// fenceUnreachable ends the session of every server whose List has failed
// for UnreachableAfter over at least three rounds, so that it can be
// declared dead once the server's own lease has surely run out —
// coord.FenceWait of the lease EndSession reports: the tablet server's
// ServerLease (a few seconds), or its TTL if it keeps none — instead of
// when the lock service expires the session (up to twice the TTL on
// Consul) plus the lock-delay. Why that wait is enough: no renewal of the
// session can succeed after EndSession destroyed it, so the server's last
// successful renewal started before EndSession returned, and the server
// stops serving a lease after that start on its own monotonic clock
// (coord's lease.go; the server refuses reads and writes once its session
// is not Valid). It does nothing unless some other server answered this
// round: a master that reaches no server is more likely cut off itself.
func (t *term) fenceUnreachable(ctx context.Context, answered int) {
	if t.c.opts.UnreachableAfter < 0 || answered == 0 {
		return
	}
	now := t.c.opts.Clock.Now()
	for id, f := range t.unreachable {
		if !f.due(now, t.c.opts.UnreachableAfter, t.c.opts.GoneAfter) {
			continue
		}
		key := f.key
		e, ok := t.keys[key]
		if !ok || e.Session == "" || e.Session == t.sess.ID() {
			continue
		}
		if t.lost() {
			return
		}
		lease, err := t.c.opts.Coord.EndSession(ctx, e.Session)
		switch {
		case errors.Is(err, coord.ErrSessionGone):
			// Expired meanwhile: the watch will show the key released, and
			// the lock service waited at least a TTL.
			continue
		case err != nil:
			t.c.opts.Logger.Warn("master: end session", "server", id, "err", err)
			continue
		}
		wait := coord.FenceWait(lease)
		t.fenced[key] = t.c.opts.Clock.Now().Add(wait)
		e.Session = ""
		t.keys[key] = e
		delete(t.unreachable, id)
		t.c.opts.Logger.Info("master: server unreachable, session ended", "server", id,
			"failing_for", now.Sub(f.since).String(), "attempts", f.count, "gone_in_a_row", f.gone, "declare_dead_in", wait.String())
	}
}

// round gathers a State, plans, and carries the actions out: loads and
// unloads in parallel (up to LoadParallelism at once; those not done within
// callWait finish beside the next rounds, send), log sorts in the
// background. sent says whether it sent requests.
func (t *term) round(ctx context.Context) (sent bool, err error) {
	if err := t.detectDeaths(ctx); err != nil {
		return false, err
	}
	st, err := t.observe(ctx)
	if err != nil {
		return false, err
	}
	tablets := make(map[assign.TabletID]assign.Tablet, len(st.Tablets))
	for _, tb := range st.Tablets {
		tablets[tb.ID] = tb
	}
	var calls []call
	cfg := t.c.opts.Plan
	cfg.NoBalance = t.c.opts.Clock.Now().Sub(t.elected) < t.c.opts.BalanceAfter
	for _, a := range assign.Plan(st, cfg) {
		if t.lost() {
			return false, errLost
		}
		if c := t.prepare(ctx, st, tablets, a); c.run != nil {
			calls = append(calls, c)
		}
	}
	for _, o := range t.send(ctx, calls) {
		t.noteOutcome(o)
	}
	return len(calls) > 0, ctx.Err()
}

// noteOutcome records how a load or unload call ended. Called in the
// loop's goroutine, between rounds: every List of the next round is
// asked after it.
func (t *term) noteOutcome(o callOutcome) {
	switch {
	case o.err == nil && o.action.Kind == assign.Assign:
		t.noteLoaded(o.action)
	case o.err != nil && !errors.Is(o.err, errLost):
		t.noteFailed(o.action)
	}
}

// noteFailed backs the resend of a (an Assign or Unassign whose call
// failed) off: it goes again to the same server after callRetry of the
// failures in a row, not after the planner's LoadTimeout — a load refused,
// or an unload whose flush failed, while the store or the lock service was
// down for a few seconds is resent once they are back, not half a minute
// later. (A failed unload leaves the tablet served where it was; the move
// it began resumes with the resend.)
func (t *term) noteFailed(a assign.Action) {
	kind, ok := requestKind(a.Kind)
	if !ok {
		return
	}
	r := t.inflight[a.Tablet]
	if r != nil && r.Kind == kind && r.Server == a.Server {
		r.failures++
		r.Retry = callRetry(r.failures)
	}
}

// requestKind is the kind of request an action of kind k records in
// flight, if it records one.
func requestKind(k assign.ActionKind) (assign.RequestKind, bool) {
	switch k {
	case assign.Assign:
		return assign.LoadRequest, true
	case assign.Unassign:
		return assign.UnloadRequest, true
	}
	return 0, false
}

// callRetry is the age at which a load or unload whose call failed n
// times in a row is sent again: 1s, 2s, 4s, … up to 32s (the planner's
// LoadTimeout, 30s by default, caps it).
func callRetry(n int) time.Duration {
	return time.Second << min(max(n-1, 0), 5)
}

// noteLoaded marks the load a (an Assign whose call succeeded: the server
// loaded the tablet) as answered, if it is still the tablet's request in
// flight. Every List of the next round is asked after this, so a target
// that does not list the tablet then no longer serves it (settle).
func (t *term) noteLoaded(a assign.Action) {
	r := t.inflight[a.Tablet]
	if r != nil && r.Kind == assign.LoadRequest && r.Server == a.Server {
		r.loaded = true
	}
}

// call is a request to a tablet server that prepare has recorded in
// flight and send carries out.
type call struct {
	action assign.Action
	run    func(context.Context) error
	// answered, for a load or unload, is set once the server answered
	// the call (what follows is METADATA's: a load's location write);
	// nil for calls that ask no server (Record).
	answered *atomic.Bool
}

// send runs calls, LoadParallelism at a time in the whole term, logs
// their failures and returns the outcomes of those that ended within
// callWait. A round waits no longer: a call to a server that stalled
// (paused, its disk hung) would hold it up for the whole RPCTimeout, and
// with it the detection of that very server's failure (a campaign's
// pause-server fault went 12 s without a round, an unload to the paused
// server outstanding). The calls still running go on beside the rounds,
// their outcomes delivered to the loop through t.callDone. Either way a
// call's tablet stays in flight until its outcome or a report settles it,
// so the planner places it nowhere else meanwhile. A failed call stays in
// flight too (its outcome is unknown); the planner resends it to the same
// server after its back-off (noteFailed) or its timeout.
func (t *term) send(ctx context.Context, calls []call) []callOutcome {
	if len(calls) == 0 {
		return nil
	}
	type result struct {
		i int
		callOutcome
	}
	results := make(chan result, len(calls))
	for i, c := range calls {
		t.background.Go(func() {
			results <- result{i, callOutcome{action: c.action, err: t.runCall(ctx, c)}}
		})
	}
	wait := time.NewTimer(callWait(t.c.opts.Tick))
	defer wait.Stop()
	var out []callOutcome
	done := make([]bool, len(calls))
	for len(out) < len(calls) {
		select {
		case r := <-results:
			out = append(out, r.callOutcome)
			done[r.i] = true
		case <-wait.C:
			rest := len(calls) - len(out)
			stalled := make([]bool, len(calls))
			for i, c := range calls {
				if !done[i] && c.answered != nil && !c.answered.Load() {
					// The server itself has not answered (a load waiting
					// on METADATA's write has).
					stalled[i] = true
					t.stalled[c.action.Server]++
				}
			}
			t.background.Go(func() {
				for range rest {
					var r result
					select {
					case r = <-results:
					case <-ctx.Done():
						return
					}
					r.stalled = stalled[r.i]
					select {
					case t.callDone <- r.callOutcome:
					case <-ctx.Done():
						return
					}
				}
			})
			return out
		}
	}
	return out
}

// callWait is how long a round waits for its calls: a Tick, at least a
// second — loads that recover a log take that long, and a round that
// moves on sooner only runs again to find them in flight.
func callWait(tick time.Duration) time.Duration { return max(tick, time.Second) }

// runCall makes call c once a slot of the term's LoadParallelism is free,
// unless the term ended meanwhile.
func (t *term) runCall(ctx context.Context, c call) error {
	select {
	case t.callSlots <- struct{}{}:
	case <-ctx.Done():
		return errLost
	}
	defer func() { <-t.callSlots }()
	if t.lost() || ctx.Err() != nil {
		return errLost
	}
	err := c.run(ctx)
	if err != nil {
		t.c.opts.Logger.Warn("master: action", "action", c.action.String(), "err", err)
	}
	return err
}

// failingListTimeoutMin is the least time a failing server's List is
// given (Tick/2 otherwise): a loaded server answers from memory in
// milliseconds.
const failingListTimeoutMin = 250 * time.Millisecond

// observe builds the State: it gathers METADATA, the servers' List
// answers (all at once: one that does not answer costs the round
// ListTimeout, not one each) and the keys of servers/, and buildState makes
// the State of them; then servers unreachable for long have their sessions
// ended (fenceUnreachable), even in a round that is skipped.
func (t *term) observe(ctx context.Context) (assign.State, error) {
	// The Lists go out alongside the METADATA read, which may take its
	// timeout at a dead server holding METADATA tablets: failure
	// detection must not wait for it.
	view := roundView{Keys: t.keys, Lists: make(map[assign.ServerID]listAnswer), Asked: t.c.opts.Clock.Now()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sid := range view.toList(t.dead) {
		timeout := t.c.opts.ListTimeout
		if _, failing := t.unreachable[sid]; failing {
			// It has been silent for a whole List already: a failure
			// is counted every round from now on, not every ListTimeout
			// (a paused server took three of them, 7 s, to detect, and
			// every round waited 2 s for it meanwhile). A server that
			// answers resets the count.
			timeout = min(timeout, max(t.c.opts.Tick/2, failingListTimeoutMin))
		}
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			served, err := t.c.opts.Servers.List(lctx, string(sid))
			mu.Lock()
			view.Lists[sid] = listAnswer{Served: served, Err: err}
			mu.Unlock()
		})
	}
	tablets, whole, err := t.metadata(ctx)
	wg.Wait()
	if err != nil {
		return assign.State{}, err
	}
	view.Tablets, view.Whole = tablets, whole
	_, tells := t.c.opts.Metadata.(WholeReader)
	view.Partial = tells && !whole
	view.Now = t.c.opts.Clock.Now()
	o := buildState(view, &t.memory, t.c.opts.OrphanAfter)
	t.released = o.Released
	t.fenceUnreachable(ctx, o.Answered)
	if o.Skip != nil {
		return o.State, o.Skip
	}
	st := o.State
	t.c.mu.Lock()
	t.c.splits = pendingSplits(t.c.splits, st.Tablets, t.c.splitsGone)
	st.Splits = slices.Clone(t.c.splits)
	t.c.mu.Unlock()
	for _, m := range t.merging {
		st.Merges = append(st.Merges, m)
	}
	slices.SortFunc(st.Merges, func(a, b assign.MergeUnderway) int { return strings.Compare(string(a.Left), string(b.Left)) })
	st.MergeRequests = t.c.pendingMergeRequests(st.Tablets)
	t.c.mu.Lock()
	t.c.observed = st
	t.c.mu.Unlock()
	return st, nil
}

func (t *term) metadata(ctx context.Context) (tablets []assign.Tablet, whole bool, err error) {
	rctx, cancel := t.rpcCtx(ctx)
	defer cancel()
	if w, ok := t.c.opts.Metadata.(WholeReader); ok {
		// A copy: the read may ask from several goroutines.
		dead := make(map[string]bool, len(t.dead))
		for id := range t.dead {
			dead[string(id)] = true
		}
		tablets, whole, err = w.TabletsWhole(rctx, func(server string) bool { return dead[server] })
	} else {
		tablets, err = t.c.opts.Metadata.Tablets(rctx)
	}
	if err != nil {
		return nil, false, fmt.Errorf("master: read METADATA: %w", err)
	}
	return tablets, whole, nil
}

// prepare does the bookkeeping of one action in the loop's goroutine and
// returns the request to send, if any. Loads and unloads are recorded in
// flight before they are sent: from then on the planner must not place the
// tablet elsewhere, whatever the call returns. A log sort starts in the
// background; its outcome arrives on t.sorted.
func (t *term) prepare(ctx context.Context, st assign.State, tablets map[assign.TabletID]assign.Tablet, a assign.Action) call {
	now := t.c.opts.Clock.Now()
	switch a.Kind {
	case assign.Assign:
		tb, ok := tablets[a.Tablet]
		if !ok || t.released[a.Server] || t.stalled[a.Server] > 0 {
			// A resend to a server that may be dying waits: once the master
			// holds its lock the load is void and the tablet goes elsewhere.
			// So does a load to a server that has not answered an earlier
			// call (stalled).
			return call{}
		}
		t.inflight[a.Tablet] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: a.Tablet, Server: a.Server}, sent: now, failures: t.failuresSoFar(a)}
		rec := RecoverySource{From: string(a.RecoverFrom), Sorted: a.SortedLog}
		answered := new(atomic.Bool)
		return call{action: a, answered: answered, run: func(ctx context.Context) error { return t.load(ctx, tb, a.Server, rec, answered) }}
	case assign.Unassign:
		if t.released[a.Server] || t.stalled[a.Server] > 0 {
			return call{} // it may be dying, or has not answered a call yet: nothing is sent to it
		}
		if a.Reason == "orphan" {
			t.c.opts.Logger.Info("master: unloading a tablet METADATA has lacked since at least OrphanAfter (a deleted table's)",
				"tablet", a.Tablet, "server", a.Server, "orphan_after", t.c.opts.OrphanAfter.String())
		}
		t.inflight[a.Tablet] = &request{InFlight: assign.InFlight{Kind: assign.UnloadRequest, Tablet: a.Tablet, Server: a.Server, To: a.To}, sent: now, failures: t.failuresSoFar(a)}
		answered := new(atomic.Bool)
		return call{action: a, answered: answered, run: func(ctx context.Context) error {
			rctx, cancel := t.rpcCtx(ctx)
			defer cancel()
			err := t.c.opts.Servers.Unload(rctx, string(a.Server), string(a.Tablet))
			answered.Store(true)
			if err != nil {
				return fmt.Errorf("unload %s from %s: %w", a.Tablet, a.Server, err)
			}
			return nil
		}}
	case assign.Record:
		tb, ok := tablets[a.Tablet]
		if !ok || t.released[a.Server] {
			return call{}
		}
		return call{action: a, run: func(ctx context.Context) error { return t.record(ctx, tb, a.Server) }}
	case assign.SortLog:
		t.startSort(ctx, st, a.Server)
	case assign.Merge:
		t.startMerge(ctx, st, tablets, a)
	case assign.Rescan:
		// METADATA is read afresh every round. A split interrupted
		// before its commit point shows only as tablets a server reports
		// and METADATA lacks: the range's saved states tell.
		// In the background, one at a time per range: a repair of
		// METADATA's own splits while the server holding those rows is
		// dead waits for it (2–3 s a try), and the rounds detecting that
		// death must not.
		key := rescanKey(a)
		if r, ok := t.c.opts.Metadata.(SplitRepairer); ok && a.Reason == "split" && !t.rescanning[key] {
			t.rescanning[key] = true
			t.background.Go(func() {
				rctx, cancel := t.rpcCtx(ctx)
				defer cancel()
				if err := r.RepairSplits(rctx, a.Table, a.Start, a.End); err != nil {
					t.c.opts.Logger.Warn("master: repairing splits", "table", a.Table, "err", err)
				}
				select {
				case t.rescanned <- key:
				case <-ctx.Done():
				}
			})
		}
	}
	return call{}
}

// rescanKey names the range a Rescan repairs (term.rescanning).
func rescanKey(a assign.Action) string {
	return a.Table + "\x00" + a.Start + "\x00" + a.End
}

// failuresSoFar is how many calls of a's request, to the same server,
// failed in a row before: a resend carries on the backoff (noteFailed).
func (t *term) failuresSoFar(a assign.Action) int {
	kind, _ := requestKind(a.Kind)
	if prev := t.inflight[a.Tablet]; prev != nil && prev.Kind == kind && prev.Server == a.Server {
		return prev.failures
	}
	return 0
}

// load asks server to load tb and, once it has, records the new location
// in METADATA under a fresh epoch.
func (t *term) load(ctx context.Context, tb assign.Tablet, server assign.ServerID, rec RecoverySource, answered *atomic.Bool) error {
	rctx, cancel := t.rpcCtx(ctx)
	err := t.c.opts.Servers.Load(rctx, string(server), tb, rec)
	cancel()
	answered.Store(true)
	if err != nil {
		// The outcome is unknown (the server may be loading): the record
		// stays and the planner resends to the same server after a
		// backoff (noteFailed).
		return fmt.Errorf("load %s on %s: %w", tb.ID, server, err)
	}
	if t.lost() {
		return errLost
	}
	epoch, err := t.ep.take(ctx)
	if err != nil {
		return err
	}
	rctx, cancel = t.metadataWriteCtx(ctx)
	defer cancel()
	if err := t.c.opts.Metadata.SetLocation(rctx, string(tb.ID), string(server), epoch); err != nil {
		// The tablet is served; the planner records its location in a
		// later round (assign.Record).
		return fmt.Errorf("set location of %s: %w", tb.ID, err)
	}
	return nil
}

// metadataWriteCtx bounds a location write to METADATA by a Tick (at
// least a second), not RPCTimeout: the round waits for its loads, and a
// write to a METADATA tablet whose server just died — retried by the
// client until its deadline — held up the rounds that detect that death
// for the whole RPCTimeout (a recovery-time trial: 10.9 s of detection
// instead of 1.5). A write that times out is made again by a later
// round's Record once the tablet is served.
func (t *term) metadataWriteCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(t.c.opts.RPCTimeout, max(t.c.opts.Tick, time.Second)))
}

// record writes server, which reports serving tb, as tb's location in
// METADATA with a fresh epoch: the second half of a load whose first half
// (the server loading it) succeeded (assign.Record).
func (t *term) record(ctx context.Context, tb assign.Tablet, server assign.ServerID) error {
	if t.lost() {
		return errLost
	}
	epoch, err := t.ep.take(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := t.metadataWriteCtx(ctx)
	defer cancel()
	if err := t.c.opts.Metadata.SetLocation(rctx, string(tb.ID), string(server), epoch); err != nil {
		return fmt.Errorf("record location of %s at %s: %w", tb.ID, server, err)
	}
	t.c.opts.Logger.Info("master: recorded the location of a served tablet METADATA did not name", "tablet", tb.ID, "server", server, "was", tb.LastServer)
	return nil
}

// startSort starts sorting dead's log on the active live servers, unless
// a sort is under way or done. Without a server to sort on, the log is
// recovered from unsorted.
func (t *term) startSort(ctx context.Context, st assign.State, dead assign.ServerID) {
	if t.dead[dead] != assign.LogUnsorted {
		return
	}
	var sorters []string
	for _, s := range st.Live {
		if !s.Draining && !t.released[s.ID] && t.unreachable[s.ID] == nil {
			sorters = append(sorters, string(s.ID))
		}
	}
	if len(sorters) == 0 {
		t.dead[dead] = assign.LogSortFailed
		return
	}
	t.dead[dead] = assign.LogSorting
	t.sortStarted[dead] = t.c.opts.Clock.Now()
	t.c.opts.Logger.Info("master: sorting log", "server", dead, "sorters", len(sorters))
	go func() {
		sctx, cancel := context.WithTimeout(ctx, t.c.opts.SortTimeout)
		defer cancel()
		err := t.c.opts.Servers.SortLog(sctx, string(dead), sorters)
		select {
		case t.sorted <- sortOutcome{dead: dead, err: err}:
		case <-ctx.Done():
		}
	}()
}

// sortDone records the outcome of a sort: the dead server's tablets are
// then loaded from the sorted log, or from the unsorted one if it failed.
func (t *term) sortDone(r sortOutcome) {
	if t.dead[r.dead] != assign.LogSorting {
		return // its tablets were recovered meanwhile, or it is forgotten
	}
	if r.err != nil {
		t.c.opts.Logger.Warn("master: sorting log failed; recovering from the unsorted log", "server", r.dead, "err", r.err)
		t.dead[r.dead] = assign.LogSortFailed
		return
	}
	t.c.opts.Logger.Info("master: log sorted", "server", r.dead)
	t.dead[r.dead] = assign.LogSorted
}
