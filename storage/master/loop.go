package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	c    *Control
	sess coord.Session
	lock coord.Lock
	ep   epochs

	// keys is the picture of servers/ from the watch, by key.
	keys map[string]coord.Entry
	// reports is the last List answer of each server.
	reports map[assign.ServerID][]assign.Served
	// dead holds the servers this master declared dead (it held their
	// locks and deleted their keys), until none of their tablets needs
	// recovering.
	dead map[assign.ServerID]assign.LogState
	// inflight holds one request per tablet, kept as the assign package
	// doc says.
	inflight map[assign.TabletID]*request
	// released holds, for the current round, the servers whose key is
	// released but not yet the master's: nothing is sent to them.
	released map[assign.ServerID]bool
}

type request struct {
	assign.InFlight
	sent time.Time
}

// lead runs the control loop while the lock holds. It returns errLost when
// the session lapses or the lock is lost, ctx's error, or ErrClosed.
func (c *Control) lead(ctx context.Context, sess coord.Session, lock coord.Lock) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
		c:        c,
		sess:     sess,
		lock:     lock,
		ep:       epochs{kv: c.opts.Coord, block: c.opts.EpochBlock},
		keys:     make(map[string]coord.Entry),
		reports:  make(map[assign.ServerID][]assign.Served),
		dead:     make(map[assign.ServerID]assign.LogState),
		inflight: make(map[assign.TabletID]*request),
	}
	err := t.run(ctx)
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
	return !t.sess.Valid()
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
	for _, e := range entries {
		t.keys[e.Key] = e
	}

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
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
		stop := t.c.opts.Clock.AfterFunc(t.c.opts.Tick, poke)
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
		case <-wake:
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
func (t *term) detectDeaths(ctx context.Context) error {
	keys := make([]string, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		e := t.keys[key]
		id, ok := coord.ServerID(key)
		if !ok || (e.Session != "" && e.Session != t.sess.ID()) {
			continue
		}
		if t.lost() {
			return errLost
		}
		if e.Session != t.sess.ID() {
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
		// The lock is ours: the server cannot serve any more.
		t.dead[assign.ServerID(id)] = assign.LogUnsorted
		if err := t.c.opts.Coord.Delete(ctx, key); err != nil {
			// Still dead (we hold its lock); the delete is retried next
			// round, the key being locked by our session.
			return fmt.Errorf("master: delete %s: %w", key, err)
		}
		delete(t.keys, key)
		t.c.opts.Logger.Info("master: server dead", "server", id)
	}
	return nil
}

// round gathers a State, plans, and carries the actions out. progressed
// says whether it sent requests.
func (t *term) round(ctx context.Context) (progressed bool, err error) {
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
	for _, a := range assign.Plan(st, t.c.opts.Plan) {
		if t.lost() {
			return progressed, errLost
		}
		again, err := t.execute(ctx, tablets, a)
		progressed = progressed || again
		if err != nil {
			t.c.opts.Logger.Warn("master: action", "action", a.String(), "err", err)
		}
	}
	return progressed, ctx.Err()
}

// observe builds the State: live servers and what they report, servers
// whose key is released but not yet ours (held as if serving), the dead,
// METADATA, requests in flight and splits reported.
func (t *term) observe(ctx context.Context) (assign.State, error) {
	var st assign.State
	t.released = make(map[assign.ServerID]bool)
	tablets, err := t.metadata(ctx)
	if err != nil {
		return st, err
	}
	st.Tablets = tablets
	present := make(map[assign.ServerID]bool)
	keys := make([]string, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		e := t.keys[key]
		sid, ok := coord.ServerID(key)
		if !ok {
			continue
		}
		id := assign.ServerID(sid)
		if _, isDead := t.dead[id]; isDead {
			continue
		}
		present[id] = true
		srv := assign.Server{ID: id, Addr: string(e.Value)}
		if e.Session == "" {
			t.released[id] = true
			// Released but not yet ours (lock-delay): the server may still
			// be serving until its lease runs out. Keep its tablets where
			// they are (its last report, and METADATA's location for any
			// it never reported) and give it nothing: Draining keeps new
			// tablets off it, and unloads to it are not sent.
			srv.Draining = true
			srv.Serving = slices.Clone(t.reports[id])
			for _, tb := range tablets {
				if tb.LastServer == id && !slices.ContainsFunc(srv.Serving, func(s assign.Served) bool { return s.ID == tb.ID }) {
					srv.Serving = append(srv.Serving, assign.Served{ID: tb.ID, Table: tb.Table, Start: tb.Start, End: tb.End})
				}
			}
			st.Live = append(st.Live, srv)
			continue
		}
		rctx, cancel := t.rpcCtx(ctx)
		served, err := t.c.opts.Servers.List(rctx, sid)
		cancel()
		if err != nil {
			prev, known := t.reports[id]
			if !known {
				// Without any report, its tablets would look unserved and
				// be assigned twice: skip this round.
				return st, fmt.Errorf("master: list %s: %w", sid, err)
			}
			// A stale report plus the requests in flight is still a safe
			// picture: nothing it served is given away.
			served = prev
		}
		t.reports[id] = served
		srv.Serving = served
		st.Live = append(st.Live, srv)
	}
	for id := range t.reports {
		if !present[id] {
			delete(t.reports, id)
		}
	}
	t.settle(st)
	for id, log := range t.dead {
		st.Dead = append(st.Dead, assign.DeadServer{ID: id, Log: log})
	}
	now := t.c.opts.Clock.Now()
	for _, r := range t.inflight {
		in := r.InFlight
		in.Age = now.Sub(r.sent)
		st.InFlight = append(st.InFlight, in)
	}
	t.c.mu.Lock()
	st.Splits = slices.Clone(t.c.splits)
	t.c.observed = st
	t.c.mu.Unlock()
	return st, nil
}

func (t *term) metadata(ctx context.Context) ([]assign.Tablet, error) {
	rctx, cancel := t.rpcCtx(ctx)
	defer cancel()
	tablets, err := t.c.opts.Metadata.Tablets(rctx)
	if err != nil {
		return nil, fmt.Errorf("master: read METADATA: %w", err)
	}
	return tablets, nil
}

// settle updates the bookkeeping from a fresh observation: loads the
// target reports are confirmed, records of tablets METADATA dropped go,
// dead servers with nothing left to recover are forgotten, and split
// reports METADATA now reflects are dropped.
func (t *term) settle(st assign.State) {
	byID := make(map[assign.TabletID]assign.Tablet, len(st.Tablets))
	for _, tb := range st.Tablets {
		byID[tb.ID] = tb
	}
	servedBy := make(map[assign.TabletID][]assign.ServerID)
	for _, s := range st.Live {
		for _, sv := range s.Serving {
			servedBy[sv.ID] = append(servedBy[sv.ID], s.ID)
		}
	}
	for id, r := range t.inflight {
		if _, ok := byID[id]; !ok {
			delete(t.inflight, id)
			continue
		}
		if r.Kind == assign.LoadRequest && slices.Contains(servedBy[id], r.Server) {
			delete(t.inflight, id) // confirmed
		}
	}
	for id := range t.dead {
		needed := false
		for _, tb := range st.Tablets {
			if tb.LastServer == id && len(servedBy[tb.ID]) == 0 {
				needed = true
				break
			}
		}
		if !needed {
			delete(t.dead, id)
		}
	}
	t.c.mu.Lock()
	t.c.splits = slices.DeleteFunc(t.c.splits, func(s assign.Split) bool {
		if _, parent := byID[s.Parent]; parent {
			return false
		}
		for _, ch := range s.Children {
			if _, ok := byID[ch]; !ok {
				return false
			}
		}
		return true
	})
	t.c.mu.Unlock()
}

// execute carries out one action. again says the state changed so that
// planning again at once may yield more (a request was sent).
func (t *term) execute(ctx context.Context, tablets map[assign.TabletID]assign.Tablet, a assign.Action) (again bool, err error) {
	now := t.c.opts.Clock.Now()
	switch a.Kind {
	case assign.Assign:
		tb, ok := tablets[a.Tablet]
		if !ok || t.released[a.Server] {
			// A resend to a server that may be dying waits: once the master
			// holds its lock the load is void and the tablet goes elsewhere.
			return false, nil
		}
		// Record before sending: from now on the planner must not place the
		// tablet elsewhere, whatever the call returns.
		t.inflight[a.Tablet] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: a.Tablet, Server: a.Server}, sent: now}
		rctx, cancel := t.rpcCtx(ctx)
		err := t.c.opts.Servers.Load(rctx, string(a.Server), tb, Recovery{From: string(a.RecoverFrom), Sorted: a.SortedLog})
		cancel()
		if err != nil {
			// The outcome is unknown (the server may be loading): the
			// record stays and the planner resends after the timeout.
			return true, fmt.Errorf("load %s on %s: %w", a.Tablet, a.Server, err)
		}
		if t.lost() {
			return true, errLost
		}
		epoch, err := t.ep.take(ctx)
		if err != nil {
			return true, err
		}
		rctx, cancel = t.rpcCtx(ctx)
		defer cancel()
		if err := t.c.opts.Metadata.SetLocation(rctx, string(a.Tablet), string(a.Server), epoch); err != nil {
			return true, fmt.Errorf("set location of %s: %w", a.Tablet, err)
		}
		return true, nil
	case assign.Unassign:
		if t.released[a.Server] {
			return false, nil // it may be dying: nothing is sent to it
		}
		t.inflight[a.Tablet] = &request{InFlight: assign.InFlight{Kind: assign.UnloadRequest, Tablet: a.Tablet, Server: a.Server, To: a.To}, sent: now}
		rctx, cancel := t.rpcCtx(ctx)
		defer cancel()
		if err := t.c.opts.Servers.Unload(rctx, string(a.Server), string(a.Tablet)); err != nil {
			return true, fmt.Errorf("unload %s from %s: %w", a.Tablet, a.Server, err)
		}
		return true, nil
	case assign.SortLog:
		// No log sorter yet: recover from the unsorted log rather than
		// hold the dead server's tablets back for a sort that never comes.
		if _, ok := t.dead[a.Server]; ok {
			t.dead[a.Server] = assign.LogSortFailed
		}
		return true, nil // plan again now: the tablets it held back can go
	case assign.Rescan:
		// METADATA is read afresh every round.
		return false, nil
	}
	return false, nil
}
