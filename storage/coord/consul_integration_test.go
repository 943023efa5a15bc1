//go:build integration

package coord_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/cutproxy"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/coord/coordtest"
)

// consulAddr is the agent deploy/test.sh started.
func consulAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TABULA_TEST_CONSUL_ADDR")
	if addr == "" {
		t.Fatal("TABULA_TEST_CONSUL_ADDR is not set: run the integration tests through deploy/test.sh, which starts Consul")
	}
	return addr
}

var testRun = func() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

var prefixSeq atomic.Int64

// newConsul returns a service on its own key prefix, so parallel tests and
// earlier runs do not see each other's keys.
func newConsul(t *testing.T, addr string) *coord.Consul {
	t.Helper()
	c, err := coord.NewConsul(coord.ConsulConfig{
		Address:       addr,
		Prefix:        fmt.Sprintf("tabula/test-%s-%d/", testRun, prefixSeq.Add(1)),
		RetryInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConsulConformance(t *testing.T) {
	t.Parallel()
	addr := consulAddr(t)
	coordtest.Run(t, func(t *testing.T) coord.Service { return newConsul(t, addr) })
}

// TestConsulLapseWhenCutOff cuts the path to Consul with a proxy: renewals
// fail, so the session lapses on the holder's side within a TTL although
// Consul still has it; once Consul is reachable again, the lapsed session is
// destroyed, so its lock is released without waiting for Consul's own expiry.
func TestConsulLapseWhenCutOff(t *testing.T) {
	t.Parallel()
	p, direct, s, ctx := sessionBehindProxy(t)
	l, err := s.TryLock(ctx, coord.KeyMaster, []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	p.Cut(true)
	select {
	case <-s.Lapsed():
	case <-time.After(coordtest.TTL + 5*time.Second):
		t.Fatal("session did not lapse a TTL after Consul became unreachable")
	}
	if since := time.Since(cut); since > coordtest.TTL+time.Second {
		// Not a speed assertion: a lapse later than TTL after the last
		// renewal could let two holders act at once.
		t.Fatalf("lapsed %v after the cut, more than a TTL (%v)", since, coordtest.TTL)
	}
	if s.Valid() {
		t.Fatal("Valid after Lapsed")
	}
	select {
	case <-l.Lost():
	case <-time.After(time.Second):
		t.Fatal("lock not lost when its session lapsed")
	}
	select {
	case <-s.Done():
		t.Fatal("Done closed while Consul was unreachable: nobody could know the session is gone")
	default:
	}
	p.Cut(false)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lapsed session not destroyed once Consul was reachable again")
	}
	ent, err := direct.Get(ctx, coord.KeyMaster)
	if err != nil {
		t.Fatal(err)
	}
	if ent.Session != "" {
		t.Fatalf("entry after the lapsed session was destroyed = %+v, want unlocked", ent)
	}
}

// TestConsulSessionExpiresAfterCrash is the master's view of a tablet
// server killed with -9: nobody renews or destroys the session, Consul
// expires it (after up to twice its TTL), the server's key stays with its
// value but unlocked, and after the lock-delay the master can take the lock
// and delete the key.
func TestConsulSessionExpiresAfterCrash(t *testing.T) {
	t.Parallel()
	addr := consulAddr(t)
	crashed := newConsul(t, addr)
	master, err := coord.NewConsul(coord.ConsulConfig{Address: addr, Prefix: crashed.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := crashed.NewSession(ctx, coord.SessionOptions{TTL: coordtest.TTL, LockDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := coord.ServerKey("10.0.0.7:7000")
	if _, err := s.TryLock(ctx, key, []byte("10.0.0.7:7000")); err != nil {
		t.Fatal(err)
	}
	events, err := master.Watch(ctx, coord.PrefixServers)
	if err != nil {
		t.Fatal(err)
	}
	if ev := coordtest.NextEvent(t, events); ev.Kind != coord.EventPut || ev.Entry.Session != s.ID() {
		t.Fatalf("initial event %+v, want the live server's key", ev)
	}
	crashed.Close() // the process dies: no more renewals, no destroy
	crash := time.Now()
	select {
	case ev := <-events:
		if ev.Kind != coord.EventPut || ev.Entry.Session != "" || string(ev.Entry.Value) != "10.0.0.7:7000" {
			t.Fatalf("event after the crash %+v, want the key unlocked with its value kept", ev)
		}
	case <-time.After(2*coordtest.TTL + 10*time.Second):
		t.Fatal("Consul did not expire the crashed server's session within twice its TTL")
	}
	t.Logf("session expired %.1fs after the last renewal could have happened (TTL %v)", time.Since(crash).Seconds(), coordtest.TTL)
	ms, err := master.NewSession(ctx, coord.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Destroy(context.Background())
	if _, err := ms.Lock(ctx, key, []byte("master")); err != nil {
		t.Fatalf("master Lock of the dead server's key: %v", err)
	}
	ent, err := master.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := master.DeleteCAS(ctx, key, ent.ModifyIndex); err != nil {
		t.Fatalf("master delete of the dead server's key: %v", err)
	}
	// The master's lock, then the deletion; the lock may be coalesced
	// away when both changes land between two of Consul's answers (Watch
	// reports states, not every write), but nothing else may show.
	ev := coordtest.NextEvent(t, events)
	if ev.Kind == coord.EventPut && ev.Entry.Session == ms.ID() {
		ev = coordtest.NextEvent(t, events)
	}
	if ev.Kind != coord.EventDelete || ev.Entry.Key != key {
		t.Fatalf("event %+v, want the master's lock or the key's deletion", ev)
	}
}

// TestConsulDestroyWhileCutOff: a session destroyed while Consul cannot be
// reached (the call fails) is not renewed any more once Consul is back
// — a master that stepped down during a Consul restart once kept its
// given-up session alive this way, and no master could be elected for
// minutes — and it is destroyed as soon as Consul answers again, rather
// than left to Consul's expiry (up to twice the TTL after the last renewal,
// or after an agent restart's new leader: a master that stepped down
// during a Consul restart kept every master out for 2×TTL + lock-delay).
func TestConsulDestroyWhileCutOff(t *testing.T) {
	t.Parallel()
	p, direct, s, ctx := sessionBehindProxy(t)
	if _, err := s.TryLock(ctx, coord.KeyMaster, []byte("me")); err != nil {
		t.Fatal(err)
	}
	p.Cut(true)
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	err := s.Destroy(dctx)
	dcancel()
	if err == nil {
		t.Fatal("Destroy succeeded while Consul was unreachable: the test did not cut it off")
	}
	if s.Valid() {
		t.Fatal("Valid after Destroy")
	}
	p.Cut(false)
	healed := time.Now()
	// The retries come every RetryInterval (200 ms here); allowed: half a
	// TTL, for a loaded machine — well short of Consul's own expiry (about
	// 2×TTL after the last renewal), which is what the lock waited for
	// before the holder kept trying.
	limit := coordtest.TTL / 2
	for {
		ent, err := direct.Get(ctx, coord.KeyMaster)
		if err != nil {
			t.Fatal(err)
		}
		if ent.Session == "" {
			t.Logf("lock freed %v after Consul became reachable again", time.Since(healed).Round(time.Millisecond))
			return
		}
		if since := time.Since(healed); since > limit {
			t.Fatalf("the lock of a session destroyed while Consul was cut off is still held %v after Consul became reachable again (allowed %v): the failed destroy was not retried", since.Round(time.Millisecond), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessionBehindProxy returns a session (coordtest.TTL, 1 s lock-delay) of
// a client that reaches Consul through a proxy the test can cut, a client
// that reaches it directly, and a context of a minute.
func sessionBehindProxy(t *testing.T) (*cutproxy.Proxy, *coord.Consul, coord.Session, context.Context) {
	t.Helper()
	p := cutproxy.New(t, consulAddr(t))
	c := newConsul(t, p.Addr())
	direct, err := coord.NewConsul(coord.ConsulConfig{Address: consulAddr(t), Prefix: c.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := c.NewSession(ctx, coord.SessionOptions{TTL: coordtest.TTL, LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p, direct, s, ctx
}

// laggingLeader is an HTTP proxy in front of Consul that, while lagging
// is set, answers as a leader just elected that has not applied its log
// yet: renewals find no session and default-consistency reads no key,
// while consistent reads (which wait for the leader to catch up) pass.
type laggingLeader struct {
	lagging atomic.Bool
	renews  atomic.Int64 // renewals answered "not found"
	srv     *httptest.Server
}

func newLaggingLeader(t *testing.T, consul string) *laggingLeader {
	t.Helper()
	l := &laggingLeader{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: consul})
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.lagging.Load() && !r.URL.Query().Has("consistent") {
			switch {
			case strings.HasPrefix(r.URL.Path, "/v1/session/renew/"):
				l.renews.Add(1)
				http.Error(w, "Session id not found", http.StatusNotFound)
				return
			case strings.HasPrefix(r.URL.Path, "/v1/kv/") && r.Method == http.MethodGet:
				w.Header().Set("X-Consul-Index", "1")
				http.Error(w, "", http.StatusNotFound)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// TestConsulNewLeaderCatchingUp: Consul answers a renewal, and a default
// read, from its leader's state as applied so far, so right after Consul
// restarts a live session can look gone and its key unlocked. (The fault
// campaign saw tablet servers stop by themselves, "lease lapsed", after
// 3-4 s Consul restarts.) The holder believes only a consistent read: its
// session and lock survive the lag; a session really destroyed still ends.
func TestConsulNewLeaderCatchingUp(t *testing.T) {
	t.Parallel()
	l := newLaggingLeader(t, consulAddr(t))
	c := newConsul(t, strings.TrimPrefix(l.srv.URL, "http://"))
	direct, err := coord.NewConsul(coord.ConsulConfig{Address: consulAddr(t), Prefix: c.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSession(ctx, coord.SessionOptions{TTL: coordtest.TTL, Lease: 2 * time.Second, LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := s.TryLock(ctx, "servers/me", []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	l.lagging.Store(true)
	// A write to the key (the lock stays) ends the watch's blocking query:
	// its next read meets the lag.
	if err := direct.Put(ctx, "servers/me", []byte("me again")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.Done():
			t.Fatalf("session ended while the leader lagged (%d renewals answered not found): %v", l.renews.Load(), s.Err())
		case <-lock.Lost():
			t.Fatal("lock lost while the leader lagged")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if l.renews.Load() == 0 {
		t.Fatal("no renewal met the lagging leader: the test checked nothing")
	}
	l.lagging.Store(false)
	for !s.Valid() {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("session not valid again once the leader caught up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A session really gone still ends the holder's.
	if _, err := direct.EndSession(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		if !errors.Is(s.Err(), coord.ErrSessionGone) {
			t.Fatalf("Err after the session was destroyed = %v, want ErrSessionGone", s.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("session destroyed by another client, holder still running")
	}
	select {
	case <-lock.Lost():
	case <-time.After(time.Second):
		t.Fatal("lock not lost with its session")
	}
}
