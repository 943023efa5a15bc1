package master

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

// Fast master takeover.
//
// A standby waits in coord's Lock on KeyMaster. Left to the lock service, a
// killed or stopped active master's lock comes free when Consul expires its
// session — up to twice the TTL (20 s for the minimum 10 s) — plus the
// lock-delay. Instead, every standby probes the active master (the address
// in the lock's value, LoopOptions.ProbeMaster) and, once the probe has
// failed for TakeoverAfter over at least three attempts, ends the active
// master's session itself (coord.Service.EndSession), the way the active
// master ends an unreachable tablet server's (term.fenceUnreachable).
//
// Split brain is prevented by fencing, not by the probe being right:
//
//   - An active master acts only while its own lease holds: besides the
//     session's validity (a TTL after the last renewal), a term keeps a
//     shorter lease of its own, LoopOptions.Lease, renewed by renewing the
//     session (coord.Session.Renew) every Lease/3 and measured from the
//     moment the last successful renewal was sent. term.lost is checked
//     before every request a master sends (loads, unloads, METADATA
//     writes, merges' commits), and the term is cancelled as soon as the
//     lease runs out.
//   - A session ended by a standby stays in its lock-delay for
//     LoopOptions.Session.LockDelay, which must exceed Lease (NewLoop
//     raises it to Lease plus a tenth): no successor holds the lock before
//     the old master's lease — as its own clock measures it — has run out.
//     A master paused by SIGSTOP and resumed finds its lease expired (its
//     renewals stopped with it) and steps down before sending anything; a
//     master cut off from the standbys but not from Consul learns of the
//     ended session at its next renewal, within Lease/3, and its lease ends
//     no later than Lease after the last renewal it sent, before the
//     lock-delay does.
//
// The probe also fails when the process at that address answers as a
// standby: a master that stood down when its lease ran out but could not
// destroy its session (Consul was out of its reach, not of the standby's),
// or a master killed and restarted on the same address, leaves the lock
// held by a session nobody acts on; left to Consul, the lock would stay
// taken up to twice the TTL.
//
// A standby that wrongly ends a healthy master's session (the probe failed
// for a reason of its own) costs a failover, never safety.

// defaultTakeoverAfter is LoopOptions.TakeoverAfter's default.
const defaultTakeoverAfter = 2 * time.Second

// masterLease is a term's own lease: it runs until Lease after the last
// successful renewal of the session was sent.
type masterLease struct {
	clock coord.Clock
	lease time.Duration

	mu    sync.Mutex
	until time.Time
}

func (l *masterLease) valid() bool {
	if l == nil || l.lease <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clock.Now().Before(l.until)
}

// keep renews sess every lease/3, moving the lease on after each success,
// and calls expired (once) when the lease runs out.
func (l *masterLease) keep(ctx context.Context, sess coord.Session, expired func()) {
	if l.lease <= 0 {
		return
	}
	every := l.lease / 3
	for {
		l.mu.Lock()
		left := l.until.Sub(l.clock.Now())
		l.mu.Unlock()
		if left <= 0 {
			expired()
			return
		}
		wait := min(every, left)
		ch := make(chan struct{})
		stop := l.clock.AfterFunc(wait, func() { close(ch) })
		select {
		case <-ctx.Done():
			stop()
			return
		case <-ch:
		}
		sent := l.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := sess.Renew(rctx)
		cancel()
		if err == nil {
			l.mu.Lock()
			if u := sent.Add(l.lease); u.After(l.until) {
				l.until = u
			}
			l.mu.Unlock()
		}
	}
}

// watchActive runs while this Loop campaigns: it probes the active master
// and ends its session once it has been unreachable for TakeoverAfter over
// at least three probes (see the comment at the top of this file).
func (c *Loop) watchActive(ctx context.Context, own string) {
	if c.opts.ProbeMaster == nil || c.opts.TakeoverAfter < 0 {
		return
	}
	log := c.opts.Logger
	every := min(c.opts.TakeoverAfter/4, c.opts.Tick)
	var failing struct {
		session string
		since   time.Time
		count   int
	}
	for {
		ch := make(chan struct{})
		stop := c.opts.Clock.AfterFunc(every, func() { close(ch) })
		select {
		case <-ctx.Done():
			stop()
			return
		case <-ch:
		}
		e, err := c.opts.Coord.Get(ctx, coord.KeyMaster)
		if err != nil || e.Session == "" || e.Session == own {
			failing.session = ""
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err = c.opts.ProbeMaster(pctx, string(e.Value))
		cancel()
		if err == nil {
			failing.session = ""
			continue
		}
		now := c.opts.Clock.Now()
		if failing.session != e.Session {
			failing.session, failing.since, failing.count = e.Session, now, 0
		}
		failing.count++
		if failing.count < 3 || now.Sub(failing.since) < c.opts.TakeoverAfter {
			continue
		}
		if _, err := c.opts.Coord.EndSession(ctx, e.Session); err != nil && !errors.Is(err, coord.ErrSessionGone) {
			log.Warn("master: ending the unresponsive active master's session", "active", string(e.Value), "err", err)
			continue
		}
		log.Info("master: active master unresponsive or standing by, its session ended", "active", string(e.Value),
			"failing_for", now.Sub(failing.since).String(), "probes", failing.count, "last_err", err)
		failing.session = ""
	}
}
