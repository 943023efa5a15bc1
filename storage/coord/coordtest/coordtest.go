// Package coordtest is the conformance suite of coord.Service: every
// implementation (in-process, Consul) must pass Run, so code written against
// one behaves the same on the other.
//
// Time: a service whose value also has an Advance(time.Duration) method
// (coord.Local wrapped with its coord.FakeClock) has its clock advanced and
// the suite never sleeps; any other service runs on real time, and the
// suite waits as long as the semantics demand (sessions use a 10s TTL,
// Consul's minimum, and a 3s lock-delay), with the slow cases in parallel.
package coordtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

// Session settings of the suite. TTL is Consul's minimum.
const (
	TTL       = 10 * time.Second
	LockDelay = 3 * time.Second
)

// Advancer is implemented by services whose clock the test controls.
type Advancer interface {
	Advance(d time.Duration)
}

// Run runs the suite; newService returns a fresh, empty service (a service
// sharing a backend with others must use its own key prefix) and arranges
// for it to be closed when the test ends. Subtests run in parallel.
func Run(t *testing.T, newService func(t *testing.T) coord.Service) {
	cases := []struct {
		name string
		f    func(*env)
	}{
		{"KV", testKV},
		{"CAS", testCAS},
		{"List", testList},
		{"LockExclusive", testLockExclusive},
		{"LockBlocking", testLockBlocking},
		{"LockExisting", testLockExisting},
		{"LockDelayAfterDestroy", testLockDelay},
		{"EndSession", testEndSession},
		{"HolderLease", testHolderLease},
		{"LockLostOnDelete", testLockLostOnDelete},
		{"SessionExpiry", testSessionExpiry},
		{"SessionRenewedSurvivesTTL", testSessionRenewed},
		{"WatchPrefixInOrder", testWatchPrefix},
		{"WatchBurst", testWatchBurst},
		{"WatchKey", testWatchKey},
		{"Close", testClose},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			e := &env{t: t, svc: svc}
			e.fake, _ = svc.(Advancer)
			c.f(e)
		})
	}
}

type env struct {
	t    *testing.T
	svc  coord.Service
	fake Advancer
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// pass lets d of the service's time go by.
func (e *env) pass(d time.Duration) {
	if e.fake != nil {
		e.fake.Advance(d)
		return
	}
	time.Sleep(d)
}

// closedWithin reports whether ch is closed within d of service time.
func (e *env) closedWithin(ch <-chan struct{}, d time.Duration) bool {
	if e.fake == nil {
		select {
		case <-ch:
			return true
		case <-time.After(d):
			return false
		}
	}
	const steps = 20
	for i := 0; i <= steps; i++ {
		select {
		case <-ch:
			return true
		case <-time.After(5 * time.Millisecond):
		}
		if i < steps {
			e.fake.Advance(d / steps)
		}
	}
	select {
	case <-ch:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// invalidWithin reports whether s.Valid() turns false within d of
// service time from since (a real-clock instant; with a fake clock, d is
// counted from the call).
func (e *env) invalidWithin(s coord.Session, since time.Time, d time.Duration) bool {
	if e.fake != nil {
		const steps = 20
		for i := 0; i <= steps; i++ {
			if !s.Valid() {
				return true
			}
			if i < steps {
				e.fake.Advance(d / steps)
			}
		}
		return !s.Valid()
	}
	deadline := since.Add(d)
	for {
		if !s.Valid() {
			return true
		}
		if time.Now().After(deadline) {
			return !s.Valid()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (e *env) session(opts coord.SessionOptions) coord.Session {
	e.t.Helper()
	if opts.TTL == 0 {
		opts.TTL = TTL
	}
	if opts.LockDelay == 0 {
		opts.LockDelay = LockDelay
	}
	s, err := e.svc.NewSession(e.ctx(), opts)
	if err != nil {
		e.t.Fatalf("NewSession: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Destroy(ctx) // best effort: the session may be gone already
	})
	return s
}

func (e *env) get(key string) coord.Entry {
	e.t.Helper()
	ent, err := e.svc.Get(e.ctx(), key)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", key, err)
	}
	return ent
}

func (e *env) put(key, value string) {
	e.t.Helper()
	if err := e.svc.Put(e.ctx(), key, []byte(value)); err != nil {
		e.t.Fatalf("Put(%q): %v", key, err)
	}
}

func (e *env) lock(s coord.Session, key, value string) coord.Lock {
	e.t.Helper()
	l, err := s.TryLock(e.ctx(), key, []byte(value))
	if err != nil {
		e.t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func testKV(e *env) {
	t := e.t
	_, err := e.svc.Get(e.ctx(), "k")
	wantErr(t, "Get of absent key", err, coord.ErrNotFound)
	e.put("k", "v1")
	ent := e.get("k")
	if ent.Key != "k" || string(ent.Value) != "v1" || ent.ModifyIndex == 0 || ent.CreateIndex == 0 || ent.Session != "" {
		t.Fatalf("Get after Put = %+v, want key k, value v1, indexes set, no session", ent)
	}
	e.put("k", "v2")
	ent2 := e.get("k")
	if string(ent2.Value) != "v2" || ent2.ModifyIndex <= ent.ModifyIndex || ent2.CreateIndex != ent.CreateIndex {
		t.Fatalf("Get after second Put = %+v (first %+v): want v2, larger ModifyIndex, same CreateIndex", ent2, ent)
	}
	if err := e.svc.Delete(e.ctx(), "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = e.svc.Get(e.ctx(), "k")
	wantErr(t, "Get after Delete", err, coord.ErrNotFound)
	if err := e.svc.Delete(e.ctx(), "k"); err != nil {
		t.Fatalf("Delete of absent key: %v, want nil", err)
	}
	// Values are bytes, not strings: empty and binary values survive.
	bin := []byte{0, 1, 0xff, '/'}
	if err := e.svc.Put(e.ctx(), "bin", bin); err != nil {
		t.Fatal(err)
	}
	if got := e.get("bin").Value; string(got) != string(bin) {
		t.Fatalf("binary value = %x, want %x", got, bin)
	}
}

func testCAS(e *env) {
	t := e.t
	ctx := e.ctx()
	if err := e.svc.CAS(ctx, "c", []byte("a"), 0); err != nil {
		t.Fatalf("CAS create-only of absent key: %v", err)
	}
	wantErr(t, "CAS create-only of existing key", e.svc.CAS(ctx, "c", []byte("b"), 0), coord.ErrConflict)
	first := e.get("c")
	if err := e.svc.CAS(ctx, "c", []byte("b"), first.ModifyIndex); err != nil {
		t.Fatalf("CAS at current index: %v", err)
	}
	// A second writer holding the old index loses.
	wantErr(t, "CAS at stale index", e.svc.CAS(ctx, "c", []byte("x"), first.ModifyIndex), coord.ErrConflict)
	if got := e.get("c"); string(got.Value) != "b" {
		t.Fatalf("value after conflicting CAS = %q, want b", got.Value)
	}
	wantErr(t, "CAS at index of absent key", e.svc.CAS(ctx, "absent", []byte("x"), first.ModifyIndex), coord.ErrConflict)
	wantErr(t, "DeleteCAS at stale index", e.svc.DeleteCAS(ctx, "c", first.ModifyIndex), coord.ErrConflict)
	wantErr(t, "DeleteCAS at index 0", e.svc.DeleteCAS(ctx, "c", 0), coord.ErrConflict)
	cur := e.get("c")
	if err := e.svc.DeleteCAS(ctx, "c", cur.ModifyIndex); err != nil {
		t.Fatalf("DeleteCAS at current index: %v", err)
	}
	wantErr(t, "DeleteCAS of absent key", e.svc.DeleteCAS(ctx, "c", cur.ModifyIndex), coord.ErrNotFound)

	// Concurrent increments by CAS: every increment lands exactly once.
	e.put("n", "0")
	const workers, each = 4, 5
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				ent, err := e.svc.Get(ctx, "n")
				if err != nil {
					errc <- err
					return
				}
				var n int
				fmt.Sscan(string(ent.Value), &n)
				err = e.svc.CAS(ctx, "n", []byte(fmt.Sprint(n+1)), ent.ModifyIndex)
				if errors.Is(err, coord.ErrConflict) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				done++
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("CAS increment: %v", err)
	}
	if got := string(e.get("n").Value); got != fmt.Sprint(workers*each) {
		t.Fatalf("counter after %d CAS increments = %s", workers*each, got)
	}
}

func keys(ents []coord.Entry) []string {
	var ks []string
	for _, ent := range ents {
		ks = append(ks, ent.Key)
	}
	return ks
}

func testList(e *env) {
	t := e.t
	for _, k := range []string{"servers/b", "servers/a", "servers/c/x", "serversx", "root", "schema/t"} {
		e.put(k, "v-"+k)
	}
	got, err := e.svc.List(e.ctx(), coord.PrefixServers)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"servers/a", "servers/b", "servers/c/x"}
	if !slices.Equal(keys(got), want) {
		t.Fatalf("List(servers/) keys = %q, want %q (sorted, prefix only)", keys(got), want)
	}
	for _, ent := range got {
		if string(ent.Value) != "v-"+ent.Key {
			t.Fatalf("List entry %q value = %q", ent.Key, ent.Value)
		}
	}
	got, err = e.svc.List(e.ctx(), "nothing/")
	if err != nil || len(got) != 0 {
		t.Fatalf("List of empty prefix = %v, %v; want none, nil", keys(got), err)
	}
	all, err := e.svc.List(e.ctx(), "")
	if err != nil || len(all) != 6 {
		t.Fatalf("List(\"\") = %q, %v; want all 6 keys of this service", keys(all), err)
	}
}

func testLockExclusive(e *env) {
	t := e.t
	ctx := e.ctx()
	s1 := e.session(coord.SessionOptions{Name: "s1"})
	s2 := e.session(coord.SessionOptions{Name: "s2"})
	if s1.ID() == s2.ID() || s1.ID() == "" {
		t.Fatalf("session IDs %q and %q: want distinct, non-empty", s1.ID(), s2.ID())
	}
	key := coord.ServerKey("ts1")
	l1 := e.lock(s1, key, "host1:1")
	if ent := e.get(key); ent.Session != s1.ID() || string(ent.Value) != "host1:1" {
		t.Fatalf("locked entry = %+v, want session %s, value host1:1", ent, s1.ID())
	}
	_, err := s2.TryLock(ctx, key, []byte("host2:2"))
	wantErr(t, "TryLock of a key held by another session", err, coord.ErrLocked)
	if ent := e.get(key); ent.Session != s1.ID() || string(ent.Value) != "host1:1" {
		t.Fatalf("entry after a failed TryLock = %+v: the loser must change nothing", ent)
	}
	// Re-locking by the holder succeeds and updates the value.
	if _, err := s1.TryLock(ctx, key, []byte("host1:9")); err != nil {
		t.Fatalf("TryLock by the holder: %v", err)
	}
	if isClosed(l1.Lost()) {
		t.Fatal("lock lost after its holder locked it again")
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.closedWithin(l1.Lost(), 5*time.Second) {
		t.Fatal("Lost not closed after Release")
	}
	ent := e.get(key)
	if ent.Session != "" || string(ent.Value) != "host1:9" {
		t.Fatalf("entry after Release = %+v: want the key and value kept, no session", ent)
	}
	// Release has no lock-delay.
	l2 := e.lock(s2, key, "host2:2")
	_, err = s1.TryLock(ctx, key, nil)
	wantErr(t, "TryLock by the former holder", err, coord.ErrLocked)
	if !s1.Valid() || !s2.Valid() {
		t.Fatal("sessions invalid after lock traffic")
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("second Release: %v, want nil", err)
	}
}

func testLockBlocking(e *env) {
	t := e.t
	ctx := e.ctx()
	s1 := e.session(coord.SessionOptions{Name: "holder"})
	s2 := e.session(coord.SessionOptions{Name: "waiter"})
	l1 := e.lock(s1, coord.KeyMaster, "m1")

	// A waiter with a deadline gives up.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s2.Lock(short, coord.KeyMaster, []byte("m2"))
	cancel()
	wantErr(t, "Lock with a deadline while held", err, context.DeadlineExceeded)

	type result struct {
		l   coord.Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := s2.Lock(ctx, coord.KeyMaster, []byte("m2"))
		res <- result{l, err}
	}()
	select {
	case r := <-res:
		t.Fatalf("Lock returned (%v) while another session held the key", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("Lock did not return after the holder released")
	}
	if r.err != nil {
		t.Fatalf("Lock after release: %v", r.err)
	}
	if ent := e.get(coord.KeyMaster); ent.Session != s2.ID() || string(ent.Value) != "m2" {
		t.Fatalf("entry = %+v, want held by the waiter with its value", ent)
	}
	if isClosed(r.l.Lost()) {
		t.Fatal("fresh lock reported lost")
	}
}

func testLockExisting(e *env) {
	t := e.t
	ctx := e.ctx()
	s1 := e.session(coord.SessionOptions{Name: "server"})
	s2 := e.session(coord.SessionOptions{Name: "master"})
	key := coord.ServerKey("ts-existing")
	_, err := s1.TryLockExisting(ctx, key, []byte("a:1"))
	wantErr(t, "TryLockExisting of an absent key", err, coord.ErrNotFound)
	if _, err := e.svc.Get(ctx, key); !errors.Is(err, coord.ErrNotFound) {
		t.Fatalf("TryLockExisting created the key: Get = %v", err)
	}
	e.put(key, "a:0")
	l1, err := s1.TryLockExisting(ctx, key, []byte("a:1"))
	if err != nil {
		t.Fatalf("TryLockExisting of an existing unlocked key: %v", err)
	}
	if ent := e.get(key); ent.Session != s1.ID() || string(ent.Value) != "a:1" {
		t.Fatalf("entry = %+v, want held by %s with value a:1", ent, s1.ID())
	}
	_, err = s2.TryLockExisting(ctx, key, []byte("m"))
	wantErr(t, "TryLockExisting of a held key", err, coord.ErrLocked)
	if _, err := s1.TryLockExisting(ctx, key, []byte("a:2")); err != nil {
		t.Fatalf("TryLockExisting by the holder: %v", err)
	}
	// The server's session dies; the master finds the key in lock-delay,
	// then takes it, then deletes it; the server's new session cannot
	// bring the key back.
	if err := s1.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.closedWithin(l1.Lost(), 5*time.Second) {
		t.Fatal("lock not lost after Destroy")
	}
	_, err = s2.TryLockExisting(ctx, key, []byte("m"))
	wantErr(t, "TryLockExisting in lock-delay", err, coord.ErrLocked)
	e.pass(LockDelay + LockDelay/3)
	l2, err := s2.TryLockExisting(ctx, key, []byte("m"))
	if err != nil {
		t.Fatalf("TryLockExisting after lock-delay: %v", err)
	}
	cur := e.get(key)
	if err := e.svc.DeleteCAS(ctx, key, cur.ModifyIndex); err != nil {
		t.Fatal(err)
	}
	if !e.closedWithin(l2.Lost(), 10*time.Second) {
		t.Fatal("master's lock not lost after it deleted the key")
	}
	s3 := e.session(coord.SessionOptions{Name: "server again"})
	_, err = s3.TryLockExisting(ctx, key, []byte("a:3"))
	wantErr(t, "TryLockExisting of a deleted server key", err, coord.ErrNotFound)
}

func testLockDelay(e *env) {
	t := e.t
	ctx := e.ctx()
	s1 := e.session(coord.SessionOptions{Name: "dying"})
	s2 := e.session(coord.SessionOptions{Name: "successor"})
	key := coord.ServerKey("ts-delay")
	l1 := e.lock(s1, key, "old:1")
	watch, err := e.svc.WatchKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ev := NextEvent(t, watch); ev.Kind != coord.EventPut || ev.Entry.Session != s1.ID() {
		t.Fatalf("initial watch event = %+v, want put held by %s", ev, s1.ID())
	}

	if err := s1.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s1.Done()) || !isClosed(s1.Lapsed()) || s1.Valid() || s1.Err() == nil {
		t.Fatalf("after Destroy: done %v lapsed %v valid %v err %v; want done, lapsed, invalid, an error",
			isClosed(s1.Done()), isClosed(s1.Lapsed()), s1.Valid(), s1.Err())
	}
	if !e.closedWithin(l1.Lost(), 5*time.Second) {
		t.Fatal("lock not lost after its session was destroyed")
	}
	// Release behaviour: the key and its value stay, unlocked; a watcher
	// sees the change (this is how the master learns a server may be dead).
	ent := e.get(key)
	if ent.Session != "" || string(ent.Value) != "old:1" {
		t.Fatalf("entry after Destroy = %+v, want value kept and no session", ent)
	}
	if ev := NextEvent(t, watch); ev.Kind != coord.EventPut || ev.Entry.Session != "" {
		t.Fatalf("watch event after Destroy = %+v, want put with no session", ev)
	}
	_, err = s2.TryLock(ctx, key, []byte("master"))
	wantErr(t, "TryLock during lock-delay", err, coord.ErrLocked)
	_, err = s1.TryLock(ctx, "other", nil)
	if err == nil {
		t.Fatal("TryLock by a destroyed session succeeded")
	}

	type result struct {
		l   coord.Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := s2.Lock(ctx, key, []byte("master"))
		res <- result{l, err}
	}()
	if e.fake != nil {
		select {
		case r := <-res:
			t.Fatalf("Lock returned (%v) before the lock-delay passed", r.err)
		case <-time.After(50 * time.Millisecond):
		}
		e.pass(LockDelay)
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("Lock after lock-delay: %v", r.err)
		}
	case <-time.After(LockDelay + 15*time.Second):
		t.Fatal("Lock did not succeed after the lock-delay")
	}
	if ent := e.get(key); ent.Session != s2.ID() || string(ent.Value) != "master" {
		t.Fatalf("entry = %+v, want held by the successor", ent)
	}
	if err := s1.Destroy(ctx); err != nil {
		t.Fatalf("second Destroy: %v, want nil", err)
	}
}

// testHolderLease: a session with SessionOptions.Lease shorter than its
// TTL is valid only until Lease after its last renewal — again after a
// later renewal, lapsing only a TTL after the last — and EndSession
// reports that lease, not the TTL, as what the holder may still believe.
func testHolderLease(e *env) {
	t := e.t
	ctx := e.ctx()
	const lease = 2 * time.Second
	s := e.session(coord.SessionOptions{Name: "short lease", Lease: lease, ManualRenew: true})
	e.pass(lease / 2)
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	e.pass(lease * 3 / 4)
	if !s.Valid() {
		t.Fatal("session with a holder's lease not valid 3/4 of the lease after a renewal")
	}
	// No renewal for a lease: not valid, but not lapsed either.
	e.pass(lease/4 + lease/10)
	if s.Valid() {
		t.Fatalf("valid more than a holder's lease (%v) after the last renewal", lease)
	}
	if isClosed(s.Lapsed()) {
		t.Fatal("lapsed a holder's lease after the last renewal, before the TTL")
	}
	// A renewal that succeeds makes it valid again.
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("Renew after the holder's lease ran out, within the TTL: %v", err)
	}
	if !s.Valid() {
		t.Fatal("not valid after a successful renewal")
	}
	// No more renewals: it lapses within a TTL.
	if !e.closedWithin(s.Lapsed(), TTL+TTL/2) {
		t.Fatal("Lapsed not closed a TTL after the last renewal")
	}
	if s.Valid() {
		t.Fatal("Valid after Lapsed")
	}

	holder := e.session(coord.SessionOptions{Name: "unreachable", Lease: lease})
	l := e.lock(holder, coord.ServerKey("ts-short"), "ts:2")
	ending := time.Now()
	got, err := e.svc.EndSession(ctx, holder.ID())
	if err != nil {
		t.Fatalf("EndSession: %v", err)
	}
	if got != lease {
		t.Fatalf("EndSession returned %v, want the holder's lease %v", got, lease)
	}
	// The holder may learn of the lost lock before its lease runs out
	// (Consul's watch is quick): what the master relies on is that it is
	// no longer valid once FenceWait has passed since EndSession.
	if !e.closedWithin(l.Lost(), coord.FenceWait(lease)) {
		t.Fatalf("holder after EndSession: lock not lost within %v", coord.FenceWait(lease))
	}
	if !e.invalidWithin(holder, ending, coord.FenceWait(lease)) {
		t.Fatalf("holder still valid %v after EndSession began", coord.FenceWait(lease))
	}
	// A lease not shorter than the TTL is the TTL.
	long := e.session(coord.SessionOptions{Name: "long lease", Lease: 3 * TTL})
	if got, err = e.svc.EndSession(ctx, long.ID()); err != nil || got != TTL {
		t.Fatalf("EndSession of a session whose Lease exceeds its TTL = %v, %v; want the TTL %v", got, err, TTL)
	}
}

// testEndSession: ending another holder's session releases its locks into
// lock-delay, reports the session's TTL, and tells the holder.
func testEndSession(e *env) {
	t := e.t
	ctx := e.ctx()
	holder := e.session(coord.SessionOptions{Name: "unreachable", TTL: 2 * TTL})
	master := e.session(coord.SessionOptions{Name: "master"})
	key := coord.ServerKey("ts-ended")
	l := e.lock(holder, key, "ts:1")

	ttl, err := e.svc.EndSession(ctx, holder.ID())
	if err != nil {
		t.Fatalf("EndSession: %v", err)
	}
	if ttl != 2*TTL {
		t.Fatalf("EndSession returned TTL %v, want the holder's %v", ttl, 2*TTL)
	}
	if ent := e.get(key); ent.Session != "" || string(ent.Value) != "ts:1" {
		t.Fatalf("entry after EndSession = %+v, want value kept and no session", ent)
	}
	_, err = master.TryLockExisting(ctx, key, []byte("master"))
	wantErr(t, "TryLockExisting during lock-delay", err, coord.ErrLocked)
	if !e.closedWithin(l.Lost(), 5*time.Second) {
		t.Fatal("the holder's lock was not lost after its session was ended")
	}
	if !e.closedWithin(holder.Done(), TTL) || holder.Valid() {
		t.Fatalf("holder after EndSession: done %v valid %v; want done and invalid", isClosed(holder.Done()), holder.Valid())
	}
	_, err = e.svc.EndSession(ctx, holder.ID())
	wantErr(t, "second EndSession", err, coord.ErrSessionGone)
	e.pass(LockDelay)
	deadline := time.Now().Add(LockDelay + 15*time.Second)
	for {
		_, err = master.TryLockExisting(ctx, key, []byte("master"))
		if err == nil || !errors.Is(err, coord.ErrLocked) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryLockExisting after the lock-delay: %v", err)
	}
}

func testLockLostOnDelete(e *env) {
	t := e.t
	ctx := e.ctx()
	s := e.session(coord.SessionOptions{Name: "server"})
	key := coord.ServerKey("ts-del")
	l := e.lock(s, key, "a:1")
	// Someone else writing the value does not take the lock away.
	e.put(key, "rewritten")
	if ent := e.get(key); ent.Session != s.ID() {
		t.Fatalf("entry after a plain Put = %+v, want still held by %s", ent, s.ID())
	}
	if isClosed(l.Lost()) {
		t.Fatal("lock lost after a plain Put")
	}
	// The master's death declaration: delete the key.
	if err := e.svc.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if !e.closedWithin(l.Lost(), 10*time.Second) {
		t.Fatal("lock not reported lost after its key was deleted")
	}
	// The session itself is fine: losing one key is not losing the lease.
	if !s.Valid() || isClosed(s.Lapsed()) {
		t.Fatal("session invalid after its lock key was deleted")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of a lost lock: %v, want nil", err)
	}
	if _, err := e.svc.Get(ctx, key); !errors.Is(err, coord.ErrNotFound) {
		t.Fatalf("Release of a lost lock recreated the key: Get = %v", err)
	}
}

func testSessionExpiry(e *env) {
	t := e.t
	ctx := e.ctx()
	s := e.session(coord.SessionOptions{Name: "stops-renewing", ManualRenew: true})
	if s.TTL() != TTL || s.LockDelay() != LockDelay {
		t.Fatalf("session TTL %v, lock-delay %v; want %v, %v", s.TTL(), s.LockDelay(), TTL, LockDelay)
	}
	key := coord.ServerKey("ts-exp")
	l := e.lock(s, key, "x:1")
	// A manual renewal halfway keeps the session past its first TTL.
	e.pass(TTL / 2)
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	e.pass(TTL * 6 / 10)
	if !s.Valid() || isClosed(s.Lapsed()) {
		t.Fatal("session lapsed less than a TTL after a renewal")
	}
	// No more renewals: the lease lapses within a TTL of the last one.
	if !e.closedWithin(s.Lapsed(), TTL) {
		t.Fatal("Lapsed not closed a full TTL after the last renewal")
	}
	if s.Valid() {
		t.Fatal("Valid after Lapsed")
	}
	if !e.closedWithin(l.Lost(), time.Second) {
		t.Fatal("lock not lost when its session lapsed")
	}
	if err := s.Renew(ctx); err == nil {
		t.Fatal("Renew after a lapse succeeded")
	}
	// The service ends the session (Consul waits up to twice the TTL).
	if !e.closedWithin(s.Done(), 2*TTL+5*time.Second) {
		t.Fatal("session not reported gone after it lapsed")
	}
	if s.Err() == nil {
		t.Fatal("Err nil after the session ended")
	}
	ent := e.get(key)
	if ent.Session != "" || string(ent.Value) != "x:1" {
		t.Fatalf("entry after expiry = %+v, want value kept, no session", ent)
	}
	s2 := e.session(coord.SessionOptions{Name: "master"})
	var l2 coord.Lock
	for deadline := time.Now().Add(LockDelay + 10*time.Second); ; {
		var err error
		l2, err = s2.TryLock(ctx, key, []byte("master"))
		if err == nil {
			break
		}
		if !errors.Is(err, coord.ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("TryLock after expiry and lock-delay: %v", err)
		}
		e.pass(LockDelay / 6)
	}
	if isClosed(l2.Lost()) {
		t.Fatal("successor's lock reported lost")
	}
}

func testSessionRenewed(e *env) {
	t := e.t
	s := e.session(coord.SessionOptions{Name: "renewed"})
	l := e.lock(s, coord.KeyMaster, "m")
	e.pass(TTL + TTL/5)
	if !s.Valid() || isClosed(s.Lapsed()) || isClosed(s.Done()) || s.Err() != nil {
		t.Fatalf("background-renewed session after more than a TTL: valid %v, err %v", s.Valid(), s.Err())
	}
	if isClosed(l.Lost()) {
		t.Fatal("lock of a renewed session lost")
	}
	if ent := e.get(coord.KeyMaster); ent.Session != s.ID() {
		t.Fatalf("entry = %+v, want still held", ent)
	}
}

// NextEvent returns the next event of a watch, failing t if none arrives
// within 15s or the channel closes.
func NextEvent(t *testing.T, ch <-chan coord.Event) coord.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed early")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15s")
	}
	panic("unreachable")
}

func describe(ev coord.Event) string {
	if ev.Kind == coord.EventDelete {
		return "delete " + ev.Entry.Key
	}
	lock := ""
	if ev.Entry.Session != "" {
		lock = " locked"
	}
	return fmt.Sprintf("put %s=%s%s", ev.Entry.Key, ev.Entry.Value, lock)
}

func testWatchPrefix(e *env) {
	t := e.t
	ctx, cancel := context.WithCancel(e.ctx())
	e.put("servers/a", "1")
	e.put("serversx", "outside")
	ch, err := e.svc.Watch(ctx, coord.PrefixServers)
	if err != nil {
		t.Fatal(err)
	}
	s := e.session(coord.SessionOptions{Name: "w"})
	var l coord.Lock
	// Each step changes the service, then must produce exactly these
	// events; waiting for them before the next step rules out coalescing.
	steps := []struct {
		do   func()
		want []string
	}{
		{func() {}, []string{"put servers/a=1"}},
		{func() { e.put("servers/b", "1") }, []string{"put servers/b=1"}},
		{func() { e.put("serversx", "still outside"); e.put("servers/b", "2") }, []string{"put servers/b=2"}},
		{func() {
			if err := e.svc.Delete(ctx, "servers/a"); err != nil {
				t.Fatal(err)
			}
		}, []string{"delete servers/a"}},
		{func() { l = e.lock(s, "servers/c", "addr") }, []string{"put servers/c=addr locked"}},
		{func() {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}, []string{"put servers/c=addr"}},
	}
	var lastIndex uint64
	for i, st := range steps {
		st.do()
		for _, want := range st.want {
			ev := NextEvent(t, ch)
			if got := describe(ev); got != want {
				t.Fatalf("step %d: event %q, want %q", i, got, want)
			}
			if ev.Kind == coord.EventPut {
				if ev.Entry.ModifyIndex <= lastIndex && i > 0 {
					t.Fatalf("step %d: ModifyIndex %d not after %d", i, ev.Entry.ModifyIndex, lastIndex)
				}
				lastIndex = ev.Entry.ModifyIndex
			}
		}
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected extra event %q", describe(ev))
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	for range ch {
		// Drain: events in flight may still arrive before the close.
	}
}

func testWatchBurst(e *env) {
	t := e.t
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	ch, err := e.svc.Watch(ctx, "b/")
	if err != nil {
		t.Fatal(err)
	}
	// Writes faster than a watcher may observe them: intermediate states
	// may be coalesced, but per key the values arrive in write order and
	// the last event of each key is its final state.
	const n = 20
	for i := range n {
		e.put(fmt.Sprintf("b/%d", i%4), fmt.Sprint(i))
	}
	if err := e.svc.Delete(ctx, "b/3"); err != nil {
		t.Fatal(err)
	}
	final := map[string]string{"b/0": "16", "b/1": "17", "b/2": "18"}
	state := map[string]string{}
	lastVal := map[string]int{}
	lastIdx := map[string]uint64{}
	deadline := time.After(20 * time.Second)
	for !mapsEqual(state, final) {
		select {
		case ev := <-ch:
			k := ev.Entry.Key
			if ev.Kind == coord.EventDelete {
				delete(state, k)
				continue
			}
			var v int
			fmt.Sscan(string(ev.Entry.Value), &v)
			if prev, ok := lastVal[k]; ok && v <= prev {
				t.Fatalf("key %s: value %d after %d: out of order", k, v, prev)
			}
			if ev.Entry.ModifyIndex <= lastIdx[k] {
				t.Fatalf("key %s: ModifyIndex %d after %d", k, ev.Entry.ModifyIndex, lastIdx[k])
			}
			lastVal[k], lastIdx[k] = v, ev.Entry.ModifyIndex
			state[k] = string(ev.Entry.Value)
		case <-deadline:
			t.Fatalf("watch state %v never reached the final state %v", state, final)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func testWatchKey(e *env) {
	t := e.t
	ctx, cancel := context.WithCancel(e.ctx())
	ch, err := e.svc.WatchKey(ctx, coord.KeyRoot)
	if err != nil {
		t.Fatal(err)
	}
	e.put("rootx", "not this key")
	e.put(coord.KeyRoot, "ts1:1")
	if got := describe(NextEvent(t, ch)); got != "put root=ts1:1" {
		t.Fatalf("first event %q, want put root=ts1:1 (nothing for an absent key, nothing for rootx)", got)
	}
	if err := e.svc.Delete(ctx, coord.KeyRoot); err != nil {
		t.Fatal(err)
	}
	if got := describe(NextEvent(t, ch)); got != "delete root" {
		t.Fatalf("event %q, want delete root", got)
	}
	cancel()
	closed := make(chan struct{})
	go func() {
		for range ch {
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel not closed after its context was cancelled")
	}
}

func testClose(e *env) {
	t := e.t
	ctx := e.ctx()
	s := e.session(coord.SessionOptions{Name: "closing"})
	ch, err := e.svc.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !e.closedWithin(s.Done(), 5*time.Second) || s.Valid() {
		t.Fatal("session still live after Close")
	}
	_, err = e.svc.Get(ctx, "k")
	wantErr(t, "Get after Close", err, coord.ErrClosed)
	_, err = e.svc.NewSession(ctx, coord.SessionOptions{})
	wantErr(t, "NewSession after Close", err, coord.ErrClosed)
	closed := make(chan struct{})
	go func() {
		for range ch {
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel not closed by Close")
	}
}
