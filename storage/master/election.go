package master

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// TabletServers is what the master's assignment loop asks of tablet servers
// (implemented over gRPC in the cluster, by fakes in tests). Server names
// are assign.ServerIDs: the part of a server's key under servers/ after the
// prefix (coord.ServerID); an implementation finds a server's address in
// its key's value.
type TabletServers interface {
	// List returns the tablets server serves, including every tablet it is
	// loading from the moment it accepted the Load request and every tablet
	// it is still unloading. The master relies on this: a tablet a live
	// server does not report is one the master may assign elsewhere (a
	// master that took over has no record of its predecessor's requests).
	// An error wrapping ErrServerGone says the server certainly does not
	// run (see LoopOptions.GoneAfter).
	List(ctx context.Context, server string) ([]assign.Served, error)
	// Load asks server to load t, recovering its writes after the redo
	// point as rec says. An error does not mean the server will not load t
	// (the request may have reached it): the master treats the load as
	// still in flight.
	Load(ctx context.Context, server string, t assign.Tablet, rec RecoverySource) error
	// Unload asks server to compact and unload tabletID.
	Unload(ctx context.Context, server, tabletID string) error
	// SortLog sorts dead's commit log by (tablet, sequence), sharing the
	// work out among sorters (live servers), and returns once the sorted
	// copy is complete and durable: from then on a Load with
	// RecoverySource.Sorted reads only its own tablet's records from it. Sorting
	// again (after a master failover, say) rewrites the same copy.
	SortLog(ctx context.Context, dead string, sorters []string) error
}

// RecoverySource names where a loading tablet's writes after its redo
// point are: in the commit log of From, its last owner (a dead server), or
// nowhere when From is empty. Sorted says From's log has been sorted
// (SortLog). The tablet server resolves it to the log's objects
// (tabletserver.ReplayLog).
type RecoverySource struct {
	From   string
	Sorted bool
}

// Metadata is the master's access to METADATA (served from the METADATA
// table in the cluster).
type Metadata interface {
	// Tablets returns every tablet METADATA holds, root included, with
	// LastServer set to the server recorded by SetLocation.
	Tablets(ctx context.Context) ([]assign.Tablet, error)
	// SetLocation records that server (an assign.ServerID) serves
	// tabletID under epoch. Epochs a master passes only ever grow, across
	// masters too.
	SetLocation(ctx context.Context, tabletID, server string, epoch uint64) error
}

// WholeReader is implemented by a Metadata that can tell whether a read
// covered every METADATA tablet (storage/cluster's does). Without it no
// tablet is ever taken for an orphan (LoopOptions.OrphanAfter).
type WholeReader interface {
	// TabletsWhole is Tablets, also saying whether every METADATA tablet
	// was read (none moving, none at a dead server). It need not read the
	// METADATA tablets placed at servers for which dead (never nil) is
	// true — the master declared them dead, so they serve nothing — and
	// then reports whole false.
	TabletsWhole(ctx context.Context, dead func(server string) bool) (tablets []assign.Tablet, whole bool, err error)
}

// ErrServerGone is what a TabletServers.List error wraps when the server
// certainly does not run any more: its address refuses connections, or
// another server answers there. Such a server's session is ended sooner
// (LoopOptions.GoneAfter) than that of one merely not answering.
var ErrServerGone = errors.New("master: the tablet server is gone")

// KeyEpoch is the coord key holding the next unused assignment epoch (8
// bytes big-endian). Masters reserve blocks of epochs from it with a
// compare-and-set, so no two masters, and no master after a failover, ever
// hand out the same epoch.
const KeyEpoch = "epoch"

// LoopOptions configure a Loop. Coord, Servers and Metadata are
// required; zero values of the rest take defaults.
type LoopOptions struct {
	Coord    coord.Service
	Servers  TabletServers
	Metadata Metadata
	// Name is the master lock's value: the master's address, for clients
	// and standbys.
	Name string
	// Clock measures the age of requests in flight and drives the periodic
	// round; default coord.RealClock. Tests share a coord.FakeClock with
	// coord.NewLocal.
	Clock coord.Clock
	// Tick is the period of rounds when nothing happens (timeouts, lock
	// delays ending). Default 1s.
	Tick time.Duration
	// Plan tunes the planner. Its merges of small neighbours are off unless
	// AutoMerge is set; merges asked for (RequestMerge) are always carried
	// out. Merges need a Metadata that is a TabletMerger.
	Plan assign.Config
	// Lease is the active master's own lease (takeover.go): it acts only
	// until Lease after the last successful renewal of its session was
	// sent, renewing every Lease/3. 0: the session's TTL (no shorter
	// lease). NewLoop raises Session.LockDelay to at least Lease plus a
	// tenth, which is what lets a standby end an unresponsive master's
	// session safely.
	Lease time.Duration
	// ProbeMaster checks that the active master at addr (the master lock's
	// value) answers and still leads. With it, a standby ends the active
	// master's session once the probe has failed for TakeoverAfter over at
	// least three probes, rather than wait for the lock service to expire
	// it. A process at addr that answers as a standby must fail the probe:
	// the session holding the lock is then one nobody acts on (a master
	// that stood down and could not destroy it, or one killed and
	// restarted on the same address).
	ProbeMaster func(ctx context.Context, addr string) error
	// TakeoverAfter: see ProbeMaster. Default 2s; negative turns the
	// takeover off.
	TakeoverAfter time.Duration
	// Repair, if set, is called at the start of every term (each time this
	// master becomes the active one), after each round until it returns
	// nil once: the repairs of work a predecessor's crash cut short that
	// need METADATA served (a RestoreTable killed between its catalog
	// entry and its last METADATA row, storage/cluster's repairTables).
	// Its errors are logged; it runs in the loop's goroutine, so it must
	// be quick when there is nothing to repair.
	Repair func(ctx context.Context) error
	// AutoMerge lets the planner merge adjacent tablets both smaller than
	// Plan.MergeBelow (see merge.go).
	AutoMerge bool
	// Session configures the master's coord session.
	Session coord.SessionOptions
	// EpochBlock is how many epochs are reserved per compare-and-set.
	// Default 1000.
	EpochBlock uint64
	// OrphanAfter is how long a tablet a server serves may lack from
	// METADATA, read whole every round, before the master unloads it from
	// that server: a deleted table's tablet the deletion's unloads did not
	// reach (its server unreachable then, or a split or load under way
	// there), which would otherwise be served for ever and keep a table
	// created again under the name from being served. A split's children
	// lack from METADATA only until its server commits it or the master
	// repairs it, a few rounds. Default 20s — well inside the minute a
	// CreateTable waits for its tablets to be served, which a deleted
	// table's tablet left over blocks when the table is created again
	// under the name; negative: never.
	OrphanAfter time.Duration
	// BalanceAfter is how long a newly elected master waits before it
	// moves tablets to balance the servers. A move is an unload, then a
	// load: a master that stops between the two leaves the tablet unserved
	// until its successor takes over, and a master elected moments ago is
	// the likeliest to (a flapping host; in the fault campaign a master
	// paused 0.1 s after its election had just unloaded three tablets, 7 s
	// unserved). Recovery, drains and merges are not held.
	// Default 5 Ticks; negative: none.
	BalanceAfter time.Duration
	// RPCTimeout bounds each call to a tablet server or METADATA. Default
	// 10s.
	RPCTimeout time.Duration
	// ListTimeout bounds the List call that asks a server what it serves,
	// made of every server every round, in parallel. Default 2s: a live
	// server answers from memory.
	ListTimeout time.Duration
	// UnreachableAfter is how long, and over at least three rounds, a
	// server must leave its Lists unanswered — counted from the sending
	// of the first that failed; after that one a failing server's List
	// is given Tick/2 (at least 250 ms), not ListTimeout — before the
	// master ends the server's
	// session (coord.Service.EndSession; the paper's master deletes the
	// server's file when it cannot reach the server "during its last
	// several attempts") rather than wait for the lock service to expire
	// it. Default 3s (three rounds of the default 1s tick); negative
	// turns it off. The master does so only while some other server
	// answers, so a master cut off from the servers does not end them all.
	UnreachableAfter time.Duration
	// GoneAfter replaces UnreachableAfter for a server whose List has
	// failed with ErrServerGone every time (nothing listens at its
	// address: a killed process), at least three times: default 1s. While
	// a server's List fails, rounds come every Tick/4. A wrong verdict
	// costs a reassignment, never safety: the server's own lease fences
	// it. Negative: as UnreachableAfter.
	GoneAfter time.Duration
	// ServerTTL is the longest session TTL of any tablet server: a term
	// that starts and finds a server's key released (by a predecessor's
	// EndSession, perhaps, whose wait it cannot know) waits that long
	// before taking the key. Default: the master's own session TTL.
	ServerTTL time.Duration
	// LoadParallelism bounds the Load and Unload requests the master has
	// outstanding at once, those a round stopped waiting for included.
	// Default 8.
	LoadParallelism int
	// SortTimeout bounds one SortLog call. Default 5m.
	SortTimeout time.Duration
	Logger      *slog.Logger
}

// Loop is the master's election and assignment loop: election through
// coord.KeyMaster, then the paper's §5.2 startup scan and the rounds that
// assign tablets. Create it with NewLoop and call Run.
//
// Once elected, a Loop watches servers/ (a key locked by its own
// session is a live server, its value the server's address), asks every
// live server what it serves, reads METADATA, and each round hands that
// State to assign.Plan and carries out the actions. A round runs at start,
// on every change under servers/, every Tick, and at once after a round
// that sent requests. The safety rules it adds to the planner's:
//
//   - A server is declared dead only once the master holds its lock
//     (TryLockExisting, which waits out the lock-delay) and has deleted its
//     key; only then are its tablets reassigned, recovering from its log.
//     The lock comes free when the lock service expires the server's
//     session, or sooner when the master ends it (EndSession) after the
//     server failed to answer List for UnreachableAfter; the master then
//     waits the server's own lease (the one EndSession reports: a tablet
//     server's ServerLease, or its session TTL without one) plus a tenth
//     before taking the key, as the server may believe its lease valid
//     that long (see fenceUnreachable). A term that starts
//     with a server's key already released waits the same, not knowing
//     when its predecessor ended it.
//   - Lists go to all servers at once; Loads and Unloads go out in
//     parallel; a dead server's log is sorted (SortLog) in the background
//     while its user tablets wait.
//     Until then a server whose key is released keeps its tablets (its last
//     report, and METADATA's location for any it never reported) and is
//     sent nothing.
//   - Every Load and Unload is recorded in flight before it is sent and
//     stays so if the call fails (the server may act on it anyway); the
//     planner resends it to the same server after Plan's LoadTimeout —
//     a failed Load or Unload sooner, backing off from 1s (callRetry).
//   - A server whose List fails is taken at its last report; without one
//     the round is skipped rather than planned on a picture where its
//     tablets look unserved.
//   - No request is sent once the session may have lapsed or the lock is
//     lost; the term ends and Run campaigns again.
//   - Each completed load is recorded in METADATA with a fresh epoch
//     (see KeyEpoch), after the load, so that METADATA's location stays the
//     server whose log to recover from if the load never happened.
type Loop struct {
	opts LoopOptions

	// poke asks the running term for a round now.
	poke chan struct{}

	mu     sync.Mutex
	splits []assign.Split // reported, not yet seen in METADATA
	// splitsGone counts, by parent, the METADATA reads that found a
	// reported split's parent gone and a child missing (pendingSplits).
	splitsGone map[assign.TabletID]int
	mergeReqs  []*mergeRequest
	// leading is set while this Loop holds the master lock; observed
	// is the State of its last round (for status pages).
	leading  bool
	since    time.Time
	observed assign.State
}

// Leading reports whether the Loop holds the master lock now, and
// since when.
func (c *Loop) Leading() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading, c.since
}

// Poke asks the running term, if any, for a round now rather than at the
// next Tick: `tabula dev`'s admin API calls it once a new table's tablets
// are in METADATA, so that they are assigned at once.
func (c *Loop) Poke() { c.wake() }

// Observed returns the State the last round planned on (zero before the
// first round of a term). The caller must not modify it.
func (c *Loop) Observed() assign.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.observed
}

func (c *Loop) setLeading(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leading = on
	c.since = c.opts.Clock.Now()
	if !on {
		c.observed = assign.State{}
	}
}

// NewLoop checks opts and returns a Loop.
func NewLoop(opts LoopOptions) (*Loop, error) {
	if opts.Coord == nil || opts.Servers == nil || opts.Metadata == nil {
		return nil, errors.New("master: LoopOptions needs Coord, Servers and Metadata")
	}
	if opts.Clock == nil {
		opts.Clock = coord.RealClock{}
	}
	if opts.Tick <= 0 {
		opts.Tick = time.Second
	}
	if opts.EpochBlock == 0 {
		opts.EpochBlock = 1000
	}
	if opts.RPCTimeout <= 0 {
		opts.RPCTimeout = 10 * time.Second
	}
	if opts.ListTimeout <= 0 {
		opts.ListTimeout = 2 * time.Second
	}
	if opts.OrphanAfter == 0 {
		opts.OrphanAfter = 20 * time.Second
	}
	if opts.BalanceAfter == 0 {
		opts.BalanceAfter = 5 * opts.Tick
	}
	if opts.UnreachableAfter == 0 {
		opts.UnreachableAfter = 3 * time.Second
	}
	switch {
	case opts.GoneAfter == 0:
		opts.GoneAfter = time.Second
	case opts.GoneAfter < 0:
		opts.GoneAfter = opts.UnreachableAfter
	}
	if opts.LoadParallelism <= 0 {
		opts.LoadParallelism = 8
	}
	if opts.SortTimeout <= 0 {
		opts.SortTimeout = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Session.Name == "" {
		opts.Session.Name = "master"
	}
	if !opts.AutoMerge {
		opts.Plan.NoMerge = true
	}
	if opts.TakeoverAfter == 0 {
		opts.TakeoverAfter = defaultTakeoverAfter
	}
	if opts.Lease > 0 {
		if floor := opts.Lease + opts.Lease/10; opts.Session.LockDelay < floor {
			opts.Session.LockDelay = floor
		}
	}
	return &Loop{opts: opts, poke: make(chan struct{}, 1), splitsGone: make(map[assign.TabletID]int)}, nil
}

// ReportSplit records a split a tablet server reports having committed to
// METADATA. The planner holds the parent back and rereads METADATA until
// it shows the children. Safe for concurrent use.
func (c *Loop) ReportSplit(s assign.Split) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.splits = append(c.splits, s)
}

// Run campaigns for the master lock and, while it holds it, runs the
// assignment loop. A standby blocks in coord's Lock; an active master whose
// session lapses or whose lock is lost stops acting at once (no request is
// sent after it notices) and campaigns again with a new session. Run
// returns ctx's error when ctx is done, or the service's error if it is
// closed.
func (c *Loop) Run(ctx context.Context) error {
	log := c.opts.Logger
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		sess, err := c.opts.Coord.NewSession(ctx, c.opts.Session)
		if err != nil {
			if errors.Is(err, coord.ErrClosed) || ctx.Err() != nil {
				return cmpErr(ctx, err)
			}
			log.Warn("master: new session", "err", err)
			c.pause(ctx)
			continue
		}
		wctx, stopWatch := context.WithCancel(ctx)
		go c.watchActive(wctx, sess.ID())
		lock, err := sess.Lock(ctx, coord.KeyMaster, []byte(c.opts.Name))
		stopWatch()
		if err != nil {
			destroy(sess)
			if errors.Is(err, coord.ErrClosed) || ctx.Err() != nil {
				return cmpErr(ctx, err)
			}
			// The session lapsed while waiting (or a transport error):
			// campaign again with a fresh one.
			log.Warn("master: campaign", "err", err)
			continue
		}
		log.Info("master: elected", "session", sess.ID())
		c.setLeading(true)
		err = c.lead(ctx, sess, lock)
		c.setLeading(false)
		log.Info("master: stepped down", "err", err)
		// Destroy, not Release: the lock-delay then keeps a successor out
		// for a moment in case a request of ours is still on its way.
		destroy(sess)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, coord.ErrClosed) {
			return err
		}
	}
}

func cmpErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func destroy(s coord.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Destroy(ctx)
}

// pause waits a tick (on the control's clock) or until ctx is done, so a
// failing service is not hammered.
func (c *Loop) pause(ctx context.Context) {
	ch := make(chan struct{})
	stop := c.opts.Clock.AfterFunc(c.opts.Tick, func() { close(ch) })
	defer stop()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// epochs hands out assignment epochs from blocks reserved in coord.
type epochs struct {
	kv    coord.KV
	block uint64

	mu          sync.Mutex
	next, limit uint64 // [next, limit) reserved and unused
}

// take returns a fresh epoch, reserving a new block when the current one is
// used up. The counter only grows, so an epoch is never handed out twice.
// It is safe for concurrent use (loads complete in parallel).
func (e *epochs) take(ctx context.Context) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.next >= e.limit {
		var cur, index uint64
		ent, err := e.kv.Get(ctx, KeyEpoch)
		switch {
		case errors.Is(err, coord.ErrNotFound):
			cur, index = 1, 0 // epoch 0 means "never assigned"
		case err != nil:
			return 0, err
		case len(ent.Value) != 8:
			return 0, fmt.Errorf("master: corrupt %s key: %d bytes", KeyEpoch, len(ent.Value))
		default:
			cur, index = binary.BigEndian.Uint64(ent.Value), ent.ModifyIndex
		}
		err = e.kv.CAS(ctx, KeyEpoch, binary.BigEndian.AppendUint64(nil, cur+e.block), index)
		if errors.Is(err, coord.ErrConflict) {
			continue // another master reserved meanwhile: read again
		}
		if err != nil {
			return 0, err
		}
		e.next, e.limit = cur, cur+e.block
	}
	e.next++
	return e.next - 1, nil
}
