package tablet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/memtable"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Options configure Open. Zero values take the documented defaults.
type Options struct {
	// ID names the tablet: its state, its commit-log records.
	ID string
	// Start and End bound the tablet's rows to [Start, End); nil End is
	// the end of the table. For a tablet that has a saved state they may
	// be left nil (the state's range is used); if given they must match.
	Start, End []byte

	Schema tabletdesc.Schema
	// Store holds the SSTables; Dir is the object-name prefix of the files
	// this tablet writes.
	Store blob.Store
	Dir   string

	// Log is the server's commit log writes are appended to. Nil means no
	// log: writes are durable only once flushed (tests, bulk loads).
	Log *commitlog.Log
	// LogOptions describe the log to replay at Open: the log of the server
	// that last served the tablet (which may be Log's own directory). The
	// zero value replays nothing.
	LogOptions commitlog.Options
	// SortedLog, when its Store is set, is the sorted copy of the log
	// LogOptions describe (commitlog.SortSegment; LogOptions must then be
	// an object-store log): Open reads only this tablet's records from it
	// (commitlog.ReplaySorted) instead of the whole log. What is replayed
	// is the same: records from the redo point on, above the flushed
	// sequence. A segment the copy lacks fails Open.
	SortedLog commitlog.SortedLog

	// Cache is the block cache shared by the server's SSTables; nil means
	// none.
	Cache *sstable.Cache
	// ScanCache is the row cache shared by the server's tablets; nil
	// means none.
	ScanCache *ScanCache
	// Adopt offers files already open — a split parent's, handed to its
	// children (SplitResult.Files) — which Open uses instead of opening
	// them again; nil opens every file.
	Adopt *OpenFiles
	// StateStore persists the tablet's State. Required.
	StateStore StateStore

	// Limits validate writes; zero means cell.DefaultLimits().
	Limits cell.Limits
	// MemtableBytes triggers a minor compaction; default 64 MiB.
	MemtableBytes int64
	// FileCommitWindow bounds how long after the time in its name (the
	// start of its writing, FileCreated) a new SSTable may be committed
	// to the tablet's saved state. The sweep deletes an unreferenced file
	// once it is older than its grace, so a file written more slowly than
	// that could be deleted by a sweep that read this tablet's references
	// before the state naming it was saved: a flush or compaction whose
	// files are older than the window when their state is about to be
	// saved writes them again under fresh names (up to commitAttempts
	// times). Set it below the sweep's grace, leaving room for saving a
	// state; zero means no bound (the grace must then exceed every write).
	FileCommitWindow time.Duration
	// MaxSSTables per locality group triggers a merging compaction;
	// default 8.
	MaxSSTables int
	// Pacer slows the flushes and merging compactions the tablet starts
	// on its own while its server serves foreground requests (see
	// package pacing); nil means unpaced. Work someone waits for —
	// Flush, Compact, splits, Close, a caller blocked on the tablet's
	// maintenance — is never slowed: a paced write in progress turns
	// unpaced as soon as such a caller arrives.
	Pacer *pacing.Pacer
	// MajorInterval is how often the tablet runs a major compaction of
	// its SSTables on its own (paced like its merges), so that deleted
	// and collected data is reclaimed also in a tablet that no longer
	// takes writes — Bigtable "regularly applies major compactions";
	// HBase every 7 days. Each wait is drawn between half the interval
	// and the whole, so that a server's tablets do not all compact at
	// once. Default 7 days; negative: never.
	MajorInterval time.Duration

	// Clock returns the current time in microseconds (server timestamps,
	// MaxAge policies); default the system clock.
	Clock func() int64
	// NewID returns fresh tablet IDs for split children; default a unique
	// time-and-random string.
	NewID func() string
	// Logger receives background errors and events; default slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Limits == (cell.Limits{}) {
		o.Limits = cell.DefaultLimits()
	}
	if o.MemtableBytes <= 0 {
		o.MemtableBytes = 64 << 20
	}
	if o.MaxSSTables <= 0 {
		o.MaxSSTables = 8
	}
	if o.MajorInterval == 0 {
		o.MajorInterval = DefaultMajorInterval
	}
	if o.Clock == nil {
		o.Clock = func() int64 { return time.Now().UnixMicro() }
	}
	if o.NewID == nil {
		o.NewID = newTabletID
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// DefaultMajorInterval is Options.MajorInterval's default.
const DefaultMajorInterval = 7 * 24 * time.Hour

// nextMajorWait draws the wait before a periodic major compaction, in
// [interval/2, interval); u is uniform in [0, 1). ok is false when
// periodic majors are off.
func nextMajorWait(interval time.Duration, u float64) (d time.Duration, ok bool) {
	if interval <= 0 {
		return 0, false
	}
	return interval/2 + time.Duration(u*float64(interval/2)), true
}

func newTabletID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("t%013x%s", time.Now().UnixMicro(), hex.EncodeToString(b[:]))
}

// groupFiles is one immutable list of a locality group's SSTables, newest
// first. gen names it in the scan cache.
type groupFiles struct {
	files []*tableFile
	gen   uint64
}

// version is what a read needs, fixed when the read starts: the memtables,
// the SSTables of every group, the schema. Readers hold a reference, so
// the files they read stay open while compactions replace them.
type version struct {
	refs   atomic.Int64
	mem    *memtable.Memtable
	frozen *memtable.Memtable // being flushed; nil if none
	groups map[string]*groupFiles
	schema tabletdesc.Schema
	drops  map[string]uint64
}

func newVersion(mem, frozen *memtable.Memtable, groups map[string]*groupFiles, schema tabletdesc.Schema, drops map[string]uint64) *version {
	v := &version{mem: mem, frozen: frozen, groups: groups, schema: schema, drops: drops}
	for _, g := range groups {
		for _, f := range g.files {
			f.ref()
		}
	}
	v.refs.Store(1)
	return v
}

func (v *version) ref() { v.refs.Add(1) }

func (v *version) unref() {
	if v.refs.Add(-1) == 0 {
		for _, g := range v.groups {
			for _, f := range g.files {
				f.unref()
			}
		}
	}
}

// Tablet is one open tablet. All methods are safe for concurrent use.
type Tablet struct {
	opts   Options
	id     string
	rng    tabletdesc.KeyRange // the rows served; End nil when unbounded
	lower  []byte              // RowPrefix(rng.Start), nil when it is empty
	upper  []byte              // RowPrefix(rng.End), nil when unbounded
	maxKey []byte              // sorts after every internal key (reverse scans)

	// writeMu serialises writers: sequence numbers, log order, memtable
	// inserts, freezes and schema changes.
	writeMu    sync.Mutex
	lastSeq    uint64
	lastCommit *commitlog.Commit
	stopErr    error // writes refused with it (closed, split, failed)
	mem        *memtable.Memtable
	frozen     *frozenMem
	keyBuf     []byte // insert's internal keys are encoded here

	visible atomic.Uint64 // the published snapshot
	failed  atomic.Pointer[failedError]

	// mu guards cur, the current version (changed under writeMu too when
	// the memtable or schema changes).
	mu  sync.RWMutex
	cur *version

	// maintMu: one compaction, split, schema change or other maintenance
	// at a time; flushMu: one flush at a time. The background flusher
	// holds flushMu alone, so that a memtable is flushed while a merge
	// holding maintMu alone goes on (RocksDB's flush and compaction
	// jobs): a merge paced behind foreground work must not hold up the
	// flush that the next memtable needs. Everything else holds both
	// (lockMaint). Lock order: maintMu, flushMu, stateMu, writeMu, mu.
	maintMu sync.Mutex
	flushMu sync.Mutex
	// stateMu orders what a flush and a merge running side by side
	// install: each takes the last saved state, saves it with its own
	// change, and installs the version to match under it. state is the
	// last saved State; it changes only under stateMu (and maintMu or
	// flushMu or both), through putState.
	stateMu sync.Mutex
	state   tabletdesc.State
	// saved is a copy of state for State, which must not wait for
	// stateMu: a flush holds it across its state's save, an object
	// store round trip — and for as long as the store does not answer,
	// so that the master's List, which reads every tablet's State, timed
	// out during a MinIO pause and the master ended the sessions of
	// servers that were only flushing.
	saved atomic.Pointer[tabletdesc.State]
	// maintWaiters counts callers waiting for maintMu and flushMu
	// (lockMaint): while there are any, the background flush or merge
	// holding either is not paced.
	maintWaiters atomic.Int32

	// flushWanted: a flush of the memtable however full it is was asked
	// for (RequestFlush); the flusher takes it.
	flushWanted atomic.Bool
	// idleMerge: the server is idle and asked for an idle-time merge
	// (MergeWhileIdle); the background loop's next maintain takes it.
	idleMerge atomic.Bool

	kick     chan struct{} // merges may be due
	flush    chan struct{} // the memtable is full
	stop     chan struct{}
	bgDone   chan struct{}
	closed   atomic.Bool
	localGen atomic.Uint64

	flushes, merges, majors atomic.Uint64
	// collectingMerges counts the background merges, which collect
	// (autoMergeLocked); collectingBegun those begun, done or not: one
	// under way may have collected a version that a delete since then
	// uncovered (the model test's bookkeeping of such versions).
	collectingMerges, collectingBegun atomic.Uint64
	// flushesCollecting counts the flushes begun, each of which may
	// collect (flushcollect.go), as collectingBegun counts the merges;
	// flushCollected the entries they left out.
	flushesCollecting, flushCollected atomic.Uint64
}

// frozenMem is the memtable being flushed and where its log ends.
type frozenMem struct {
	mem    *memtable.Memtable
	seq    uint64                 // highest sequence number it may hold
	commit *commitlog.Commit      // the last record appended before the freeze
	redo   tabletdesc.LogPosition // log tail at the freeze
}

// Open opens a tablet: loads its state (none yet: a new, empty tablet),
// opens its SSTables, replays the commit log from the redo point and, if
// anything was replayed, flushes it so that the tablet no longer depends on
// the old log. It returns a *SplitError for a tablet that was split.
func Open(ctx context.Context, opts Options) (*Tablet, error) {
	opts.setDefaults()
	if err := ValidateID(opts.ID); err != nil {
		return nil, err
	}
	if opts.Store == nil || opts.StateStore == nil {
		return nil, errors.New("tablet: Options.Store and Options.StateStore are required")
	}
	if err := opts.Schema.Validate(); err != nil {
		return nil, err
	}
	schema := opts.Schema.Clone()
	st, err := opts.StateStore.Load(ctx, opts.ID)
	switch {
	case errors.Is(err, ErrStateNotFound):
		st = tabletdesc.State{ID: opts.ID, Start: bytes.Clone(opts.Start), End: bytes.Clone(opts.End)}
	case err != nil:
		return nil, err
	case len(st.SplitInto) > 0:
		return nil, &SplitError{Tablet: opts.ID, Children: slices.Clone(st.SplitInto)}
	default:
		if (opts.Start != nil && !bytes.Equal(opts.Start, st.Start)) || (opts.End != nil && !bytes.Equal(opts.End, st.End)) {
			return nil, fmt.Errorf("tablet %s: Options range [%q, %q) differs from the saved range [%q, %q)", opts.ID, opts.Start, opts.End, st.Start, st.End)
		}
	}
	if st.Groups == nil {
		st.Groups = make(map[string][]tabletdesc.FileMeta)
	}
	if st.Range().Empty() {
		return nil, fmt.Errorf("tablet %s: empty row range [%q, %q)", opts.ID, st.Start, st.End)
	}

	t := &Tablet{
		opts:   opts,
		id:     opts.ID,
		rng:    tabletdesc.KeyRange{Start: bytes.Clone(st.Start)},
		kick:   make(chan struct{}, 1),
		flush:  make(chan struct{}, 1),
		stop:   make(chan struct{}),
		bgDone: make(chan struct{}),
		mem:    memtable.New(),
	}
	if len(st.End) > 0 {
		t.rng.End = bytes.Clone(st.End)
		t.upper = cell.RowPrefix(t.rng.End)
	}
	if len(t.rng.Start) > 0 {
		t.lower = cell.RowPrefix(t.rng.Start)
	}
	t.maxKey = bytes.Repeat([]byte{0xFF}, max(opts.Limits.MaxRowKeyBytes, 64<<10)+2)

	groups := make(map[string]*groupFiles)
	release := func() {
		for _, g := range groups {
			for _, f := range g.files {
				f.unref()
			}
		}
	}
	lastSeq := max(st.LastSeq, st.FlushedSeq)
	for name, metas := range st.Groups {
		lg := schema.Group(name)
		g := &groupFiles{gen: t.newGen()}
		for _, m := range metas {
			f := opts.Adopt.take(m, lg.InMemory)
			var err error
			if f == nil {
				f, err = openTableFile(ctx, opts.Store, m, sstable.ReaderOptions{Cache: opts.Cache, InMemory: lg.InMemory})
			}
			if err != nil {
				release()
				return nil, fmt.Errorf("tablet %s: opening %s: %w", opts.ID, m.Name, err)
			}
			g.files = append(g.files, f)
			lastSeq = max(lastSeq, f.r.Properties().MaxSeq)
		}
		groups[name] = g
	}

	// Replay the log into the memtable.
	replayed := 0
	if opts.LogOptions.Dir != "" || opts.LogOptions.Store != nil {
		apply := func(_ tabletdesc.LogPosition, rec commitlog.Record) error {
			if rec.Tablet != opts.ID {
				return nil
			}
			last := rec.FirstSeq + uint64(len(rec.Mutation.Mutations)) - 1
			if last <= st.FlushedSeq {
				return nil
			}
			t.insert(rec.Mutation, rec.FirstSeq)
			lastSeq = max(lastSeq, last)
			replayed++
			return nil
		}
		var res commitlog.ReplayResult
		var err error
		replayStart := time.Now()
		if opts.SortedLog.Store != nil {
			res, err = commitlog.ReplaySorted(ctx, opts.LogOptions, opts.SortedLog, opts.ID, st.RedoPoint, apply)
		} else {
			res, err = commitlog.Replay(ctx, opts.LogOptions, st.RedoPoint, apply)
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("tablet %s: replaying the commit log: %w", opts.ID, err)
		}
		if res.TornTail {
			opts.Logger.Warn("commit log ended in a torn record", "tablet", opts.ID, "at", res.TornAt)
		}
		if res.Records > 0 {
			// How much of the log a recovery read for this tablet, and
			// how long it took: the cost HostOptions.LogFlushSegments and
			// MetadataLogRelease bound.
			opts.Logger.Info("read commit log", "tablet", opts.ID, "records_read", res.Records, "records_replayed", replayed,
				"from", st.RedoPoint, "sorted", opts.SortedLog.Store != nil, "took", time.Since(replayStart).Round(time.Millisecond))
		}
	}

	// Families of the saved state missing from the schema were dropped
	// while the tablet was closed.
	drops := maps.Clone(st.Drops)
	if drops == nil {
		drops = make(map[string]uint64)
	}
	for _, f := range st.Families {
		if _, ok := schema.Families[f]; !ok {
			lastSeq++
			drops[f] = lastSeq
		}
	}
	st.Drops = drops
	st.Families = slices.Sorted(maps.Keys(schema.Families))
	st.LastSeq = lastSeq
	t.lastSeq = lastSeq
	t.visible.Store(lastSeq)
	t.putState(st)
	t.cur = newVersion(t.mem, nil, groups, schema, maps.Clone(drops))
	release() // the version holds its own references now

	if replayed > 0 {
		if _, err := t.flushLocked(ctx); err != nil {
			t.release()
			return nil, err
		}
	}
	// Save: the families, the drops, and a redo point in the new log.
	// Everything the tablet holds is in SSTables now (what was replayed
	// was flushed above), so no record before the log's tail concerns it.
	// This matters also without LogOptions: a tablet moved cleanly from
	// another server keeps a redo point that is a position in that
	// server's log; left as is, a crash recovery replaying this server's
	// log from it would skip this server's records before that position.
	st = t.state.Clone()
	if opts.Log != nil && t.mem.Len() == 0 {
		st.RedoPoint = opts.Log.Tail()
	}
	if err := opts.StateStore.Save(ctx, st); err != nil {
		t.release()
		return nil, fmt.Errorf("tablet %s: saving state: %w", opts.ID, err)
	}
	t.putState(st)
	go t.background()
	return t, nil
}

func (t *Tablet) newGen() uint64 {
	if t.opts.ScanCache != nil {
		return t.opts.ScanCache.newGeneration()
	}
	return t.localGen.Add(1)
}

// ID returns the tablet's ID.
func (t *Tablet) ID() string { return t.id }

// Range returns a copy of the tablet's row range; its End is nil when
// unbounded.
func (t *Tablet) Range() tabletdesc.KeyRange {
	return tabletdesc.KeyRange{Start: bytes.Clone(t.rng.Start), End: bytes.Clone(t.rng.End)}
}

// Contains reports whether the tablet's range holds row.
func (t *Tablet) Contains(row []byte) bool { return t.rng.Contains(row) }

func (t *Tablet) notServing(row []byte, reason string) error {
	return &tabletdesc.NotServingError{Tablet: t.id, Row: bytes.Clone(row), Reason: reason}
}

// State returns a copy of the tablet's last saved state. It waits for
// nothing — no flush or compaction, nor the object store one of them is
// saving a state to: the master lists every server's tablets each round,
// and the log truncation reads every redo point, through it.
func (t *Tablet) State() tabletdesc.State {
	return t.saved.Load().Clone()
}

// putState makes st, just saved, the last saved state; called under
// stateMu (or before the tablet is shared).
func (t *Tablet) putState(st tabletdesc.State) {
	t.state = st
	c := st.Clone()
	t.saved.Store(&c)
}

// setState makes st the last saved state; called under lockMaint.
func (t *Tablet) setState(st tabletdesc.State) {
	t.stateMu.Lock()
	t.putState(st)
	t.stateMu.Unlock()
}

// insert adds the entries of rm (sequence numbers from first on) to the
// active memtable. Called under writeMu (or before the tablet is shared).
func (t *Tablet) insert(rm cell.RowMutation, first uint64) {
	buf := t.keyBuf[:0] // Add copies the key: the buffer serves every insert
	defer func() { t.keyBuf = buf }()
	for i, m := range rm.Mutations {
		k := cell.Key{Row: rm.Row, Seq: first + uint64(i)}
		var value []byte
		switch m.Kind {
		case cell.SetCell, cell.MergeToCell:
			// An aggregate family's cells are plain entries: the
			// family's aggregator folds those of one timestamp when
			// they are read or compacted (resolveRow).
			k.Kind, k.Family, k.Qualifier, k.Timestamp = cell.KindSet, m.Family, m.Qualifier, m.Timestamp
			value = m.Value
		case cell.DeleteFromColumn:
			k.Kind, k.Family, k.Qualifier = cell.KindColumnDelete, m.Family, m.Qualifier
			value = cell.EncodeTimeRange(m.StartTimestamp, m.EndTimestamp)
		case cell.DeleteFromFamily:
			k.Kind, k.Family = cell.KindFamilyDelete, m.Family
		case cell.DeleteFromRow:
			k.Kind = cell.KindRowDelete
		default:
			continue
		}
		buf = cell.AppendKey(buf[:0], k)
		t.mem.Add(buf, value)
	}
}

// checkFamilies returns a *FamilyNotFoundError for the first mutation
// naming a family outside the schema. Called under writeMu.
//
// It also checks that each write matches its family's type: SetCell only
// on a family that is not an aggregate one, AddToCell and MergeToCell only
// on an aggregate family, a MergeToCell's state in the family's encoding
// (a *cell.InvalidArgumentError naming the field otherwise).
func (t *Tablet) checkFamilies(rm cell.RowMutation, schema tabletdesc.Schema) error {
	return CheckFamilies("mutations", rm.Mutations, schema.Families)
}

// CheckFamilies is the check of Apply on mutations against a table's
// families, for servers that check before a tablet does (both branches of
// a check-and-mutate): a *FamilyNotFoundError for a family not in
// families, a *cell.InvalidArgumentError for a write that does not match
// its family's type. Errors name field[i].<kind>.<field>.
func CheckFamilies(field string, muts []cell.Mutation, families map[string]tabletdesc.Family) error {
	for i, m := range muts {
		if m.Kind == cell.DeleteFromRow {
			continue
		}
		f, ok := families[m.Family]
		if !ok {
			return &FamilyNotFoundError{Family: m.Family, Field: fmt.Sprintf("%s[%d].%s.family_name", field, i, m.Kind)}
		}
		switch m.Kind {
		case cell.SetCell:
			if f.Aggregate != cell.NoAggregator {
				return &cell.InvalidArgumentError{Field: fmt.Sprintf("%s[%d].set_cell.family_name", field, i),
					Reason: fmt.Sprintf("column family %q is an aggregate (%s) family: write it with add_to_cell or merge_to_cell", m.Family, f.Aggregate)}
			}
		case cell.AddToCell, cell.MergeToCell:
			if f.Aggregate == cell.NoAggregator {
				return &cell.InvalidArgumentError{Field: fmt.Sprintf("%s[%d].%s.family_name", field, i, m.Kind),
					Reason: fmt.Sprintf("column family %q is not an aggregate family: write it with set_cell", m.Family)}
			}
			if m.Kind == cell.MergeToCell {
				if err := f.Aggregate.ValidateState(m.Value); err != nil {
					return &cell.InvalidArgumentError{Field: fmt.Sprintf("%s[%d].merge_to_cell.input", field, i), Reason: err.Error()}
				}
			}
		}
	}
	return nil
}

// addsToMerges turns every AddToCell of rm (whose Mutations the caller
// owns) into the MergeToCell of its input's state, so that the commit log
// and the memtable hold states only and replay needs no schema. rm has
// passed checkFamilies against schema.
func addsToMerges(rm cell.RowMutation, schema tabletdesc.Schema) error {
	for i := range rm.Mutations {
		m := &rm.Mutations[i]
		if m.Kind != cell.AddToCell {
			continue
		}
		state, err := schema.Families[m.Family].Aggregate.InputState(int64(binary.BigEndian.Uint64(m.Value)))
		if err != nil {
			return &cell.InvalidArgumentError{Field: fmt.Sprintf("mutations[%d].add_to_cell.input", i), Reason: err.Error()}
		}
		m.Kind, m.Value = cell.MergeToCell, state
	}
	return nil
}

// Apply applies a row mutation atomically: readers see all of it or none
// of it. When Apply returns nil the mutation is durable in the commit log
// (when there is one). Invalid mutations (cell.ErrInvalidArgument,
// ErrFamilyNotFound) and rows outside the tablet (ErrNotServing) change
// nothing. SetCell mutations with cell.ServerTimestamp get the tablet
// clock's time.
func (t *Tablet) Apply(ctx context.Context, rm cell.RowMutation) error {
	if err := t.validate(rm); err != nil {
		return err
	}
	if !t.Contains(rm.Row) {
		return t.notServing(rm.Row, "row outside the tablet's range")
	}
	enc := t.preencode(rm)
	t.writeMu.Lock()
	last, commit, err := t.applyLocked(rm, enc)
	t.writeMu.Unlock()
	if enc != nil {
		enc.Release()
	}
	if err != nil {
		return err
	}
	return t.finishWrite(ctx, last, commit)
}

// preencode encodes rm's commit-log record, all but its sequence number,
// before the write lock is taken — the copy of its values into log bytes
// is then off the lock that serialises the tablet's writers — when nothing
// in it depends on what is decided under the lock: no server-assigned
// timestamp (the clock is read under it, in write order) and no AddToCell
// (turned into the state of its family's aggregator, read under it). It
// returns nil otherwise, and when the tablet has no log; applyLocked then
// encodes under the lock.
func (t *Tablet) preencode(rm cell.RowMutation) *commitlog.Encoded {
	if t.opts.Log == nil {
		return nil
	}
	for i := range rm.Mutations {
		m := &rm.Mutations[i]
		if m.Kind == cell.AddToCell || (m.Kind == cell.SetCell && m.Timestamp == cell.ServerTimestamp) {
			return nil
		}
	}
	return commitlog.Encode(t.id, rm)
}

// ApplyBatch applies row mutations as Apply does — each atomically and
// independently, in order, so several mutations of one row keep their
// order — in one critical section with one wait for the commit log: the
// path of bulk writes, where per-row lock hand-offs would dominate. errs[i]
// is rms[i]'s outcome; nil means durable and visible. Invalid entries fail
// alone and change nothing.
func (t *Tablet) ApplyBatch(ctx context.Context, rms []cell.RowMutation) []error {
	errs := make([]error, len(rms))
	encs := make([]*commitlog.Encoded, len(rms))
	for i, rm := range rms {
		if err := t.validate(rm); err != nil {
			errs[i] = err
		} else if !t.Contains(rm.Row) {
			errs[i] = t.notServing(rm.Row, "row outside the tablet's range")
		} else {
			encs[i] = t.preencode(rm)
		}
	}
	var applied []int
	var last uint64
	var commit *commitlog.Commit
	// The rows go in in key order: each insert's search in the memtable
	// then starts from the previous one's path (memtable.Add's finger)
	// instead of the list's head. Rows are independent and a row's
	// mutations keep their order (the sort is stable), so the order of
	// their sequence numbers changes nothing a read can see.
	order := make([]int, len(rms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(rms[a].Row, rms[b].Row) })
	t.writeMu.Lock()
	for _, i := range order {
		rm := rms[i]
		if errs[i] != nil {
			continue
		}
		l, c, err := t.applyLocked(rm, encs[i])
		if err != nil {
			errs[i] = err
			continue
		}
		last, commit = l, c
		applied = append(applied, i)
	}
	t.writeMu.Unlock()
	for _, e := range encs {
		if e != nil {
			e.Release()
		}
	}
	if len(applied) == 0 {
		return errs
	}
	// The log is sequential: once the last record is durable, all are.
	if err := t.finishWrite(ctx, last, commit); err != nil {
		for _, i := range applied {
			errs[i] = err
		}
	}
	return errs
}

// validate checks rm against the limits and the commit log's record size.
func (t *Tablet) validate(rm cell.RowMutation) error {
	if err := t.opts.Limits.ValidateRowMutation(rm); err != nil {
		return err
	}
	if rm.Size()+len(t.id)+64 > commitlog.MaxRecordBytes {
		return &cell.InvalidArgumentError{Field: "mutations", Reason: fmt.Sprintf("row mutation of about %d bytes exceeds the commit log's record limit of %d", rm.Size(), commitlog.MaxRecordBytes)}
	}
	return nil
}

// applyLocked assigns sequence numbers to a validated row mutation, logs it
// and inserts it. enc is rm's record from preencode, or nil. Called under
// writeMu.
func (t *Tablet) applyLocked(rm cell.RowMutation, enc *commitlog.Encoded) (uint64, *commitlog.Commit, error) {
	if t.stopErr != nil {
		return 0, nil, t.stopErr
	}
	schema := t.curSchema()
	if err := t.checkFamilies(rm, schema); err != nil {
		return 0, nil, err
	}
	if enc == nil {
		// Changed in place below: the caller's mutations stay as
		// they were. (A pre-encoded mutation has nothing to change.)
		rm.Mutations = slices.Clone(rm.Mutations)
		if err := addsToMerges(rm, schema); err != nil {
			return 0, nil, err
		}
		rm.AssignTimestamps(t.opts.Clock())
	}
	first := t.lastSeq + 1
	last := t.lastSeq + uint64(len(rm.Mutations))
	var commit *commitlog.Commit
	switch {
	case enc != nil:
		commit = t.opts.Log.AppendEncoded(enc, first)
	case t.opts.Log != nil:
		commit = t.opts.Log.Append(commitlog.Record{Tablet: t.id, FirstSeq: first, Mutation: rm})
	}
	t.insert(rm, first)
	t.lastSeq = last
	t.lastCommit = commit
	if t.mem.Size() >= t.opts.MemtableBytes {
		t.kickFlush()
	}
	return last, commit, nil
}

// curSchema returns the current schema; called under writeMu (which every
// schema change holds) or mu.
func (t *Tablet) curSchema() tabletdesc.Schema {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil {
		return tabletdesc.Schema{}
	}
	return t.cur.schema
}

// finishWrite waits for the write's commit and publishes it.
func (t *Tablet) finishWrite(ctx context.Context, last uint64, commit *commitlog.Commit) error {
	if commit != nil {
		if err := commit.Wait(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				// Not acknowledged; the record may still become
				// durable and visible, which clients must allow
				// for a write that timed out.
				return err
			}
			return t.fail(err)
		}
	}
	if fe := t.failed.Load(); fe != nil {
		return fe
	}
	t.publish(last)
	return nil
}

// publish makes every sequence number up to seq visible to new reads. It
// is called once they are all durable: the log is sequential, so when one
// commit is durable so are all earlier ones.
func (t *Tablet) publish(seq uint64) {
	for {
		cur := t.visible.Load()
		if cur >= seq || t.visible.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// fail puts the tablet in the failed state after a commit-log error.
func (t *Tablet) fail(cause error) error {
	fe := &failedError{tablet: t.id, cause: cause}
	if t.failed.CompareAndSwap(nil, fe) {
		t.opts.Logger.Error("tablet failed: commit log error", "tablet", t.id, "err", cause)
		t.writeMu.Lock()
		if t.stopErr == nil {
			t.stopErr = fe
		}
		t.writeMu.Unlock()
	}
	return t.failed.Load()
}

// ReadModifyWrite reads row and applies the mutations fn returns, atomically
// with respect to every other write of the tablet: no write is ordered
// between the read and the mutations. It returns the row as it is after the
// mutations (as cur when fn returns none — then only once the writes it
// read are durable, so no later read disagrees with the answer). fn runs with the tablet's writes
// blocked, so it must be quick; an error from fn aborts and is returned.
func (t *Tablet) ReadModifyWrite(ctx context.Context, row []byte, fn func(cur cell.Row) ([]cell.Mutation, error)) (cell.Row, error) {
	if err := t.opts.Limits.ValidateRowKey("row_key", row); err != nil {
		return cell.Row{}, err
	}
	if !t.Contains(row) {
		return cell.Row{}, t.notServing(row, "row outside the tablet's range")
	}
	t.writeMu.Lock()
	if t.stopErr != nil {
		err := t.stopErr
		t.writeMu.Unlock()
		return cell.Row{}, err
	}
	// Reading at lastSeq includes writes not yet durable: they are ahead
	// of ours in the log, so ours is acknowledged only after them.
	cur, err := t.readLatestLocked(ctx, row)
	if err != nil {
		t.writeMu.Unlock()
		return cell.Row{}, err
	}
	muts, err := fn(cur)
	if err != nil {
		t.writeMu.Unlock()
		return cur, err
	}
	if len(muts) == 0 {
		// Nothing to write, but the answer (a predicate that did not
		// match, say) was decided on writes that may not be durable
		// yet: wait for them before answering, as a write of ours
		// would have waited. Answering at once let a reader that came
		// after see the row without the write this answer relied on
		// (and the write could still fail).
		seen, commit := t.pendingLocked()
		t.writeMu.Unlock()
		if err := t.finishWrite(ctx, seen, commit); err != nil {
			return cell.Row{}, err
		}
		return cur, nil
	}
	rm := cell.RowMutation{Row: row, Mutations: muts}
	if err := t.validate(rm); err != nil {
		t.writeMu.Unlock()
		return cell.Row{}, err
	}
	last, commit, err := t.applyLocked(rm, nil)
	if err != nil {
		t.writeMu.Unlock()
		return cell.Row{}, err
	}
	after, err := t.readLatestLocked(ctx, row)
	t.writeMu.Unlock()
	if err != nil {
		return cell.Row{}, err
	}
	if err := t.finishWrite(ctx, last, commit); err != nil {
		return cell.Row{}, err
	}
	return after, nil
}

// pendingLocked returns the latest assigned sequence number and the commit
// that makes it durable: the active memtable's last commit, or the frozen
// one's when the active memtable has none yet (nil: nothing to wait for).
// Called under writeMu.
func (t *Tablet) pendingLocked() (uint64, *commitlog.Commit) {
	if t.lastCommit != nil {
		return t.lastSeq, t.lastCommit
	}
	if t.frozen != nil {
		return t.lastSeq, t.frozen.commit
	}
	return t.lastSeq, nil
}

// readLatestLocked reads row at the latest assigned sequence number; called
// under writeMu.
func (t *Tablet) readLatestLocked(ctx context.Context, row []byte) (cell.Row, error) {
	t.mu.RLock()
	v := t.cur
	if v == nil {
		t.mu.RUnlock()
		return cell.Row{}, t.notServing(nil, "closed")
	}
	v.ref()
	t.mu.RUnlock()
	defer v.unref()
	r, ok, err := t.readRow(ctx, v, t.lastSeq, row, ReadOptions{})
	if !ok {
		r = cell.Row{Key: bytes.Clone(row)}
	}
	return r, err
}

// SetSchema changes the tablet's schema: families added, GC policies
// changed, families dropped (their cells disappear at once and are removed
// by the next major compaction; a family re-created later starts empty).
// A family whose aggregator differs from its old one counts as dropped and
// re-created. A family may not move to another locality group.
func (t *Tablet) SetSchema(ctx context.Context, s tabletdesc.Schema) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s = s.Clone()
	t.lockMaint()
	defer t.unlockMaint()
	t.writeMu.Lock()
	t.mu.Lock()
	if t.cur == nil {
		t.mu.Unlock()
		t.writeMu.Unlock()
		return t.notServing(nil, "closed")
	}
	old := t.cur
	for name, f := range s.Families {
		if of, ok := old.schema.Families[name]; ok && of.Group() != f.Group() {
			t.mu.Unlock()
			t.writeMu.Unlock()
			return fmt.Errorf("tablet %s: family %q cannot move from locality group %q to %q", t.id, name, of.Group(), f.Group())
		}
	}
	drops := maps.Clone(old.drops)
	for name, of := range old.schema.Families {
		// A family whose aggregator changed was dropped and created
		// again (the admin API changes no family's type in place): its
		// old cells, in another encoding, must not be folded with the
		// new ones.
		if f, ok := s.Families[name]; !ok || f.Aggregate != of.Aggregate {
			t.lastSeq++
			drops[name] = t.lastSeq
		}
	}
	t.cur = newVersion(old.mem, old.frozen, old.groups, s, drops)
	lastSeq := t.lastSeq
	t.mu.Unlock()
	t.writeMu.Unlock()
	old.unref()

	st := t.state.Clone()
	st.Families = slices.Sorted(maps.Keys(s.Families))
	st.Drops = maps.Clone(drops)
	st.LastSeq = max(st.LastSeq, lastSeq)
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		return err
	}
	t.setState(st)
	return nil
}

// acquire returns the current version, referenced, and the snapshot to
// read it at. Both are taken under mu: every file in the version was
// installed after its entries were published, and every published entry is
// in the version's memtables or files.
func (t *Tablet) acquire() (*version, uint64, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil {
		return nil, 0, t.notServing(nil, "closed")
	}
	t.cur.ref()
	return t.cur, t.visible.Load(), nil
}

// install makes v the current version; called under mu (and writeMu when
// the memtables change).
func (t *Tablet) install(v *version) {
	old := t.cur
	t.cur = v
	if old != nil {
		old.unref()
	}
}

func (t *Tablet) kickBackground() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// RequestFlush asks the tablet's flusher to flush the active memtable
// however full it is, unpaced, and returns at once. The server calls it
// when the memtables of all its tablets together pass its budget (HBase's
// global memstore limit) on the tablets holding the most. An empty
// memtable is not flushed.
func (t *Tablet) RequestFlush() {
	t.flushWanted.Store(true)
	t.kickFlush()
}

// MemtableBytes returns the size of the active memtable and of the one
// being flushed (0 when none): what the tablet holds in memory besides
// caches. It waits for no flush or merge.
func (t *Tablet) MemtableBytes() (active, frozen int64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil {
		return 0, 0
	}
	active = t.cur.mem.Size()
	if t.cur.frozen != nil {
		frozen = t.cur.frozen.Size()
	}
	return active, frozen
}

func (t *Tablet) kickFlush() {
	select {
	case t.flush <- struct{}{}:
	default:
	}
}

// background runs merging compactions when flushes ask for them, and a
// major compaction every MajorInterval (periodicMajor); its flusher
// goroutine runs minor compactions when writes ask for them.
func (t *Tablet) background() {
	flusherDone := make(chan struct{})
	go t.flusher(flusherDone)
	defer func() {
		<-flusherDone
		close(t.bgDone)
	}()
	var majorDue <-chan time.Time
	armMajor := func() {
		if d, ok := nextMajorWait(t.opts.MajorInterval, mrand.Float64()); ok {
			majorDue = time.After(d)
		}
	}
	armMajor()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		case <-majorDue:
			armMajor()
			// A tablet that closes does not wait for the rest of a
			// periodic major: it is cut short, and the next comes an
			// interval after the tablet is opened again.
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-t.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := t.periodicMajor(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				t.opts.Logger.Error("periodic major compaction failed", "tablet", t.id, "err", err)
			}
			continue
		}
		if err := t.maintain(context.Background()); err != nil {
			t.opts.Logger.Error("background compaction failed", "tablet", t.id, "err", err)
			select {
			case <-t.stop:
				return
			case <-time.After(time.Second):
				t.kickBackground()
			}
		}
	}
}

// flusher flushes the memtable once it is full, beside whatever merge
// the background loop runs, until the tablet stops; it closes done.
func (t *Tablet) flusher(done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-t.stop:
			return
		case <-t.flush:
		}
		flushed, err := t.flushIfFull(context.Background())
		if err != nil {
			t.opts.Logger.Error("background flush failed", "tablet", t.id, "err", err)
			select {
			case <-t.stop:
				return
			case <-time.After(time.Second):
				t.kickFlush()
			}
			continue
		}
		if flushed {
			t.kickBackground() // one more SSTable: a merge may be due
		}
	}
}

// flushIfFull flushes the memtable if it is full, a frozen one is left
// from a flush that failed, or a flush was requested (RequestFlush),
// paced by the active memtable's fill (flushPressure) — a requested flush
// unpaced: the server's memory is what presses. It holds flushMu only.
func (t *Tablet) flushIfFull(ctx context.Context) (bool, error) {
	wanted := t.flushWanted.Swap(false)
	if wanted {
		ctx = withPacing(ctx, func() float64 { return 1 })
	} else {
		ctx = withPacing(ctx, t.flushPressure)
	}
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	if t.closed.Load() || t.failed.Load() != nil {
		return false, nil
	}
	t.writeMu.Lock()
	full := t.mem.Size() >= t.opts.MemtableBytes || t.frozen != nil || wanted && t.mem.Len() > 0
	t.writeMu.Unlock()
	if !full {
		return false, nil
	}
	_, err := t.flushLocked(ctx)
	return err == nil, err
}

// periodicMajor is the major compaction the tablet runs every
// MajorInterval: each group with SSTables rewritten into one, resolved as
// Compact(major) does, paced as background work is. The memtable is not
// flushed first: it holds only newer writes, which shadow what they
// shadow whatever the files hold.
func (t *Tablet) periodicMajor(ctx context.Context) error {
	ctx = withPacing(ctx, t.mergePressure)
	t.maintMu.Lock()
	defer t.maintMu.Unlock()
	if t.closed.Load() || t.failed.Load() != nil {
		return nil
	}
	for _, g := range t.groupNames() {
		if t.groupLen(g) == 0 {
			continue
		}
		if err := t.majorLocked(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// lockMaint locks maintMu and flushMu for a caller that is not the
// background loop or its flusher, counted in maintWaiters while it waits
// so that paced background work holding either speeds up (pressure).
func (t *Tablet) lockMaint() {
	t.maintWaiters.Add(1)
	t.maintMu.Lock()
	t.flushMu.Lock()
	t.maintWaiters.Add(-1)
}

// unlockMaint unlocks what lockMaint locked.
func (t *Tablet) unlockMaint() {
	t.flushMu.Unlock()
	t.maintMu.Unlock()
}

// flushPressure is how urgently a background flush must finish, for
// Options.Pacer (pressureOf): the active memtable's fill past half its
// size (0 at MemtableBytes/2, 1 at MemtableBytes: the next flush is due
// and cannot start before this one ends; a memtable that writes left
// half full is no reason to hurry).
func (t *Tablet) flushPressure() float64 {
	return t.pressureOf(func(v *version) float64 {
		return 2*float64(v.mem.Size())/float64(t.opts.MemtableBytes) - 1
	})
}

// mergePressure is the same for a background merge: the SSTable pile-up
// (1 at twice MaxSSTables in a group: reads then look at that many
// files). The memtable's fill does not hurry a merge: the flush it needs
// runs beside the merge.
func (t *Tablet) mergePressure() float64 {
	return t.pressureOf(func(v *version) float64 {
		p := math.Inf(-1)
		for _, g := range v.groups {
			p = max(p, float64(len(g.files)-t.opts.MaxSSTables)/float64(t.opts.MaxSSTables))
		}
		return p
	})
}

// pressureOf is 1 or more (unpaced) when a caller waits for the
// maintenance locks or the tablet is closing, else what of says of the
// current version.
func (t *Tablet) pressureOf(of func(*version) float64) float64 {
	if t.maintWaiters.Load() > 0 || t.closed.Load() {
		return math.Inf(1)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil {
		return math.Inf(1)
	}
	return of(t.cur)
}

// maintain merges groups over MaxSSTables and, when the server asked for
// an idle-time merge (MergeWhileIdle), the newest files of groups that
// size-tiering lets go together (idleMergeCount); paced (Options.Pacer)
// if requests arrive meanwhile.
func (t *Tablet) maintain(ctx context.Context) error {
	ctx = withPacing(ctx, t.mergePressure)
	t.maintMu.Lock()
	defer t.maintMu.Unlock()
	if t.closed.Load() || t.failed.Load() != nil {
		return nil
	}
	idle := t.idleMerge.Swap(false)
	for _, g := range t.groupNames() {
		n := t.groupLen(g)
		k := 0
		switch {
		case n > t.opts.MaxSSTables:
			k = t.pickMergeCount(g)
		case idle:
			k = t.idleMergeCount(g)
		}
		if k >= 2 {
			if err := t.autoMergeLocked(ctx, g, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// MergeWhileIdle asks the background loop for an idle-time merge and
// returns at once: in each locality group, the newest SSTables that
// size-tiering lets go together (idleMergeCount) are merged, when there
// are two or more. Every SSTable that may hold a row is one more file a
// point read of it consults — after a few rounds of overwrites, each of a
// group's files holds most of its rows, and random reads cost half again
// as much — while the merges due by count (MaxSSTables) wait for eight.
// The server calls this when it has served nothing for a while
// (tabletserver.HostOptions.IdleMergeAfter): idle cores, and reads after a
// burst of writes find fewer files. A merge still running when requests
// arrive is paced like any other.
func (t *Tablet) MergeWhileIdle() {
	t.idleMerge.Store(true)
	t.kickBackground()
}

// idleMergeRatio bounds an idle-time merge's write amplification: the
// next older file joins the newest ones only while it is at most this
// many times their size together, so that a big old file is rewritten
// only once enough has piled up in front of it (size-tiered, as
// pickMergeCount).
const idleMergeRatio = 4

// idleMergeCount is how many of group g's newest SSTables an idle-time
// merge merges: the newest, then each next older one while it is at most
// idleMergeRatio times the size of those before it together. Fewer than
// two means none.
func (t *Tablet) idleMergeCount(g string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil || t.cur.groups[g] == nil {
		return 0
	}
	return idleMergeCountOf(t.cur.groups[g].files)
}

func idleMergeCountOf(files []*tableFile) int {
	if len(files) == 0 {
		return 0
	}
	k, sum := 1, files[0].meta.Size
	for k < len(files) && files[k].meta.Size <= idleMergeRatio*sum {
		sum += files[k].meta.Size
		k++
	}
	return k
}

// Close stops the tablet: it waits for background work, flushes the
// memtable (so that reopening needs no log), and releases its files once
// the reads under way end. Writes and reads after Close return
// ErrNotServing.
func (t *Tablet) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(t.stop)
	<-t.bgDone
	t.lockMaint()
	defer t.unlockMaint()
	t.writeMu.Lock()
	if t.stopErr == nil {
		t.stopErr = t.notServing(nil, "closed")
	}
	t.writeMu.Unlock()
	var err error
	if t.failed.Load() == nil && len(t.state.SplitInto) == 0 {
		_, err = t.flushLocked(context.Background())
	}
	t.release()
	return err
}

// release drops the tablet's reference to its current version, and what
// the state store keeps of the tablet (Forgetter): it saves no state any
// more.
func (t *Tablet) release() {
	t.mu.Lock()
	v := t.cur
	t.cur = nil
	t.mu.Unlock()
	if v != nil {
		v.unref()
	}
	if f, ok := t.opts.StateStore.(Forgetter); ok {
		f.Forget(t.id)
	}
}

// abandon stops the tablet as a crash would: no flush, no state saved.
// Tests use it to simulate kill -9.
func (t *Tablet) abandon() {
	if !t.closed.CompareAndSwap(false, true) {
		return
	}
	close(t.stop)
	<-t.bgDone
	t.lockMaint()
	defer t.unlockMaint()
	t.writeMu.Lock()
	t.stopErr = t.notServing(nil, "crashed")
	t.writeMu.Unlock()
	t.release()
}

// GroupStats describe one locality group's SSTables.
type GroupStats struct {
	SSTables int
	Bytes    int64
}

// Stats are a tablet's gauges and counters.
type Stats struct {
	MemtableBytes int64 // active memtable
	FrozenBytes   int64 // memtable being flushed
	Groups        map[string]GroupStats
	LastSeq       uint64 // highest sequence number assigned
	VisibleSeq    uint64 // highest published
	Flushes       uint64 // minor compactions
	Merges        uint64 // merging compactions
	// CollectingMerges are the background merging compactions, which
	// drop what they may of what their files shadow and the GC policies
	// collect (autoMergeLocked; in Merges too).
	CollectingMerges uint64
	// FlushCollected are the entries of frozen memtables that flushes
	// left out of their SSTables: older writes of a version and what the
	// GC policies collect (flushcollect.go).
	FlushCollected uint64
	Majors         uint64 // major compactions
	ScanCache      ScanCacheStats
	BlockCache     sstable.CacheStats
}

// Stats returns the tablet's current figures.
func (t *Tablet) Stats() Stats {
	s := Stats{Groups: make(map[string]GroupStats), VisibleSeq: t.visible.Load(),
		Flushes: t.flushes.Load(), Merges: t.merges.Load(), CollectingMerges: t.collectingMerges.Load(), FlushCollected: t.flushCollected.Load(), Majors: t.majors.Load()}
	t.writeMu.Lock()
	s.LastSeq = t.lastSeq
	t.writeMu.Unlock()
	if v, _, err := t.acquire(); err == nil {
		s.MemtableBytes = v.mem.Size()
		if v.frozen != nil {
			s.FrozenBytes = v.frozen.Size()
		}
		for name, g := range v.groups {
			gs := GroupStats{SSTables: len(g.files)}
			for _, f := range g.files {
				gs.Bytes += f.meta.Size
			}
			s.Groups[name] = gs
		}
		v.unref()
	}
	if t.opts.ScanCache != nil {
		s.ScanCache = t.opts.ScanCache.Stats()
	}
	if t.opts.Cache != nil {
		s.BlockCache = t.opts.Cache.Stats()
	}
	return s
}
