// Package tabletserver serves tablets: the Host holds the open tablets of
// one server (routing rows to tablets, splitting tablets that grow past a
// size, truncating the commit log), and DataService answers Cloud
// Bigtable's google.bigtable.v2.Bigtable API over them with Cloud
// Bigtable's semantics, so that the official client libraries work
// unmodified.
//
// The admin API (storage/master) drives a Host through the methods
// OpenTable, DropTable, UpdateSchema, DropRowRange and TableTablets.
//
// Decisions a reader should know:
//
//   - Routing is an immutable, ordered list of a table's tablets, replaced
//     whole when a tablet splits. A request that meets a tablet that
//     stopped serving (split, close) looks the row up again, a few times
//     with backoff, so clients never see a split; only when that fails
//     does it answer FAILED_PRECONDITION.
//   - Tablets split in the background when their own bytes pass
//     HostOptions.SplitBytes. A split child shares its parent's SSTables,
//     so its Stats overstate it; its own size comes from its key samples.
//   - In a MILLIS table the tablets' clock is truncated to milliseconds,
//     so server-assigned timestamps are whole milliseconds, and client
//     timestamps that are not are refused (INVALID_ARGUMENT).
//   - ReadRows sends a response only at a row boundary: the Go client
//     (v1.58) requires that no row span two responses. Large cells are
//     still split into ChunkBytes pieces inside the response.
//   - With HostOptions.Lease (the server's lock-service session), a write
//     is applied only while the lease is valid and acknowledged only if it
//     is still valid once the write is durable (lease.go); reads are
//     served regardless. Tablet states are saved only while it is valid,
//     so that a server whose lease lapsed cannot overwrite the state of a
//     tablet the master may have given to another server. Without one
//     (tabula dev) nothing is checked.
//
// Cluster mode (HostOptions.Partial): the master assigns individual
// tablets, which the cluster's tablet server loads and unloads through
// LoadTablet and UnloadTablet (host_tablets.go) instead of OpenTable and
// DropTable, so a table's routing may have gaps. A row in a gap answers
// tabletdesc.NotServingError at once — no retry: the row is served elsewhere
// and only the client's location cache can find it — and a scan answers it
// at the first row of the range no local tablet covers, after the rows
// before it, never silently skipping rows. The retries for a tablet that
// stopped serving (split, close) remain. A split is reported through
// HostOptions.OnSplit, retried in the background until it is accepted, so
// that the master and METADATA learn of it; METADATA's tablets never split.
// ServedTablets answers the master's question of what this server holds,
// including tablets being loaded and unloaded.
package tabletserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Defaults of HostOptions.
const (
	DefaultSplitBytes          = 256 << 20
	DefaultSplitCheckInterval  = 2 * time.Second
	DefaultLogTruncateInterval = time.Minute
)

// HostOptions configure NewHost. Zero values take the documented defaults.
type HostOptions struct {
	// Store holds SSTables and tablet states. Required.
	Store blob.Store
	// Log is the server's commit log; nil means none (writes are durable
	// only once flushed). LogOptions name the log tablets replay at Open.
	Log        *commitlog.Log
	LogOptions commitlog.Options
	// Cache and ScanCache are shared by all tablets; nil means none.
	Cache     *sstable.Cache
	ScanCache *tablet.ScanCache
	// StateStore persists tablet states; default a blob state store in
	// Store under "state".
	StateStore tablet.StateStore
	// Limits validate writes; zero means cell.DefaultLimits().
	Limits cell.Limits
	// MemtableBytes is each tablet's minor compaction threshold (the
	// tablet's default when zero).
	MemtableBytes int64
	// SplitBytes: a tablet whose stored size (SSTables plus memtables)
	// passes it is split in the background; default 256 MiB.
	SplitBytes int64
	// SplitCheckInterval is how often the background loop looks at tablet
	// sizes even when no write asked it to; default 2 s.
	SplitCheckInterval time.Duration
	// LogTruncateInterval is how often the commit log is truncated to the
	// oldest redo point of the open tablets; default 1 min. Tablets that
	// still need older records (those of a crashed run) must be opened
	// before the first truncation: tabula dev opens every table at start.
	LogTruncateInterval time.Duration
	// Logger receives events and background errors; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the Host's and the DataService's metrics; nil
	// means they are not registered (they are still counted).
	Registerer prometheus.Registerer
	// Clock returns the time in microseconds; default the system clock.
	// Tests set it to control server-assigned timestamps.
	Clock func() int64
	// Lease is the tablet server's lock-service lease (its coord.Session);
	// nil means none (one-process mode, tabula dev), and every write is
	// served. With a lease, every write is checked twice: before it is
	// applied — refused with UNAVAILABLE and nothing changed when the
	// lease is not valid — and again after the commit log made it durable,
	// before it is acknowledged — UNAVAILABLE when the lease lapsed
	// meanwhile. The second case is the usual unknown outcome of a write
	// that timed out: the write may be durable and served by the tablet's
	// next server, and a client retry is idempotent for SetCell with
	// explicit timestamps (and for deletes), not for server timestamps,
	// appends or increments. Reads are served regardless: the role closes
	// the Host (Close) when its lock key is gone. See ErrLeaseLapsed.
	// Tablet states (StateStore.Save) are saved only while the lease is
	// valid too (see fenceStateStore).
	Lease Lease
	// Partial is cluster mode: the Host serves only the tablets loaded
	// with LoadTablet, so a table's routing may have gaps, and a request
	// for a row in a gap answers tabletdesc.NotServingError at once. False
	// (tabula dev): OpenTable serves whole tables.
	Partial bool
	// OnSplit, when set, is called after the Host split a tablet (the
	// background splitter or SplitTablet), once the children serve, with
	// the children in order. The cluster commits the split to METADATA and
	// reports it to the master. An error is retried in the background
	// (backoff from 100 ms doubling to 5 s) until it returns nil or the
	// Host closes; serving never waits for it. It must be idempotent.
	OnSplit func(ctx context.Context, table meta.TableID, parent string, children []TabletInfo) error
}

func (o *HostOptions) setDefaults() {
	if o.StateStore == nil {
		o.StateStore = tablet.NewBlobStateStore(o.Store, "state")
	}
	if o.Limits == (cell.Limits{}) {
		o.Limits = cell.DefaultLimits()
	}
	if o.SplitBytes <= 0 {
		o.SplitBytes = DefaultSplitBytes
	}
	if o.SplitCheckInterval <= 0 {
		o.SplitCheckInterval = DefaultSplitCheckInterval
	}
	if o.LogTruncateInterval <= 0 {
		o.LogTruncateInterval = DefaultLogTruncateInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = func() int64 { return time.Now().UnixMicro() }
	}
}

// TabletInfo describes one open tablet of a table.
type TabletInfo struct {
	ID string
	// Start and End bound the tablet's rows to [Start, End); nil End is
	// the end of the table.
	Start, End []byte
	// Bytes estimates the size of the tablet's own rows (SSTable blocks in
	// its range plus memtables); Stats count whole SSTables, also those
	// shared with a split sibling.
	Bytes int64
	Stats tablet.Stats
}

// ErrTableNotFound is returned (wrapped) for a table that is not open on
// this host.
var ErrTableNotFound = errors.New("table not found")

// servedTable is one open table: its catalog entry and its tablets.
type servedTable struct {
	// mu serialises changes of the tablet list and the schema; readers
	// use the atomic pointers and never wait for a split.
	mu      sync.Mutex
	meta    atomic.Pointer[meta.Table]
	routes  atomic.Pointer[routing]
	dropped bool // under mu
	// gone is set (under mu) when UnloadTablet removed the table's last
	// tablet: the entry is being removed from Host.tables, and a tablet
	// loaded meanwhile goes into a fresh entry.
	gone atomic.Bool
}

// routing is an immutable list of a table's tablets, ordered by range and
// covering all rows (in Partial mode: not overlapping, with gaps), with
// their ranges copied once so that lookups do not allocate. A split,
// load or unload replaces the whole routing.
type routing struct {
	tabs   []*tablet.Tablet
	ranges []tabletdesc.KeyRange // ranges[i] is tabs[i].Range()
}

func newRouting(tabs []*tablet.Tablet) *routing {
	r := &routing{tabs: tabs, ranges: make([]tabletdesc.KeyRange, len(tabs))}
	for i, tb := range tabs {
		r.ranges[i] = tb.Range()
	}
	return r
}

func (st *servedTable) list() []*tablet.Tablet    { return st.routes.Load().tabs }
func (st *servedTable) set(tabs []*tablet.Tablet) { st.routes.Store(newRouting(tabs)) }

// find returns the tablet that holds row, nil if none does.
func (r *routing) find(row []byte) *tablet.Tablet {
	// The first tablet whose end is above row.
	i := sort.Search(len(r.tabs), func(i int) bool { return r.ranges[i].EndsAfter(row) })
	if i == len(r.tabs) || bytes.Compare(row, r.ranges[i].Start) < 0 {
		return nil // past the last tablet, or in a gap (Partial mode)
	}
	return r.tabs[i]
}

// Host is the set of tablets one server holds. It is safe for concurrent
// use.
type Host struct {
	opts    HostOptions
	log     *slog.Logger
	metrics *metrics

	mu     sync.RWMutex
	tables map[meta.TableID]*servedTable
	closed bool
	// opening counts OpenTable, LoadTablet and UnloadTablet calls under
	// way: their tablets may replay log records no open tablet's redo
	// point covers, or (unloading) are out of the routing but not yet
	// flushed, so the log is not truncated meanwhile.
	opening atomic.Int32
	// loads are the LoadTablet calls under way by tablet ID (also the
	// split children a load claimed), unloads the UnloadTablet calls,
	// splitting the tablets SplitTablet is splitting; all under mu.
	loads     map[string]*loadOp
	unloads   map[string]*unloadOp
	splitting map[string]bool
	// reports tracks the goroutines retrying OnSplit; Add only under mu
	// while not closed. bgCtx ends at Close.
	reports  sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	// noSplit remembers tablets found too small to split (their own
	// bytes below SplitBytes although their shared files are larger) or
	// unsplittable (one huge row), with their stored size then, so the
	// loop does not measure them again until they grew.
	noSplitMu sync.Mutex
	noSplit   map[*tablet.Tablet]int64

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// NewHost returns a Host with no tables and starts its background loop
// (splits, log truncation). Close stops it.
func NewHost(ctx context.Context, opts HostOptions) (*Host, error) {
	if opts.Store == nil {
		return nil, errors.New("tabletserver: HostOptions.Store is required")
	}
	opts.setDefaults()
	if opts.Lease != nil {
		opts.StateStore = fenceStateStore(opts.StateStore, opts.Lease)
	}
	h := &Host{
		opts:      opts,
		log:       opts.Logger,
		tables:    make(map[meta.TableID]*servedTable),
		loads:     make(map[string]*loadOp),
		unloads:   make(map[string]*unloadOp),
		splitting: make(map[string]bool),
		noSplit:   make(map[*tablet.Tablet]int64),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	m, err := newMetrics(h, opts.Registerer)
	if err != nil {
		return nil, err
	}
	h.metrics = m
	go h.background()
	return h, nil
}

// tabletDir is the object-name prefix of a table's SSTables. METADATA's
// empty instance would make an empty path segment, which stores refuse: it
// is "-", as in METADATA's wire name.
func tabletDir(id meta.TableID) string {
	inst := id.Instance
	if inst == "" {
		inst = "-"
	}
	return meta.TableDirPrefix + inst + "/" + id.Table
}

// tabletOptions returns the options to open tablet id of table t.
func (h *Host) tabletOptions(t meta.Table, id string, start, end []byte) tablet.Options {
	clock := h.opts.Clock
	if t.Granularity == meta.GranularityMillis {
		// Server-assigned timestamps of a MILLIS table are whole
		// milliseconds, as Cloud Bigtable assigns them.
		base := clock
		clock = func() int64 { now := base(); return now - now%1000 }
	}
	return tablet.Options{
		ID: id, Start: start, End: end,
		Schema:        t.Schema(),
		Store:         h.opts.Store,
		Dir:           tabletDir(t.ID),
		Log:           h.opts.Log,
		LogOptions:    h.opts.LogOptions,
		Cache:         h.opts.Cache,
		ScanCache:     h.opts.ScanCache,
		StateStore:    h.opts.StateStore,
		Limits:        h.opts.Limits,
		MemtableBytes: h.opts.MemtableBytes,
		Clock:         clock,
		Logger:        h.log,
	}
}

// openTablet opens tablet id, or, when it was split, its children
// recursively (left then right), and appends them to out.
func (h *Host) openTablet(ctx context.Context, t meta.Table, id string, start, end []byte, out []*tablet.Tablet) ([]*tablet.Tablet, error) {
	tb, err := tablet.Open(ctx, h.tabletOptions(t, id, start, end))
	var se *tablet.SplitError
	if errors.As(err, &se) {
		for _, child := range se.Children {
			// The children's states carry their ranges.
			if out, err = h.openTablet(ctx, t, child, nil, nil, out); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("open tablet %s of table %s: %w", id, t.ID, err)
	}
	return append(out, tb), nil
}

// OpenTable opens every tablet of t (following splits recorded in their
// states) and starts serving the table. For a table already open it
// updates the schema, as UpdateSchema does.
func (h *Host) OpenTable(ctx context.Context, t meta.Table) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("tabletserver: host closed")
	}
	st, ok := h.tables[t.ID]
	if ok {
		h.mu.Unlock()
		return h.UpdateSchema(ctx, t)
	}
	h.opening.Add(1)
	defer h.opening.Add(-1)
	st = &servedTable{}
	st.meta.Store(&t)
	// Hold the table's lock while opening, so that a concurrent
	// OpenTable of the same table waits instead of opening it twice.
	st.mu.Lock()
	defer st.mu.Unlock()
	st.set(nil)
	h.tables[t.ID] = st
	h.mu.Unlock()

	var tabs []*tablet.Tablet
	var err error
	for _, ref := range t.Tablets {
		if tabs, err = h.openTablet(ctx, t, ref.ID, ref.Start, ref.End, tabs); err != nil {
			break
		}
	}
	if err == nil {
		err = checkCoverage(tabs)
	}
	if err != nil {
		for _, tb := range tabs {
			_ = tb.Close()
		}
		h.mu.Lock()
		delete(h.tables, t.ID)
		h.mu.Unlock()
		st.dropped = true
		return err
	}
	st.set(tabs)
	h.log.Info("table opened", "table", t.ID.String(), "tablets", len(tabs))
	return nil
}

// checkCoverage verifies that tabs are ordered, adjacent and cover every row.
func checkCoverage(tabs []*tablet.Tablet) error {
	if len(tabs) == 0 {
		return errors.New("table has no tablets")
	}
	var prevEnd []byte
	for i, tb := range tabs {
		r := tb.Range()
		if !bytes.Equal(r.Start, prevEnd) {
			return fmt.Errorf("tablet %s starts at %q, want %q", tb.ID(), r.Start, prevEnd)
		}
		if r.Unbounded() && i != len(tabs)-1 {
			return fmt.Errorf("tablet %s ends the table but is not the last", tb.ID())
		}
		prevEnd = r.End
	}
	if len(prevEnd) > 0 {
		return fmt.Errorf("the last tablet ends at %q, not at the end of the table", prevEnd)
	}
	return nil
}

// DropTable closes the table's tablets (they flush) and forgets them. It
// deletes nothing: the master collects the files. Dropping a table that is
// not open is not an error.
func (h *Host) DropTable(ctx context.Context, t meta.Table) error {
	h.mu.Lock()
	st, ok := h.tables[t.ID]
	delete(h.tables, t.ID)
	h.mu.Unlock()
	if !ok {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.dropped = true
	var errs []error
	for _, tb := range st.list() {
		errs = append(errs, tb.Close())
		h.forgetNoSplit(tb)
	}
	h.log.Info("table dropped", "table", t.ID.String())
	return errors.Join(errs...)
}

// UpdateSchema sets t's schema (families added, GC policies changed,
// families dropped, granularity) on every tablet of the table.
func (h *Host) UpdateSchema(ctx context.Context, t meta.Table) error {
	st, err := h.table(t.ID)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.meta.Store(&t)
	var errs []error
	for _, tb := range st.list() {
		errs = append(errs, tb.SetSchema(ctx, t.Schema()))
	}
	return errors.Join(errs...)
}

// dropBatch is how many rows DropRowRange deletes per scan: the scan
// holds a snapshot, so deleting while scanning would be safe, but batches
// bound the memory held by keys.
const dropBatch = 1000

// DropRowRange deletes every row whose key starts with prefix (every row
// when prefix is empty) by writing a DeleteFromRow for each row found.
// Writes that arrive meanwhile for rows not yet reached are deleted too;
// rows written after the scan passed them survive. While HostOptions.Lease
// is set and not valid it fails with an error matching ErrLeaseLapsed; a
// lease that lapses midway may leave some rows deleted.
func (h *Host) DropRowRange(ctx context.Context, t meta.Table, prefix []byte) error {
	// Refused up front while the lease is not valid, even when no row
	// matches; each delete is also checked (writeTablet).
	if err := h.checkLease(1, false); err != nil {
		return err
	}
	var start, end []byte
	if len(prefix) > 0 {
		start, end = prefix, cell.PrefixSuccessor(prefix)
	}
	for {
		var keys [][]byte
		err := h.scan(ctx, t.ID, start, end, false, tablet.ReadOptions{MaxVersions: 1}, func(r cell.Row) error {
			keys = append(keys, r.Key)
			if len(keys) >= dropBatch {
				return errStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return err
		}
		// Deletes of different rows run concurrently so that they
		// share the log's group commits.
		errs := make([]error, len(keys))
		sem := make(chan struct{}, maxBulkConcurrency)
		var wg sync.WaitGroup
		for i, k := range keys {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				errs[i] = h.writeTablet(ctx, t.ID, k, func(tb *tablet.Tablet) error {
					return tb.Apply(ctx, cell.RowMutation{Row: k, Mutations: []cell.Mutation{cell.DeleteRow()}})
				})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if len(keys) < dropBatch {
			return nil
		}
		start = append(bytes.Clone(keys[len(keys)-1]), 0)
	}
}

// TableTablets returns the open tablets of a table, ordered by range; nil
// when the table is not open here.
func (h *Host) TableTablets(id meta.TableID) []TabletInfo {
	st, err := h.table(id)
	if err != nil {
		return nil
	}
	tabs := st.list()
	out := make([]TabletInfo, 0, len(tabs))
	for _, tb := range tabs {
		out = append(out, tabletInfo(tb))
	}
	return out
}

// tabletInfo describes an open tablet.
func tabletInfo(tb *tablet.Tablet) TabletInfo {
	r := tb.Range()
	s := tb.Stats()
	own, _ := tabletBytes(tb) // zero for a tablet closed meanwhile
	return TabletInfo{ID: tb.ID(), Start: r.Start, End: r.End, Bytes: own, Stats: s}
}

// Tables returns the IDs of the open tables, sorted.
func (h *Host) Tables() []meta.TableID {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]meta.TableID, 0, len(h.tables))
	for id := range h.tables {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b meta.TableID) int { return cmpString(a.String(), b.String()) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tabletBytes estimates the bytes of a tablet's own rows: the offset of its
// last key sample, which counts only the SSTable blocks in its range and
// its memtables (a split child shares its parent's files by reference).
func tabletBytes(tb *tablet.Tablet) (int64, error) {
	samples, err := tb.SampleKeys()
	if err != nil || len(samples) == 0 {
		return 0, err
	}
	return samples[len(samples)-1].Offset, nil
}

// storedBytes is the size of a tablet's files and memtables, shared files
// included.
func storedBytes(s tablet.Stats) int64 {
	n := s.MemtableBytes + s.FrozenBytes
	for _, g := range s.Groups {
		n += g.Bytes
	}
	return n
}

// table returns an open table or an error matching ErrTableNotFound.
func (h *Host) table(id meta.TableID) (*servedTable, error) {
	h.mu.RLock()
	st, ok := h.tables[id]
	h.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, id)
	}
	return st, nil
}

// tableMeta returns the catalog entry of an open table.
func (h *Host) tableMeta(id meta.TableID) (meta.Table, error) {
	st, err := h.table(id)
	if err != nil {
		return meta.Table{}, err
	}
	return *st.meta.Load(), nil
}

// Retries of a request that met a tablet that stopped serving (split,
// closed): the new tablets appear within the time a split takes to open
// its children, which is short because a split copies no data.
const (
	notServingRetries = 30
	notServingBackoff = 2 * time.Millisecond
)

// withTablet calls fn with the tablet holding row, looking it up again
// when fn fails with tabletdesc.ErrNotServing (a split or close raced the
// request), so that clients never see a split.
func (h *Host) withTablet(ctx context.Context, id meta.TableID, row []byte, fn func(*tablet.Tablet) error) error {
	backoff := notServingBackoff
	var err error
	for attempt := 0; attempt < notServingRetries; attempt++ {
		var st *servedTable
		if st, err = h.table(id); err != nil {
			return err
		}
		tb := st.routes.Load().find(row)
		if tb == nil {
			if h.opts.Partial {
				// Served elsewhere (or nowhere yet): waiting would
				// not help, the client must look the row up again.
				return &tabletdesc.NotServingError{Tablet: id.String(), Row: row, Reason: "no tablet of this server holds the row"}
			}
			err = &tabletdesc.NotServingError{Tablet: id.String(), Row: row, Reason: "no tablet holds the row"}
		} else if err = fn(tb); !errors.Is(err, tabletdesc.ErrNotServing) {
			return err
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
	// A tablet that stopped serving (closed, splitting) does not say which
	// row was asked for; the client's NotServing detail wants it.
	var ns *tabletdesc.NotServingError
	if errors.As(err, &ns) && ns.Row == nil {
		ns.Row = row
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// readRow reads one row through the routing, as withTablet does.
func (h *Host) readRow(ctx context.Context, id meta.TableID, key []byte, ro tablet.ReadOptions) (cell.Row, bool, error) {
	var row cell.Row
	var ok bool
	err := h.withTablet(ctx, id, key, func(tb *tablet.Tablet) error {
		var err error
		row, ok, err = tb.ReadRow(ctx, key, ro)
		return err
	})
	return row, ok, err
}

// errStopScan ends a scan early without error.
var errStopScan = errors.New("stop scan")

// scan calls fn for every row of table id in [start, end) (nil bounds are
// unbounded) in key order, descending with reverse, stitching the tablets
// together. A tablet that stops serving mid-scan (split) is looked up again
// and the scan resumes after the last row returned, so fn sees each row
// once. fn's errors stop the scan and are returned. In Partial mode, a
// part of the range no local tablet covers ends the scan, once the rows
// before it were passed to fn, with a *tabletdesc.NotServingError naming the
// first row of that part (see scanTablets).
func (h *Host) scan(ctx context.Context, id meta.TableID, start, end []byte, reverse bool, ro tablet.ReadOptions, fn func(cell.Row) error) error {
	var last []byte // last row passed to fn
	backoff := notServingBackoff
	retries := 0
	for {
		st, err := h.table(id)
		if err != nil {
			return err
		}
		lo, hi := start, end
		if last != nil {
			if reverse {
				hi = last
			} else {
				lo = append(bytes.Clone(last), 0)
			}
		}
		err = scanTablets(ctx, st.routes.Load(), lo, hi, reverse, h.opts.Partial, ro, func(r cell.Row) error {
			last = r.Key
			retries = 0
			return fn(r)
		})
		var gap *gapError
		if errors.As(err, &gap) {
			gap.err.Tablet = id.String()
			return gap.err // served elsewhere: retrying would not help
		}
		if !errors.Is(err, tabletdesc.ErrNotServing) {
			return err
		}
		retries++
		if retries > notServingRetries {
			return err
		}
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// gapError is scanTablets' error for a part of the range no tablet of the
// routing covers (Partial mode); scan answers err without retrying.
type gapError struct{ err *tabletdesc.NotServingError }

func (e *gapError) Error() string { return e.err.Error() }
func (e *gapError) Unwrap() error { return e.err }

// scanTablets scans the tablets of rt that overlap [lo, hi) in order. With
// partial, the routing may have gaps: reaching one in [lo, hi) ends the
// scan with a *gapError naming the gap's first row (also in a reverse
// scan, where it is the last row of the gap the scan reached that can be
// named: the gap's start).
func scanTablets(ctx context.Context, rt *routing, lo, hi []byte, reverse, partial bool, ro tablet.ReadOptions, fn func(cell.Row) error) error {
	want := tabletdesc.KeyRange{Start: lo, End: hi}
	if want.Empty() {
		return nil
	}
	var sel []int
	for i, r := range rt.ranges {
		if r.Overlaps(want) {
			sel = append(sel, i)
		}
	}
	if reverse {
		slices.Reverse(sel)
	}
	gap := func(row []byte) error {
		return &gapError{&tabletdesc.NotServingError{Row: append([]byte{}, row...),
			Reason: "no tablet of this server holds the row (the scan's range continues elsewhere)"}}
	}
	// The rows scanned so far, as a range: forward [lo, next), next nil
	// (atEnd) once the end of the table was reached; in reverse [prev,
	// hi), prev nil (atTop) until a tablet was scanned if hi is nil.
	next, atEnd := lo, false
	prev, atTop := hi, hi == nil
	for _, i := range sel {
		tb, r := rt.tabs[i], rt.ranges[i]
		if partial {
			if !reverse && bytes.Compare(r.Start, next) > 0 {
				return gap(next)
			}
			if reverse && !r.Unbounded() && (atTop || bytes.Compare(r.End, prev) < 0) {
				return gap(r.End)
			}
		}
		err := tb.Scan(ctx, tablet.ScanOptions{Start: lo, End: hi, Reverse: reverse, ReadOptions: ro}, fn)
		if err != nil {
			return err
		}
		next, atEnd = r.End, r.Unbounded()
		prev, atTop = r.Start, false
	}
	if partial {
		if !reverse && !atEnd && want.EndsAfter(next) {
			return gap(next)
		}
		if reverse && (atTop || bytes.Compare(prev, lo) > 0) {
			return gap(lo)
		}
	}
	return nil
}

// noteWrite tells the background loop that a tablet grew; the loop looks
// at tablet sizes at most every 50 ms, so a write pays one channel send.
func (h *Host) noteWrite() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *Host) forgetNoSplit(tb *tablet.Tablet) {
	h.noSplitMu.Lock()
	delete(h.noSplit, tb)
	h.noSplitMu.Unlock()
}

// background runs splits and log truncation until Close.
func (h *Host) background() {
	defer close(h.done)
	splitTick := time.NewTicker(h.opts.SplitCheckInterval)
	defer splitTick.Stop()
	truncTick := time.NewTicker(h.opts.LogTruncateInterval)
	defer truncTick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.stop
		cancel()
	}()
	var lastCheck time.Time
	for {
		select {
		case <-h.stop:
			return
		case <-splitTick.C:
		case <-h.kick:
			// Writes kick often; a check every 50 ms is plenty.
			if time.Since(lastCheck) < 50*time.Millisecond {
				if sleepCtx(ctx, 50*time.Millisecond) != nil {
					return
				}
			}
		case <-truncTick.C:
			if err := h.TruncateLog(ctx); err != nil && ctx.Err() == nil {
				h.log.Error("commit log truncation failed", "err", err)
			}
			continue
		}
		lastCheck = time.Now()
		h.splitBig(ctx)
	}
}

// splitBig splits every open tablet whose stored size passed SplitBytes.
func (h *Host) splitBig(ctx context.Context) {
	h.mu.RLock()
	tables := make([]*servedTable, 0, len(h.tables))
	for _, st := range h.tables {
		tables = append(tables, st)
	}
	h.mu.RUnlock()
	for _, st := range tables {
		if h.opts.Partial && st.meta.Load().ID == meta.MetadataTable {
			continue // METADATA's tablets do not split (in this version)
		}
		for _, tb := range st.list() {
			if ctx.Err() != nil {
				return
			}
			// Stats count whole SSTables, also those a split child
			// shares with its sibling, so they only bound the size
			// from above; the tablet's own bytes come from its
			// sampled keys, which are costlier (they walk the
			// memtable), so a tablet found too small (or unsplittable)
			// is measured again only once it has grown.
			stored := storedBytes(tb.Stats())
			if stored < h.opts.SplitBytes {
				continue
			}
			h.noSplitMu.Lock()
			was, measured := h.noSplit[tb]
			h.noSplitMu.Unlock()
			if measured && stored < was+h.opts.SplitBytes/8 {
				continue
			}
			if own, err := tabletBytes(tb); err != nil || own < h.opts.SplitBytes {
				h.noSplitMu.Lock()
				h.noSplit[tb] = stored
				h.noSplitMu.Unlock()
				continue
			}
			size := stored
			if err := h.SplitTablet(ctx, st.meta.Load().ID, tb.ID()); err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, tablet.ErrCannotSplit) {
					h.noSplitMu.Lock()
					h.noSplit[tb] = size
					h.noSplitMu.Unlock()
					continue
				}
				h.log.Error("tablet split failed", "tablet", tb.ID(), "err", err)
			}
		}
	}
}

// SplitTablet splits an open tablet of a table at a middle key, opens its
// children and swaps them in for it. Requests that meet the parent while it
// splits wait for the children (see withTablet). With HostOptions.OnSplit
// the split is then reported (see reportSplit). In Partial mode the
// tablets of METADATA are not split (an error matching
// tablet.ErrCannotSplit).
func (h *Host) SplitTablet(ctx context.Context, id meta.TableID, tabletID string) error {
	if h.opts.Partial && id == meta.MetadataTable {
		return fmt.Errorf("tablet %s: METADATA tablets do not split: %w", tabletID, tablet.ErrCannotSplit)
	}
	children, err := h.splitTablet(ctx, id, tabletID)
	if err != nil {
		return err
	}
	if h.opts.OnSplit != nil {
		h.reportSplit(ctx, id, tabletID, children)
	}
	return nil
}

// splitTablet is SplitTablet without the report: it returns the children.
func (h *Host) splitTablet(ctx context.Context, id meta.TableID, tabletID string) ([]TabletInfo, error) {
	st, err := h.table(id)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.dropped || st.gone.Load() {
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, id)
	}
	tabs := st.list()
	i := slices.IndexFunc(tabs, func(tb *tablet.Tablet) bool { return tb.ID() == tabletID })
	if i < 0 {
		return nil, fmt.Errorf("tablet %s of table %s is not open here", tabletID, id)
	}
	parent := tabs[i]
	h.mu.Lock()
	h.splitting[tabletID] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.splitting, tabletID)
		h.mu.Unlock()
	}()
	res, err := parent.Split(ctx)
	if err != nil {
		return nil, err
	}
	h.forgetNoSplit(parent)
	t := *st.meta.Load()
	var children []*tablet.Tablet
	for _, c := range []tabletdesc.State{res.Left, res.Right} {
		if children, err = h.openTablet(ctx, t, c.ID, nil, nil, children); err != nil {
			// The split is committed; the table cannot be served
			// whole until the children open. Keep the parent in
			// the list (it answers ErrNotServing) so the routing
			// stays complete, and say so loudly.
			for _, c := range children {
				_ = c.Close()
			}
			h.log.Error("opening split children failed; table partly unavailable", "tablet", tabletID, "err", err)
			return nil, err
		}
	}
	st.set(slices.Concat(tabs[:i], children, tabs[i+1:]))
	h.metrics.splits.Inc()
	h.log.Info("tablet split", "table", id.String(), "tablet", tabletID, "key", string(res.Key),
		"left", res.Left.ID, "right", res.Right.ID)
	infos := make([]TabletInfo, 0, len(children))
	for _, c := range children {
		infos = append(infos, tabletInfo(c))
	}
	return infos, nil
}

// TruncateLog deletes the commit log's segments that no open tablet needs:
// those wholly before the oldest redo point of the open tablets. With no
// tablet open, or while a table is being opened, it does nothing
// (unopened tablets of a crashed run may still need the log).
func (h *Host) TruncateLog(ctx context.Context) error {
	if h.opts.Log == nil || h.opening.Load() > 0 {
		return nil
	}
	h.mu.RLock()
	var oldest *tabletdesc.LogPosition
	for _, st := range h.tables {
		for _, tb := range st.list() {
			p := tb.State().RedoPoint
			if oldest == nil || p.Compare(*oldest) < 0 {
				oldest = &p
			}
		}
	}
	h.mu.RUnlock()
	if oldest == nil {
		return nil
	}
	return h.opts.Log.Truncate(ctx, *oldest)
}

// Close stops the background loop and closes every tablet (they flush).
// It does not close the commit log, which the caller opened.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	tables := h.tables
	h.tables = make(map[meta.TableID]*servedTable)
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	h.bgCancel()
	h.reports.Wait()
	var errs []error
	for _, st := range tables {
		st.mu.Lock()
		st.dropped = true
		for _, tb := range st.list() {
			errs = append(errs, tb.Close())
		}
		st.mu.Unlock()
	}
	h.metrics.unregister()
	return errors.Join(errs...)
}
