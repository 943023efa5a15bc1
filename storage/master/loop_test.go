package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
)

const (
	testLockDelay = 5 * time.Second
	testTick      = time.Second
)

// fakeServers plays the tablet servers: a tablet is served as soon as Load
// returns. It records every call and any moment two live servers hold one
// tablet.
type fakeServers struct {
	svc *coord.Local

	mu        sync.Mutex
	serving   map[string]map[assign.TabletID]assign.Tablet
	down      map[string]bool
	failLoads map[assign.TabletID]int // failures left per tablet
	// failUnloads is how many Unload calls fail (the tablet stays served,
	// as when its flush fails), all of them of the first tablet unloaded
	// after it is set (failingUnload); unloadAt stamps every Unload call
	// by the fake clock, per tablet.
	failUnloads   int
	failingUnload assign.TabletID
	unloadAt      map[assign.TabletID][]time.Time
	// dropLoads counts, per tablet, loads that succeed but leave the
	// tablet unserved at once (unloaded before the master's next List).
	dropLoads  map[assign.TabletID]int
	calls      []string
	lists      int
	violations []string
	// loadDelay is real time each Load takes; loading and maxLoading
	// count the Loads under way.
	loadDelay           time.Duration
	loading, maxLoading int
	// sortErr is what SortLog returns; sortedLoads records the loads
	// that were sent with a sorted log.
	sortErr     error
	sortedLoads []string
	// paused servers' Lists wait for their context's end (a SIGSTOPped
	// process: the kernel accepts, nothing answers); listTimeouts
	// records, per server, the time each List was given.
	paused       map[string]bool
	listTimeouts map[string][]time.Duration
	// stalled servers' Loads and Unloads wait for their context's end
	// (a disk that hangs); stalledCalls counts those waiting.
	stalled      map[string]bool
	stalledCalls int
	// clock, when set, stamps loadAt: each tablet's Load calls by the
	// fake clock's time.
	clock  *coord.FakeClock
	loadAt map[assign.TabletID][]time.Time
}

func newFakeServers(svc *coord.Local) *fakeServers {
	return &fakeServers{
		sortErr:   errors.New("fake: no sorter"),
		svc:       svc,
		serving:   make(map[string]map[assign.TabletID]assign.Tablet),
		down:      make(map[string]bool),
		failLoads: make(map[assign.TabletID]int),
		dropLoads: make(map[assign.TabletID]int),
		loadAt:    make(map[assign.TabletID][]time.Time),
		unloadAt:  make(map[assign.TabletID][]time.Time),
	}
}

var errDown = errors.New("fake: server down")

func (f *fakeServers) List(ctx context.Context, server string) ([]assign.Served, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if dl, ok := ctx.Deadline(); ok {
		if f.listTimeouts == nil {
			f.listTimeouts = make(map[string][]time.Duration)
		}
		f.listTimeouts[server] = append(f.listTimeouts[server], time.Until(dl))
	}
	if f.paused[server] {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if f.down[server] {
		return nil, errDown
	}
	var out []assign.Served
	for _, t := range f.serving[server] {
		out = append(out, assign.Served{ID: t.ID, Table: t.Table, Start: t.Start, End: t.End})
	}
	slices.SortFunc(out, func(a, b assign.Served) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out, nil
}

// stall waits for ctx's end if server's calls are stalled, and reports
// whether it did.
func (f *fakeServers) stall(ctx context.Context, server string) bool {
	f.mu.Lock()
	if !f.stalled[server] {
		f.mu.Unlock()
		return false
	}
	f.stalledCalls++
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.stalledCalls--
	f.mu.Unlock()
	return true
}

func (f *fakeServers) Load(ctx context.Context, server string, t assign.Tablet, rec RecoverySource) error {
	if f.stall(ctx, server) {
		return ctx.Err()
	}
	recoverFrom := rec.From
	if f.loadDelay > 0 {
		f.mu.Lock()
		f.loading++
		f.maxLoading = max(f.maxLoading, f.loading)
		f.mu.Unlock()
		time.Sleep(f.loadDelay)
		defer func() {
			f.mu.Lock()
			f.loading--
			f.mu.Unlock()
		}()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("load %s %s %s", t.ID, server, recoverFrom))
	if f.clock != nil {
		f.loadAt[t.ID] = append(f.loadAt[t.ID], f.clock.Now())
	}
	if rec.Sorted {
		f.sortedLoads = append(f.sortedLoads, string(t.ID))
	}
	if f.down[server] {
		return errDown
	}
	if f.failLoads[t.ID] > 0 {
		f.failLoads[t.ID]--
		return errors.New("fake: load failed")
	}
	for s, ts := range f.serving {
		if _, ok := ts[t.ID]; ok && s != server && !f.down[s] {
			f.violations = append(f.violations, fmt.Sprintf("%s loaded on %s while %s serves it", t.ID, server, s))
		}
	}
	// Recovery from a server's log is safe only once it was declared dead:
	// its key deleted by the master.
	if recoverFrom != "" {
		if _, err := f.svc.Get(ctx, coord.ServerKey(recoverFrom)); !errors.Is(err, coord.ErrNotFound) {
			f.violations = append(f.violations, fmt.Sprintf("%s recovered from %s whose key still exists (err %v)", t.ID, recoverFrom, err))
		}
	}
	if f.serving[server] == nil {
		f.serving[server] = make(map[assign.TabletID]assign.Tablet)
	}
	if f.dropLoads[t.ID] > 0 {
		f.dropLoads[t.ID]--
		return nil
	}
	f.serving[server][t.ID] = t
	return nil
}

func (f *fakeServers) Unload(ctx context.Context, server, tabletID string) error {
	if f.stall(ctx, server) {
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("unload %s %s", tabletID, server))
	if f.clock != nil {
		f.unloadAt[assign.TabletID(tabletID)] = append(f.unloadAt[assign.TabletID(tabletID)], f.clock.Now())
	}
	if f.down[server] {
		return errDown
	}
	if f.failUnloads > 0 && f.failingUnload == "" {
		f.failingUnload = assign.TabletID(tabletID)
	}
	if f.failUnloads > 0 && f.failingUnload == assign.TabletID(tabletID) {
		f.failUnloads--
		return errors.New("fake: unload failed (its flush)")
	}
	delete(f.serving[server], assign.TabletID(tabletID))
	return nil
}

// kill stops server: it answers nothing and serves nothing (as after
// kill -9).
func (f *fakeServers) kill(server string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[server] = true
}

// pause stops server answering, its tablets still held (SIGSTOP).
func (f *fakeServers) pause(server string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused == nil {
		f.paused = make(map[string]bool)
	}
	f.paused[server] = true
}

// listTimeoutsOf returns the time each List of server was given.
func (f *fakeServers) listTimeoutsOf(server string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.listTimeouts[server])
}

// tabletsOn returns the tablets server serves.
func (f *fakeServers) tabletsOn(server string) []assign.TabletID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []assign.TabletID
	for id := range f.serving[server] {
		out = append(out, id)
	}
	return out
}

// where returns the live servers serving each tablet.
func (f *fakeServers) where() map[assign.TabletID][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[assign.TabletID][]string)
	for s, ts := range f.serving {
		if f.down[s] {
			continue
		}
		for id := range ts {
			out[id] = append(out[id], s)
		}
	}
	for _, ss := range out {
		slices.Sort(ss)
	}
	return out
}

func (f *fakeServers) callsSince(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[n:])
}

func (f *fakeServers) ncalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// fakeMeta is METADATA in memory.
type fakeMeta struct {
	mu      sync.Mutex
	tablets []assign.Tablet
	epochs  []uint64 // every SetLocation's, in call order
	// hang makes every SetLocation wait for its context to end, as a
	// write to a METADATA tablet on a dead server waits out its timeout.
	hang bool
}

func (m *fakeMeta) Tablets(context.Context) ([]assign.Tablet, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.tablets), nil
}

func (m *fakeMeta) SetLocation(ctx context.Context, id, server string, epoch uint64) error {
	m.mu.Lock()
	if m.hang {
		m.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	defer m.mu.Unlock()
	m.epochs = append(m.epochs, epoch)
	for i := range m.tablets {
		if m.tablets[i].ID == assign.TabletID(id) {
			m.tablets[i].LastServer = assign.ServerID(server)
			return nil
		}
	}
	return fmt.Errorf("fake: no tablet %s", id)
}

func (m *fakeMeta) location(id assign.TabletID) assign.ServerID {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tablets {
		if t.ID == id {
			return t.LastServer
		}
	}
	return ""
}

func (m *fakeMeta) epochList() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.epochs)
}

// testTablets is a root tablet, two METADATA tablets and six user tablets
// of equal size (so that balance moves nothing).
func testTablets() []assign.Tablet {
	ts := []assign.Tablet{
		{ID: "root", Table: "METADATA", End: "m0", Kind: assign.Root, Size: 100},
		{ID: "meta0", Table: "METADATA", Start: "m0", End: "m1", Kind: assign.Meta, Size: 100},
		{ID: "meta1", Table: "METADATA", Start: "m1", Kind: assign.Meta, Size: 100},
	}
	for i := range 6 {
		t := assign.Tablet{ID: assign.TabletID(fmt.Sprintf("u%d", i)), Table: "t", Size: 100}
		if i > 0 {
			t.Start = fmt.Sprintf("k%d", i)
		}
		if i < 5 {
			t.End = fmt.Sprintf("k%d", i+1)
		}
		ts = append(ts, t)
	}
	return ts
}

type cluster struct {
	t        *testing.T
	clock    *coord.FakeClock
	svc      *coord.Local
	servers  *fakeServers
	meta     *fakeMeta
	sessions map[string]coord.Session
}

func newCluster(t *testing.T, servers ...string) *cluster {
	t.Helper()
	clock := coord.NewFakeClock()
	svc := coord.NewLocal(coord.LocalConfig{Clock: clock, LockDelay: testLockDelay})
	t.Cleanup(func() { svc.Close() })
	c := &cluster{
		t:        t,
		clock:    clock,
		svc:      svc,
		servers:  newFakeServers(svc),
		meta:     &fakeMeta{tablets: testTablets()},
		sessions: make(map[string]coord.Session),
	}
	c.servers.clock = clock
	for _, s := range servers {
		c.join(s)
	}
	return c
}

// join starts server s: its session holds its key.
func (c *cluster) join(s string) {
	c.t.Helper()
	sess, err := c.svc.NewSession(context.Background(), coord.SessionOptions{Name: s})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := sess.TryLock(context.Background(), coord.ServerKey(s), []byte(s+":7000")); err != nil {
		c.t.Fatal(err)
	}
	c.sessions[s] = sess
}

// startMaster runs a Loop named name until the test ends or stop is
// called. tune, if given, adjusts its options.
func (c *cluster) startMaster(name string, tune ...func(*LoopOptions)) (stop func()) {
	c.t.Helper()
	opts := LoopOptions{
		Coord:    c.svc,
		Servers:  c.servers,
		Metadata: c.meta,
		Name:     name,
		Clock:    c.clock,
		Tick:     testTick,
		Logger:   quietLogger(),
	}
	for _, f := range tune {
		f(&opts)
	}
	ctl, err := NewLoop(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				c.t.Errorf("master %s: Run = %v", name, err)
			}
		})
	}
	c.t.Cleanup(stop)
	return stop
}

// kill ends server's process and, as the lock service would after its
// TTL, its session.
func (c *cluster) kill(server string) {
	c.servers.kill(server)
	c.svc.Expire(c.sessions[server].ID())
}

// check fails the test if two live servers ever held one tablet.
func (c *cluster) check() {
	c.t.Helper()
	c.servers.mu.Lock()
	v := slices.Clone(c.servers.violations)
	c.servers.mu.Unlock()
	if len(v) > 0 {
		c.t.Fatalf("safety violated: %v", v)
	}
	for id, ss := range c.servers.where() {
		if len(ss) > 1 {
			c.t.Fatalf("tablet %s served by %v", id, ss)
		}
	}
}

// waitFor polls cond, checking safety at every step. With advance > 0 the
// fake clock moves on by advance between polls (for ticks, lock-delays and
// timeouts).
func (c *cluster) waitFor(what string, advance time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.check()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s; calls %v; where %v", what, c.servers.callsSince(0), c.servers.where())
		}
		if advance > 0 {
			c.clock.Advance(advance)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// allServed reports whether every METADATA tablet is served by one live
// server.
func (c *cluster) allServed() bool {
	w := c.servers.where()
	for _, t := range testTablets() {
		if len(w[t.ID]) != 1 {
			return false
		}
	}
	return true
}

func (c *cluster) masterName() string {
	e, err := c.svc.Get(context.Background(), coord.KeyMaster)
	if err != nil || e.Session == "" {
		return ""
	}
	return string(e.Value)
}

func TestLoopStartupAssignsInOrder(t *testing.T) {
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)

	var order []string
	for _, call := range c.servers.callsSince(0) {
		f := strings.Fields(call)
		if f[0] != "load" {
			t.Fatalf("unexpected call %q", call)
		}
		order = append(order, f[1])
	}
	if len(order) != len(testTablets()) {
		t.Fatalf("loads %v, want one per tablet", order)
	}
	rank := func(id string) int {
		switch {
		case id == "root":
			return 0
		case strings.HasPrefix(id, "meta"):
			return 1
		}
		return 2
	}
	for i := 1; i < len(order); i++ {
		if rank(order[i-1]) > rank(order[i]) {
			t.Fatalf("load order %v: root, then METADATA, then user tablets", order)
		}
	}
	// Spread evenly and recorded in METADATA.
	count := map[string]int{}
	for id, ss := range c.servers.where() {
		count[ss[0]]++
		if got := c.meta.location(id); string(got) != ss[0] {
			t.Errorf("METADATA location of %s = %q, served by %s", id, got, ss[0])
		}
	}
	for _, s := range []string{"s1", "s2", "s3"} {
		if count[s] != 3 {
			t.Errorf("server tablet counts %v, want 3 each", count)
		}
	}
}

func TestLoopReassignsDeadServersTablets(t *testing.T) {
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)

	var lost []assign.TabletID
	for id, ss := range c.servers.where() {
		if ss[0] == "s2" {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	// Watch s2's key to see the master take its lock before deleting it.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	events, err := c.svc.WatchKey(wctx, coord.ServerKey("s2"))
	if err != nil {
		t.Fatal(err)
	}
	<-events // its current state
	n := c.servers.ncalls()

	c.kill("s2")
	// Within the lock-delay the master cannot take the lock: nothing of
	// s2's moves.
	c.clock.Advance(testLockDelay - time.Second)
	time.Sleep(20 * time.Millisecond)
	if calls := c.servers.callsSince(n); len(calls) > 0 {
		t.Fatalf("calls before the master held s2's lock: %v", calls)
	}

	c.waitFor("s2's tablets served elsewhere", testTick, c.allServed)

	var got []assign.TabletID
	for _, call := range c.servers.callsSince(n) {
		f := strings.Fields(call)
		if f[0] != "load" || len(f) != 4 || f[3] != "s2" || f[2] == "s2" {
			t.Fatalf("call %q: want loads on survivors recovering from s2", call)
		}
		got = append(got, assign.TabletID(f[1]))
	}
	slices.Sort(got)
	if !slices.Equal(got, lost) {
		t.Fatalf("reassigned %v, want exactly s2's tablets %v", got, lost)
	}
	if _, err := c.svc.Get(context.Background(), coord.ServerKey("s2")); !errors.Is(err, coord.ErrNotFound) {
		t.Fatalf("s2's key: err %v, want deleted", err)
	}
	// The key's history: released by the expiry, locked by the master,
	// then deleted.
	var hist []string
	for ev := range events {
		switch {
		case ev.Kind == coord.EventDelete:
			hist = append(hist, "delete")
		case ev.Entry.Session == "":
			hist = append(hist, "released")
		default:
			hist = append(hist, "locked:"+string(ev.Entry.Value))
		}
		if ev.Kind == coord.EventDelete {
			break
		}
	}
	if want := []string{"released", "locked:m1", "delete"}; !slices.Equal(hist, want) {
		t.Fatalf("s2's key went %v, want %v", hist, want)
	}
}

// A load whose call fails is resent to the same server after a backoff
// — 1s, then 2s, 4s, … — not after the planner's 30s load timeout: a load
// refused while the store or the lock service was down for a few seconds
// is served once they are back.
func TestLoopRetriesFailedLoadWithBackoff(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	c.servers.failLoads["u3"] = 3
	start := c.clock.Now()
	c.startMaster("m1")
	others := func() bool {
		w := c.servers.where()
		for _, tb := range testTablets() {
			if tb.ID != "u3" && len(w[tb.ID]) != 1 {
				return false
			}
		}
		return true
	}
	c.waitFor("every other tablet served", 0, others)
	loadsOf := func() []string {
		var out []string
		for _, call := range c.servers.callsSince(0) {
			if strings.HasPrefix(call, "load u3 ") {
				out = append(out, call)
			}
		}
		return out
	}
	// The clock moves on in small steps until u3 is served; then the
	// times of its loads show the backoff. The n-th failed load is resent
	// once it is callRetry(n) old (rounds come every Tick, so up to a Tick
	// later), and never before.
	for i := 0; i < 800 && !c.allServed(); i++ {
		c.clock.Advance(50 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	c.waitFor("u3 served after three failed loads", testTick, c.allServed)
	l := loadsOf()
	if len(l) != 4 || l[0] != l[1] || l[1] != l[2] || l[2] != l[3] {
		t.Fatalf("loads of u3 %v: want the failed one resent to the same server three times", l)
	}
	c.servers.mu.Lock()
	at := slices.Clone(c.servers.loadAt["u3"])
	c.servers.mu.Unlock()
	for n, retry := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		gap := at[n+1].Sub(at[n])
		// The master times a load from when it plans it, the fake stamps
		// it when called: a master running late behind the clock's steps
		// (a loaded machine) stamps a load later, so the bounds allow
		// half a second, and more above (rounds come every Tick).
		if gap < retry-500*time.Millisecond || gap > retry+5*time.Second {
			t.Errorf("load %d of u3 came %v after load %d: want about %v (load times %v)", n+2, gap, n+1, retry, at)
		}
	}
	if took := c.clock.Now().Sub(start); took >= 30*time.Second {
		t.Fatalf("u3 served after %v: the master waited for the load timeout (30s)", took)
	}
}

// A dead server's tablets, just recovered on another server, stay there
// while they settle (assign.Config.SettleAfterLoad, 10 s by default):
// when an empty server joins, balance first moves the tablets that were
// there before, and a recovered one only once its load is 10 s old. (A
// fault campaign saw a recovered tablet moved 30 ms after its load: its
// callers, who had just found it, looked it up again.)
func TestLoopLeavesRecoveredTabletsToSettle(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	c.startMaster("m1")
	c.waitFor("every tablet served", 0, c.allServed)
	// Let the first loads settle: 11 rounds of a second.
	for range 11 {
		c.clock.Advance(testTick)
		time.Sleep(5 * time.Millisecond)
	}
	isUser := func(id assign.TabletID) bool { return strings.HasPrefix(string(id), "u") }
	old := slices.DeleteFunc(c.servers.tabletsOn("s1"), func(id assign.TabletID) bool { return !isUser(id) })
	recovered := slices.DeleteFunc(c.servers.tabletsOn("s2"), func(id assign.TabletID) bool { return !isUser(id) })
	if len(old) == 0 || len(recovered) == 0 {
		t.Fatalf("user tablets on s1 %v, on s2 %v: want some on each", old, recovered)
	}
	c.kill("s2")
	c.waitFor("s2's tablets recovered on s1", testTick/10, func() bool {
		return c.allServed() && len(c.servers.tabletsOn("s1")) == len(testTablets())
	})
	recoveredAt := c.clock.Now()
	c.join("s3")
	c.waitFor("s1's older tablets moved to s3", testTick/10, func() bool {
		return len(c.servers.tabletsOn("s3")) >= len(old)
	})
	slices.Sort(old)
	if on3 := c.servers.tabletsOn("s3"); !slices.Equal(slices.Sorted(slices.Values(on3)), old) {
		t.Fatalf("s3 got %v %v after the recovery: want s1's older tablets %v, not the recovered %v",
			on3, c.clock.Now().Sub(recoveredAt), old, recovered)
	}
	// s1 still holds the recovered ones and the METADATA tablets, more
	// than the mean: once settled, a recovered tablet moves.
	c.waitFor("a recovered tablet moved to s3", testTick/10, func() bool {
		return slices.ContainsFunc(c.servers.tabletsOn("s3"), func(id assign.TabletID) bool { return slices.Contains(recovered, id) })
	})
	if waited := c.clock.Now().Sub(recoveredAt); waited < 9*time.Second {
		t.Fatalf("a recovered tablet moved %v after its recovery: want it left to settle for 10s", waited)
	}
}

// An unload whose call fails (the server's flush failed: the store was
// down) is resent to the same server after a backoff — 1s, then 2s — not
// after the planner's 30s timeout: a move held up by a store outage of a
// few seconds goes on once the store is back.
func TestLoopRetriesFailedUnloadWithBackoff(t *testing.T) {
	c := newCluster(t, "s1")
	c.startMaster("m1")
	c.waitFor("every tablet served on s1", testTick, c.allServed)
	c.servers.mu.Lock()
	c.servers.failUnloads = 2
	c.servers.mu.Unlock()
	start := c.clock.Now()
	c.join("s2") // an empty server: the balance moves tablets to it
	moved := func() bool {
		c.servers.mu.Lock()
		failing := c.servers.failingUnload
		c.servers.mu.Unlock()
		return failing != "" && c.allServed() && slices.Contains(c.servers.tabletsOn("s2"), failing)
	}
	for i := 0; i < 800 && !moved(); i++ {
		c.clock.Advance(50 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	c.waitFor("the tablet whose unloads failed moved to s2", testTick, moved)
	c.servers.mu.Lock()
	first := c.servers.failingUnload
	at := slices.Clone(c.servers.unloadAt[first])
	c.servers.mu.Unlock()
	if first == "" || len(at) != 3 {
		t.Fatalf("unloads of %q at %v: want two failed and one more (calls %v)", first, at, c.servers.callsSince(0))
	}
	for n, retry := range []time.Duration{time.Second, 2 * time.Second} {
		// As for loads: the master times an unload from when it plans
		// it, the fake stamps it when called.
		if gap := at[n+1].Sub(at[n]); gap < retry-500*time.Millisecond || gap > retry+5*time.Second {
			t.Errorf("unload %d of %s came %v after unload %d: want about %v (unload times %v)", n+2, first, gap, n+1, retry, at)
		}
	}
	if took := c.clock.Now().Sub(start); took >= 30*time.Second {
		t.Fatalf("moves done after %v: the master waited for the unload timeout (30s)", took)
	}
}

// A load's METADATA write that cannot complete (the METADATA tablet's
// server died) holds its round up for a Tick, not the RPC timeout (here
// ten minutes): a second server killed meanwhile is detected and its
// tablets served again. (With the RPC timeout the rounds stopped at the
// first such write; a recovery-time trial saw 10.9 s of detection.)
func TestLoopLocationWritesDoNotHoldUpDetection(t *testing.T) {
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1", func(o *LoopOptions) { o.RPCTimeout = 10 * time.Minute })
	c.waitFor("all tablets served", testTick, c.allServed)
	c.meta.mu.Lock()
	c.meta.hang = true
	c.meta.mu.Unlock()
	c.kill("s3")
	c.kill("s2")
	start := time.Now()
	for !(c.allServed() && len(c.servers.tabletsOn("s1")) == len(testTablets())) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("s2's and s3's tablets not on s1 after %v: calls %v", time.Since(start), c.servers.callsSince(0))
		}
		c.check()
		c.clock.Advance(testTick / 4)
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("recovered in %v of real time, every METADATA write timing out", time.Since(start))
}

// repairingMeta is fakeMeta that also repairs splits (SplitRepairer),
// counting the calls and repairing nothing.
type repairingMeta struct {
	*fakeMeta
	repairs atomic.Int64
}

func (m *repairingMeta) RepairSplits(context.Context, string, string, string) error {
	m.repairs.Add(1)
	return nil
}

// A rescan that changes nothing (a server serves a tablet METADATA does
// not know, overlapping one it does: a split whose rows are not there
// yet) is tried once a round, rounds coming at their time: the split
// repair, which runs beside the rounds, does not start the next round
// when it ends. (When it did, the split repairs ran back to back for as
// long as the unknown tablet was served.)
func TestLoopRescansOncePerRound(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	m := &repairingMeta{fakeMeta: c.meta}
	c.startMaster("m1", func(o *LoopOptions) { o.Metadata = m })
	c.waitFor("all tablets served", testTick, c.allServed)
	c.servers.mu.Lock()
	for s, ts := range c.servers.serving {
		if _, ok := ts["u0"]; ok {
			// A child of u0 whose split METADATA does not show.
			ts["u0-child"] = assign.Tablet{ID: "u0-child", Table: "t", End: "k05"}
			t.Logf("%s serves u0-child", s)
		}
	}
	c.servers.mu.Unlock()
	before := m.repairs.Load()
	for range 3 {
		c.clock.Advance(testTick)
		time.Sleep(100 * time.Millisecond)
	}
	got := m.repairs.Load() - before
	if got < 1 || got > 6 {
		t.Fatalf("%d split repairs over 3 ticks: want one or two a tick", got)
	}
}

// A tablet unloaded right after its load returned, before the master's
// next List (an operator's unload, or the server closing it), is loaded
// again at once: the load was answered, so no confirmation is awaited
// for the load timeout. (The fault campaign saw a tablet unserved 31 s
// this way.)
func TestLoopReloadsTabletGoneRightAfterItsLoad(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	c.servers.dropLoads["u3"] = 1
	start := c.clock.Now()
	c.startMaster("m1")
	c.waitFor("every tablet served", testTick, c.allServed)
	var loads []string
	for _, call := range c.servers.callsSince(0) {
		if strings.HasPrefix(call, "load u3 ") {
			loads = append(loads, call)
		}
	}
	if len(loads) != 2 {
		t.Fatalf("loads of u3 %v: want the dropped one and one more", loads)
	}
	if took := c.clock.Now().Sub(start); took >= 30*time.Second {
		t.Fatalf("u3 served again after %v: the master waited for the load timeout (30s)", took)
	}
}

func TestLoopFailover(t *testing.T) {
	c := newCluster(t, "s1", "s2", "s3")
	stops := map[string]func(){"m1": c.startMaster("m1"), "m2": c.startMaster("m2")}
	c.waitFor("a master", 0, func() bool { return c.masterName() != "" })
	c.waitFor("all tablets served", 0, c.allServed)
	active := c.masterName()
	standby := map[string]string{"m1": "m2", "m2": "m1"}[active]
	before := c.servers.where()
	n := c.servers.ncalls()
	epochsBefore := c.meta.epochList()

	// The active master dies (kill -9): it stops, and its session expires.
	// (Run, cancelled, destroys its session; expiring it first makes the
	// destroy a no-op, as when the process is gone.)
	e, err := c.svc.Get(context.Background(), coord.KeyMaster)
	if err != nil {
		t.Fatal(err)
	}
	c.svc.Expire(e.Session)
	stops[active]()
	c.servers.mu.Lock()
	lists := c.servers.lists
	c.servers.mu.Unlock()
	c.waitFor("the standby to take over and scan", time.Second, func() bool {
		c.servers.mu.Lock()
		defer c.servers.mu.Unlock()
		return c.masterName() == standby && c.servers.lists >= lists+3
	})
	time.Sleep(20 * time.Millisecond)
	// Nothing served moved: no unload, no load.
	if calls := c.servers.callsSince(n); len(calls) > 0 {
		t.Fatalf("calls during failover: %v", calls)
	}
	if after := c.servers.where(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("tablets moved in failover: %v → %v", before, after)
	}

	// The new master carries on: a server dies, its tablets move.
	c.kill("s1")
	c.waitFor("s1's tablets served elsewhere", testTick, c.allServed)
	for _, call := range c.servers.callsSince(n) {
		if !strings.HasPrefix(call, "load ") || !strings.HasSuffix(call, " s1") {
			t.Fatalf("call %q after s1 died", call)
		}
	}
	epochs := c.meta.epochList()
	if len(epochs) <= len(epochsBefore) {
		t.Fatalf("no new epochs after failover: %v", epochs)
	}
	// Loads complete in parallel, so SetLocation calls may come out of
	// epoch order; what must hold is that no epoch is handed out twice and
	// that the new master's are all above its predecessor's.
	seen := make(map[uint64]bool)
	for _, e := range epochs {
		if seen[e] {
			t.Fatalf("epoch %d handed out twice: %v", e, epochs)
		}
		seen[e] = true
	}
	for _, e := range epochs[len(epochsBefore):] {
		if e <= slices.Max(epochsBefore) {
			t.Fatalf("epoch %d after failover is not above every epoch before it (%v)", e, epochsBefore)
		}
	}
}

func TestEpochsNeverReused(t *testing.T) {
	svc := coord.NewLocal(coord.LocalConfig{Clock: coord.NewFakeClock()})
	defer svc.Close()
	ctx := context.Background()
	a := epochs{kv: svc, block: 3}
	b := epochs{kv: svc, block: 3}
	seen := map[uint64]bool{}
	for i := range 10 {
		e := &a
		if i%3 == 0 {
			e = &b
		}
		n, err := e.take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] || n == 0 {
			t.Fatalf("epoch %d handed out twice (or zero)", n)
		}
		seen[n] = true
	}
	// A fresh allocator (a new master) starts past everything reserved.
	c := epochs{kv: svc, block: 3}
	n, _ := c.take(ctx)
	for m := range seen {
		if n <= m {
			t.Fatalf("new master's first epoch %d not above %d", n, m)
		}
	}
}

// A master whose session lapses, or whose lock key is deleted, stops
// acting and campaigns again with a new session; re-elected, it carries on
// from a fresh scan without moving anything.
func TestLoopStepsDownAndCampaignsAgain(t *testing.T) {
	for _, how := range []string{"session expires", "lock key deleted"} {
		t.Run(how, func(t *testing.T) {
			c := newCluster(t, "s1", "s2")
			c.startMaster("m1")
			c.waitFor("all tablets served", 0, c.allServed)
			n := c.servers.ncalls()
			e, err := c.svc.Get(context.Background(), coord.KeyMaster)
			if err != nil {
				t.Fatal(err)
			}
			if how == "session expires" {
				c.svc.Expire(e.Session)
			} else if err := c.svc.Delete(context.Background(), coord.KeyMaster); err != nil {
				t.Fatal(err)
			}
			c.waitFor("m1 re-elected with a new session", time.Second, func() bool {
				e2, err := c.svc.Get(context.Background(), coord.KeyMaster)
				return err == nil && e2.Session != "" && e2.Session != e.Session
			})
			c.kill("s1")
			c.waitFor("s1's tablets served elsewhere", testTick, c.allServed)
			for _, call := range c.servers.callsSince(n) {
				if !strings.HasPrefix(call, "load ") || !strings.HasSuffix(call, " s2 s1") {
					t.Fatalf("call %q: want only loads of s1's tablets on s2", call)
				}
			}
		})
	}
}

// A new master that finds a server's key released but still in lock-delay
// (the server died while no master was active) must not hand out its
// tablets, although it never heard from it: METADATA's location holds
// them until the master has taken the lock and deleted the key.
func TestLoopStartupWaitsForReleasedServer(t *testing.T) {
	c := newCluster(t, "s1", "s2", "s3")
	stop := c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	stop() // destroys its session: the master key is in lock-delay
	c.clock.Advance(testLockDelay - time.Second)
	c.kill("s2") // its key stays in lock-delay a second past the master's
	n := c.servers.ncalls()
	c.servers.mu.Lock()
	lists := c.servers.lists
	c.servers.mu.Unlock()

	c.startMaster("m2")
	c.waitFor("m2 elected and scanning", 100*time.Millisecond, func() bool {
		c.servers.mu.Lock()
		defer c.servers.mu.Unlock()
		return c.masterName() == "m2" && c.servers.lists >= lists+2
	})
	time.Sleep(20 * time.Millisecond)
	if calls := c.servers.callsSince(n); len(calls) > 0 {
		t.Fatalf("calls while s2's key is in lock-delay: %v", calls)
	}
	c.waitFor("s2's tablets served elsewhere", testTick, c.allServed)
	for _, call := range c.servers.callsSince(n) {
		if !strings.HasPrefix(call, "load ") || !strings.HasSuffix(call, " s2") {
			t.Fatalf("call %q: want only loads recovering s2's tablets", call)
		}
	}
}

func (f *fakeServers) SortLog(_ context.Context, dead string, sorters []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("sortlog %s %v", dead, sorters))
	return f.sortErr
}

// A server that stops answering, its session still alive (a process killed
// on a machine whose lock-service session has not expired yet, or one
// paused), has its session ended by the master after UnreachableAfter; its
// tablets move a session TTL later, not before.
func TestLoopEndsSessionOfUnreachableServer(t *testing.T) {
	const unreachableAfter = 4 * time.Second
	c := newCluster(t, "s1", "s2", "s3")
	// Set, not the default, so that the bound checked below is the one the
	// master was given (the default moved from 4 s to 3 s once, and this
	// test kept checking 4 s: it failed whenever the rounds fell right).
	c.startMaster("m1", func(o *LoopOptions) { o.UnreachableAfter = unreachableAfter })
	c.waitFor("all tablets served", 0, c.allServed)
	n := c.servers.ncalls()
	killed := c.clock.Now()
	c.servers.kill("s2") // no Expire: only the master can end its session
	sess := c.sessions["s2"]

	// Until the master ends the session, nothing of s2's moves.
	for !isDone(sess) {
		if c.clock.Now().Sub(killed) > time.Minute {
			t.Fatal("the master never ended the unreachable server's session")
		}
		if calls := c.servers.callsSince(n); len(calls) > 0 {
			t.Fatalf("calls before s2's session ended: %v", calls)
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	ended := c.clock.Now()
	if after := ended.Sub(killed); after < unreachableAfter {
		t.Fatalf("session ended %v after the server stopped answering, before UnreachableAfter (%v)", after, unreachableAfter)
	}
	// For a TTL after that, s2 may still think its lease valid: nothing
	// of its tablets moves.
	for c.clock.Now().Sub(ended) < sess.TTL() {
		if calls := c.servers.callsSince(n); len(calls) > 0 {
			t.Fatalf("calls %v after %v, within the TTL (%v) of ending s2's session", calls, c.clock.Now().Sub(ended), sess.TTL())
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	c.waitFor("s2's tablets served elsewhere", testTick, c.allServed)
	for _, call := range c.servers.callsSince(n) {
		if f := strings.Fields(call); f[0] != "load" || len(f) != 4 || f[3] != "s2" {
			t.Fatalf("call %q: want loads recovering from s2", call)
		}
	}
	if took := c.clock.Now().Sub(killed); took > 25*time.Second {
		t.Fatalf("tablets moved %v after the server stopped answering; want about UnreachableAfter + 1.1×TTL", took)
	}
}

// A paused server — its connections accepted, nothing answered — costs
// one whole ListTimeout, then a short List every round: its failures are
// counted every round, not one per ListTimeout (which took three of them,
// 7 s, before the master ended its session, every round waiting for it),
// and its session is ended once it has answered nothing for
// UnreachableAfter since the first List it left unanswered was sent.
func TestLoopAsksPausedServerBriefly(t *testing.T) {
	const listTimeout = 2 * time.Second
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1", func(o *LoopOptions) { o.ListTimeout = listTimeout })
	c.waitFor("all tablets served", 0, c.allServed)
	paused := c.clock.Now()
	before := len(c.servers.listTimeoutsOf("s2"))
	c.servers.pause("s2")
	sess := c.sessions["s2"]
	start := time.Now()
	for !isDone(sess) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the paused server's session not ended after 30 s; its Lists were given %v", c.servers.listTimeoutsOf("s2"))
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}
	if after := c.clock.Now().Sub(paused); after < 3*time.Second {
		t.Fatalf("session ended %v after the pause, before UnreachableAfter (3s)", after)
	}
	ts := c.servers.listTimeoutsOf("s2")[before:]
	var long []time.Duration
	for _, d := range ts {
		if d > testTick/2+100*time.Millisecond {
			long = append(long, d)
		}
	}
	// The List under way at the pause, perhaps one more: the first failure
	// is counted only when one times out.
	if len(long) == 0 || len(long) > 2 || long[0] < listTimeout-time.Second {
		t.Fatalf("the paused server's Lists were given %v: want one or two of ListTimeout (%v) first, then at most Tick/2", ts, listTimeout)
	}
	if took := time.Since(start); took > 2*listTimeout+2*time.Second {
		t.Fatalf("ending the paused server's session took %v of real time: Lists of ListTimeout each", took)
	}
}

// A round waits for its loads and unloads for callWait, no longer: a call
// to a server that stalled goes on beside the next rounds, which keep
// asking every server what it serves — and so detect failures — instead
// of waiting the call's whole RPCTimeout; no second load of a tablet goes
// out while its first hangs.
func TestLoopRoundsGoOnBesideAStalledCall(t *testing.T) {
	const rpcTimeout = 20 * time.Second
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1", func(o *LoopOptions) { o.RPCTimeout = rpcTimeout })
	c.waitFor("all tablets served", 0, c.allServed)
	c.servers.mu.Lock()
	c.servers.stalled = map[string]bool{"s2": true}
	c.servers.mu.Unlock()
	// s1 dies: once its session expires its tablets are loaded on s2 and
	// s3, and the loads to s2 hang.
	n := c.servers.ncalls()
	c.kill("s1")
	stalled := func() bool {
		c.servers.mu.Lock()
		defer c.servers.mu.Unlock()
		return c.servers.stalledCalls > 0
	}
	start := time.Now()
	for !stalled() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no call to s2 after s1's death; calls %v", c.servers.callsSince(n))
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	c.servers.mu.Lock()
	lists := c.servers.lists
	c.servers.mu.Unlock()
	// Rounds go on: a few Ticks of fake time see several of them, within
	// the callWait of the round that sent the stalled call and a moment —
	// no more calls go to s2 while it has not answered — not rpcTimeout.
	start = time.Now()
	for {
		c.servers.mu.Lock()
		more := c.servers.lists - lists
		c.servers.mu.Unlock()
		if more >= 3*3 { // three rounds, three servers asked each
			break
		}
		if time.Since(start) > callWait(testTick)+2*time.Second {
			t.Fatalf("%d Lists in %v while a call to s2 hangs: the rounds wait for it", more, time.Since(start))
		}
		c.clock.Advance(testTick)
		time.Sleep(5 * time.Millisecond)
	}
	// Only one load of each tablet is under way: nothing was planned over
	// the stalled ones.
	c.check()
	loads := map[string]int{}
	for _, call := range c.servers.callsSince(n) {
		if f := strings.Fields(call); f[0] == "load" {
			loads[f[1]]++
		}
	}
	for id, k := range loads {
		if k > 1 {
			t.Fatalf("tablet %s loaded %d times while its first load hung; calls %v", id, k, c.servers.callsSince(n))
		}
	}
}

// A server whose session carries a lease of its own shorter than the TTL
// (coord.SessionOptions.Lease, a tablet server's ServerLease) has its
// tablets moved coord.FenceWait of that lease after the master ended its
// session: not before (it may still serve until then), and not a TTL
// later.
func TestLoopFencesUnreachableServerForItsOwnLease(t *testing.T) {
	const lease = 6 * time.Second // FenceWait 6.6 s, past testLockDelay
	c := newCluster(t, "s1", "s3")
	sess, err := c.svc.NewSession(context.Background(), coord.SessionOptions{Name: "s2", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryLock(context.Background(), coord.ServerKey("s2"), []byte("s2:7000")); err != nil {
		t.Fatal(err)
	}
	c.sessions["s2"] = sess
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	held := 0
	for _, ss := range c.servers.where() {
		if slices.Contains(ss, "s2") {
			held++
		}
	}
	if held == 0 {
		t.Fatal("s2 serves nothing: the test needs it to hold tablets")
	}
	n := c.servers.ncalls()
	c.servers.kill("s2")
	for !isDone(sess) {
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	ended := c.clock.Now()
	for c.clock.Now().Sub(ended) < coord.FenceWait(lease) {
		if calls := c.servers.callsSince(n); len(calls) > 0 {
			t.Fatalf("calls %v after %v, within FenceWait(%v) = %v of ending s2's session", calls, c.clock.Now().Sub(ended), lease, coord.FenceWait(lease))
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	for !c.allServed() {
		// A few rounds after the fence wait; the TTL's would be 11 s.
		if c.clock.Now().Sub(ended) > coord.FenceWait(lease)+3*testTick {
			t.Fatalf("s2's tablets not moved %v after its session ended: the master waited for the TTL, not the server's lease", c.clock.Now().Sub(ended))
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
}

// A server restarted on its address that proved its predecessor exited
// (coord.ServerRecord's Succeeds) has the predecessor's tablets recovered
// at once: no wait for the predecessor's lease, its session's TTL or the
// lock-delay. A claim about another server changes nothing for it.
func TestLoopRecoversServerItsSuccessorSaysExited(t *testing.T) {
	const lease = 6 * time.Second // FenceWait 6.6 s
	ctx := context.Background()
	c := newCluster(t, "s1", "s3")
	sess, err := c.svc.NewSession(ctx, coord.SessionOptions{Name: "s2", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryLock(ctx, coord.ServerKey("s2"), []byte("s2:7000")); err != nil {
		t.Fatal(err)
	}
	c.sessions["s2"] = sess
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	held := c.servers.tabletsOn("s2")
	if len(held) == 0 {
		t.Fatal("s2 serves nothing: the test needs it to hold tablets")
	}
	c.servers.kill("s2") // the process is gone; its session lives on
	c.servers.kill("s3") // so is s3's, and nobody claims it
	succeed := func(name, prev string) {
		ss, err := c.svc.NewSession(ctx, coord.SessionOptions{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ss.TryLock(ctx, coord.ServerKey(name), coord.ServerRecord{Addr: "s2:7000", Succeeds: prev}.Encode()); err != nil {
			t.Fatal(err)
		}
		c.sessions[name] = ss
	}
	succeed("s2b", "s2")
	succeed("s9", "s-unknown")
	start := c.clock.Now()
	c.waitFor("s2 declared dead", 100*time.Millisecond, func() bool {
		_, err := c.svc.Get(ctx, coord.ServerKey("s2"))
		return errors.Is(err, coord.ErrNotFound)
	})
	if took := c.clock.Now().Sub(start); took >= 2*testTick {
		t.Fatalf("s2 declared dead %v after its successor claimed it: want within a round or two", took)
	}
	if !isDone(sess) {
		t.Fatal("s2's session still lives after it was declared dead")
	}
	if isDone(c.sessions["s3"]) {
		t.Fatal("s3's session ended at once: only a successor's claim may skip the wait")
	}
	if _, err := c.svc.Get(ctx, coord.ServerKey("s3")); err != nil {
		t.Fatalf("s3's key: %v, want it still there", err)
	}
	c.waitFor("s2's tablets served again", 100*time.Millisecond, func() bool {
		w := c.servers.where()
		for _, id := range held {
			if len(w[id]) != 1 {
				return false
			}
		}
		return true
	})
	if took := c.clock.Now().Sub(start); took >= testLockDelay {
		t.Fatalf("s2's tablets served again %v after its successor claimed it: the master waited", took)
	}
}

// A master elected moments ago moves no tablet to balance the servers for
// LoopOptions.BalanceAfter (a master that stops between a move's unload and
// its load leaves the tablet unserved), then does.
func TestLoopBalancesOnlyAfterBalanceAfter(t *testing.T) {
	c := newCluster(t, "s1")
	stop := c.startMaster("m1")
	c.waitFor("every tablet served on s1", testTick, c.allServed)
	stop()
	c.join("s2") // empty: the balance would move tablets to it
	n := c.servers.ncalls()
	c.startMaster("m2")
	c.waitFor("m2 elected", 50*time.Millisecond, func() bool { return c.masterName() == "m2" })
	elected := c.clock.Now()
	const balanceAfter = 5 * testTick // the default
	for c.clock.Now().Sub(elected) < balanceAfter-testTick {
		for _, call := range c.servers.callsSince(n) {
			if strings.HasPrefix(call, "unload ") {
				t.Fatalf("%s %v after the election: want no move before %v", call, c.clock.Now().Sub(elected), balanceAfter)
			}
		}
		c.clock.Advance(100 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	c.waitFor("a tablet moved to s2", 100*time.Millisecond, func() bool { return len(c.servers.tabletsOn("s2")) > 0 })
}

// A master that reaches no server at all ends nobody's session: it is more
// likely cut off itself.
func TestLoopEndsNoSessionWhenNoServerAnswers(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	c.servers.kill("s1")
	c.servers.kill("s2")
	for range 120 {
		c.clock.Advance(500 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	for _, s := range []string{"s1", "s2"} {
		if isDone(c.sessions[s]) {
			t.Fatalf("%s's session was ended while no server answered", s)
		}
	}
}

// A new master that finds a server's key released does not take it for a
// server TTL: its predecessor may have just ended the session.
func TestLoopWaitsOutReleasedKeyAtStart(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	stop := c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	stop()
	c.servers.kill("s2")
	if _, err := c.svc.EndSession(context.Background(), c.sessions["s2"].ID()); err != nil {
		t.Fatal(err)
	}
	start := c.clock.Now()
	c.startMaster("m2")
	n := c.servers.ncalls()
	for c.clock.Now().Sub(start) < 10*time.Second {
		if calls := c.servers.callsSince(n); len(calls) > 0 {
			t.Fatalf("calls %v %v after the new master started, within the server TTL", calls, c.clock.Now().Sub(start))
		}
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	c.waitFor("s2's tablets served elsewhere", testTick, c.allServed)
}

// A round's loads go out in parallel.
func TestLoopLoadsInParallel(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	c.servers.loadDelay = 100 * time.Millisecond
	c.startMaster("m1")
	c.waitFor("all tablets served", 0, c.allServed)
	c.servers.mu.Lock()
	most := c.servers.maxLoading
	c.servers.mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d loads under way at once; want the six user tablets loaded in parallel", most)
	}
}

// When many of a dead server's tablets wait, its log is sorted first and
// they load from the sorted log; if sorting fails, from the unsorted one.
func TestLoopSortsDeadServersLog(t *testing.T) {
	for _, sortFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("sortFails=%v", sortFails), func(t *testing.T) {
			c := newCluster(t, "s1", "s2")
			if !sortFails {
				c.servers.sortErr = nil
			}
			c.startMaster("m1", func(o *LoopOptions) { o.Plan.SortLogMin = 2 })
			c.waitFor("all tablets served", 0, c.allServed)
			var lost []string
			for id, ss := range c.servers.where() {
				if ss[0] == "s2" && strings.HasPrefix(string(id), "u") {
					lost = append(lost, string(id))
				}
			}
			if len(lost) < 2 {
				t.Fatalf("s2 serves user tablets %v; the test needs at least 2", lost)
			}
			n := c.servers.ncalls()
			c.kill("s2")
			c.waitFor("s2's tablets served elsewhere", testTick, c.allServed)
			calls := c.servers.callsSince(n)
			sorts := 0
			for _, call := range calls {
				if call == "sortlog s2 [s1]" {
					sorts++
				} else if strings.HasPrefix(call, "load u") && sorts == 0 {
					t.Fatalf("calls after s2 died = %v: a user tablet loaded before the sort", calls)
				}
			}
			if sorts != 1 {
				t.Fatalf("calls after s2 died = %v, want one sort of its log on s1", calls)
			}
			c.servers.mu.Lock()
			sorted := slices.Sorted(slices.Values(c.servers.sortedLoads))
			c.servers.mu.Unlock()
			slices.Sort(lost)
			want := lost
			if sortFails {
				want = nil
			}
			// Root and METADATA tablets never wait for a sort.
			sorted = slices.DeleteFunc(sorted, func(id string) bool { return !strings.HasPrefix(id, "u") })
			if !slices.Equal(sorted, want) {
				t.Fatalf("loads from the sorted log %v, want %v", sorted, want)
			}
		})
	}
}

func isDone(s coord.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// The repairs of a predecessor's unfinished work (LoopOptions.Repair) read
// and write METADATA, which a failed server may hold. Their tries after
// the first run beside the rounds: a try waiting its whole RPCTimeout
// (here longer than the test) held up the rounds that detect the failure
// and reassign the tablets — first after every round, then, when a try
// was cut to a quarter Tick during a recovery, still when it began just
// before the failure was seen (this test failed 1 run in 15 so).
func TestLoopRepairYieldsToRecovery(t *testing.T) {
	var stuck atomic.Bool
	var stuckTries atomic.Int64
	c := newCluster(t, "s1", "s2", "s3")
	c.startMaster("m1", func(o *LoopOptions) {
		o.RPCTimeout = time.Minute
		o.Repair = func(ctx context.Context) error {
			if !stuck.Load() {
				return errors.New("fake: not yet") // tried again after every round
			}
			stuckTries.Add(1)
			<-ctx.Done() // METADATA unreadable: the try waits its timeout
			return ctx.Err()
		}
	})
	c.waitFor("all tablets served", 0, c.allServed)
	stuck.Store(true)
	c.servers.kill("s2") // no Expire: the master ends its session
	start := time.Now()
	for !c.allServed() {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("s2's tablets not served elsewhere after %v: the repairs held up the rounds", time.Since(start))
		}
		c.check()
		c.clock.Advance(250 * time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("%d tries of the repairs during the recovery", stuckTries.Load())
}

// deadRecordingMeta is fakeMeta as a WholeReader that remembers which
// of servers any read's dead reported dead.
type deadRecordingMeta struct {
	*fakeMeta
	servers []string
	mu      sync.Mutex
	said    map[string]bool
}

func (m *deadRecordingMeta) TabletsWhole(ctx context.Context, dead func(string) bool) ([]assign.Tablet, bool, error) {
	m.mu.Lock()
	for _, s := range m.servers {
		if dead(s) {
			m.said[s] = true
		}
	}
	m.mu.Unlock()
	ts, err := m.fakeMeta.Tablets(ctx)
	return ts, true, err
}

func (m *deadRecordingMeta) saidDead() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.said)
}

// TestLoopTellsMetadataWhichServersAreDead: the rounds' METADATA reads
// learn which servers the master declared dead — whose METADATA tablets
// they need not wait for — and only those.
func TestLoopTellsMetadataWhichServersAreDead(t *testing.T) {
	c := newCluster(t, "s1", "s2")
	md := &deadRecordingMeta{fakeMeta: c.meta, servers: []string{"s1", "s2"}, said: map[string]bool{}}
	c.startMaster("m1", func(o *LoopOptions) { o.Metadata = md })
	c.waitFor("all tablets served", 0, c.allServed)
	if said := md.saidDead(); len(said) > 0 {
		t.Fatalf("reads were told %v is dead with both servers alive", said)
	}
	c.servers.kill("s2")
	if _, err := c.svc.EndSession(context.Background(), c.sessions["s2"].ID()); err != nil {
		t.Fatal(err)
	}
	c.waitFor("s2's tablets served again", 100*time.Millisecond, func() bool {
		for _, ss := range c.servers.where() {
			if slices.Contains(ss, "s2") {
				return false
			}
		}
		return c.allServed()
	})
	if said := md.saidDead(); !said["s2"] || said["s1"] {
		t.Fatalf("reads were told %v is dead; want s2 only", said)
	}
}
