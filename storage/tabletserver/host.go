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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
)

// Defaults of HostOptions.
const (
	DefaultSplitBytes = 256 << 20
	// DefaultMetadataSplitBytes is the paper's "modest limit of 128 MB"
	// on METADATA tablets (§5.1): with rows of about 1 KB, three levels
	// address 2^34 tablets.
	DefaultMetadataSplitBytes  = 128 << 20
	DefaultSplitCheckInterval  = 2 * time.Second
	DefaultLogTruncateInterval = time.Minute
	// DefaultIdleMergeAfter is the HostOptions.IdleMergeAfter tabula dev
	// and tabula tabletserver run with: long enough that a client pausing between requests is
	// not taken for gone, short enough that a second of idle cores is
	// used.
	DefaultIdleMergeAfter = time.Second
	// DefaultLogFlushSegments is the default of
	// HostOptions.LogFlushSegments: with the log's 64 MiB segments, a
	// tablet is flushed once 512 MiB of log were written after its
	// oldest unflushed write — well past a busy tablet's 64 MiB memtable
	// unless more than eight tablets share the writes. In an object store
	// a segment also ends after commitlog.DefaultSegmentObjects (1,024)
	// flushes, so a tablet taking a trickle of writes is flushed after
	// about 8,000 group commits, and a recovery reads at most about
	// 12,000 log objects (the host truncates every LogFlushSegments/2
	// segments).
	DefaultLogFlushSegments = 8
	// DefaultMetadataLogRelease is the default of
	// HostOptions.MetadataLogRelease.
	DefaultMetadataLogRelease = 5 * time.Second
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
	// MemtableBudget bounds the memtables of all open tablets together:
	// past it, the largest active memtables are flushed before they are
	// full, unpaced, until 90% of it would remain, and at twice it writes
	// (but METADATA's) wait for the flushes (see membudget.go); default
	// DefaultMemtableBudget; negative: no budget.
	MemtableBudget int64
	// MajorInterval is the tablets' tablet.Options.MajorInterval (the
	// tablet's default when zero; negative: never).
	MajorInterval time.Duration
	// FileCommitWindow is the tablets' tablet.Options.FileCommitWindow:
	// below the sweep's grace (zero: no bound).
	FileCommitWindow time.Duration
	// SplitBytes: a tablet whose stored size (SSTables plus memtables)
	// passes it is split in the background; default 256 MiB.
	SplitBytes int64
	// MetadataSplitBytes is SplitBytes for METADATA's tablets other than
	// the root, which never splits; default DefaultMetadataSplitBytes.
	MetadataSplitBytes int64
	// SplitCheckInterval is how often the background loop looks at tablet
	// sizes even when no write asked it to; default 2 s.
	SplitCheckInterval time.Duration
	// LogTruncateInterval is how often the commit log is truncated to the
	// oldest redo point of the open tablets; default 1 min. Tablets that
	// still need older records (those of a crashed run) must be opened
	// before the first truncation: tabula dev opens every table at start.
	LogTruncateInterval time.Duration
	// LogFlushSegments bounds how far behind the log's tail a tablet's
	// redo point may stay: at each truncation, a tablet whose redo point
	// lies this many segments or more before the tail's is flushed (an
	// idle one only moves its redo point), so that a tablet taking few
	// writes does not keep every later segment — and a recovery of this
	// server from reading them all; default DefaultLogFlushSegments.
	LogFlushSegments int
	// MetadataLogRelease bounds how long a METADATA tablet's redo point
	// (the root's included) stays behind the log's tail: this often, and
	// whenever a log segment ends, METADATA tablets behind the tail
	// release the log (tablet.ReleaseLog: flushed, or their redo point
	// moved if idle). When this server dies, the root tablet — and a
	// lone METADATA tablet — are recovered from its unsorted log, read
	// from their redo points, before any other tablet of the cluster can
	// be found: kept near the tail, they read a few seconds of the log,
	// not every segment since their last flush (18 s of unavailability
	// in a campaign, session 30). They take few writes, so each release
	// is a small flush or one state save. Default
	// DefaultMetadataLogRelease; negative: only the LogFlushSegments
	// rule.
	MetadataLogRelease time.Duration
	// Pacer slows the tablets' background flushes and merging
	// compactions while requests are served (tablet.Options.Pacer); the
	// Host's interceptors mark the requests. Nil means unpaced.
	Pacer *pacing.Pacer
	// IdleMergeAfter is how long the server must have served nothing
	// (by Pacer's marks) before its tablets merge what piled up
	// (tablet.MergeWhileIdle), asked again while it stays idle. Zero or
	// negative, or without a Pacer: never. Off unless asked for: tabula
	// dev and tabula tabletserver turn it on (DefaultIdleMergeAfter).
	IdleMergeAfter time.Duration
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
	// An error matching ErrTableGone ends the retries: the children,
	// tablets of a deleted table, are unloaded.
	OnSplit func(ctx context.Context, table meta.TableID, parent string, children []TabletInfo) error
}

func (o *HostOptions) setDefaults() {
	if o.StateStore == nil {
		o.StateStore = tablet.NewBlobStateStore(o.Store, "state")
	}
	if o.Limits == (cell.Limits{}) {
		o.Limits = cell.DefaultLimits()
	}
	if o.MemtableBudget == 0 {
		o.MemtableBudget = DefaultMemtableBudget
	}
	if o.SplitBytes <= 0 {
		o.SplitBytes = DefaultSplitBytes
	}
	if o.MetadataSplitBytes <= 0 {
		o.MetadataSplitBytes = DefaultMetadataSplitBytes
	}
	if o.SplitCheckInterval <= 0 {
		o.SplitCheckInterval = DefaultSplitCheckInterval
	}
	if o.LogTruncateInterval <= 0 {
		o.LogTruncateInterval = DefaultLogTruncateInterval
	}
	if o.LogFlushSegments <= 0 {
		o.LogFlushSegments = DefaultLogFlushSegments
	}
	if o.MetadataLogRelease == 0 {
		o.MetadataLogRelease = DefaultMetadataLogRelease
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
	// TableCreated is when the tablet's table was created (meta.Table's
	// Created) as the Host served it then: set on a split's children, so
	// that HostOptions.OnSplit can tell the table they belong to from one
	// created again under the name since.
	TableCreated time.Time
}

// ErrTableNotFound is returned (wrapped) for a table that is not open on
// this host.
var ErrTableNotFound = errors.New("table not found")

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

	// gate holds writes back while the memtables are far over budget
	// (membudget.go).
	gate writeGate

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
		Schema:           t.Schema(),
		Store:            h.opts.Store,
		Dir:              tabletDir(t.ID),
		Log:              h.opts.Log,
		LogOptions:       h.opts.LogOptions,
		Cache:            h.opts.Cache,
		ScanCache:        h.opts.ScanCache,
		StateStore:       h.opts.StateStore,
		Limits:           h.opts.Limits,
		MemtableBytes:    h.opts.MemtableBytes,
		MajorInterval:    h.opts.MajorInterval,
		FileCommitWindow: h.opts.FileCommitWindow,
		Pacer:            h.opts.Pacer,
		Clock:            clock,
		Logger:           h.log,
	}
}

// openTablet opens tablet id, or, when it was split, its children
// recursively (left then right), and appends them to out.
func (h *Host) openTablet(ctx context.Context, t meta.Table, id string, start, end []byte, out []*tablet.Tablet) ([]*tablet.Tablet, error) {
	return h.openTabletFrom(ctx, t, id, start, end, nil, out)
}

// openTabletAdopting is openTablet for a split child, which takes the
// files it shares with its parent from adopt instead of opening them.
func (h *Host) openTabletAdopting(ctx context.Context, t meta.Table, id string, adopt *tablet.OpenFiles) ([]*tablet.Tablet, error) {
	return h.openTabletFrom(ctx, t, id, nil, nil, adopt, nil)
}

func (h *Host) openTabletFrom(ctx context.Context, t meta.Table, id string, start, end []byte, adopt *tablet.OpenFiles, out []*tablet.Tablet) ([]*tablet.Tablet, error) {
	opts := h.tabletOptions(t, id, start, end)
	opts.Adopt = adopt
	tb, err := tablet.Open(ctx, opts)
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
	h.gate.set(false) // writes held back go on, to find no table
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
