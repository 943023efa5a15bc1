package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/ctxtime"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// The Host's background loop: the memtable budget (membudget.go), the
// split policy (a tablet past SplitBytes is split by reference, its
// children sharing its SSTables) and the truncation of the commit log to
// the oldest redo point.

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

// background runs the memtable budget, splits, log truncation and
// idle-time merges until Close.
func (h *Host) background() {
	defer close(h.done)
	splitTick := time.NewTicker(h.opts.SplitCheckInterval)
	defer splitTick.Stop()
	truncTick := time.NewTicker(h.opts.LogTruncateInterval)
	defer truncTick.Stop()
	var idleTick <-chan time.Time
	if h.opts.Pacer != nil && h.opts.IdleMergeAfter > 0 {
		t := time.NewTicker(max(h.opts.IdleMergeAfter/4, 10*time.Millisecond))
		defer t.Stop()
		idleTick = t.C
	}
	// releasing runs releaseMetadataLog beside the loop (see
	// releaseMetadata); waited for after cancel, before done closes.
	var releasing sync.WaitGroup
	defer releasing.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.stop
		cancel()
	}()
	var metaTick <-chan time.Time
	if h.opts.Log != nil && h.opts.MetadataLogRelease > 0 {
		t := time.NewTicker(h.opts.MetadataLogRelease)
		defer t.Stop()
		metaTick = t.C
	}
	var lastCheck time.Time
	var truncatedAt uint64    // the log's tail segment at the last truncation
	var metaReleasedAt uint64 // the log's tail segment at the last METADATA release
	var metaReleasing atomic.Bool
	// releaseMetadata runs beside the loop, one at a time: a flush that
	// waits on a stalled store must not hold up the memtable budget and
	// the splits.
	releaseMetadata := func() {
		if !metaReleasing.CompareAndSwap(false, true) {
			return
		}
		metaReleasedAt = h.opts.Log.Tail().Segment
		releasing.Go(func() {
			defer metaReleasing.Store(false)
			h.releaseMetadataLog(ctx)
		})
	}
	truncate := func() {
		if h.opts.Log != nil {
			truncatedAt = h.opts.Log.Tail().Segment
		}
		if err := h.TruncateLog(ctx); err != nil && ctx.Err() == nil {
			h.log.Error("commit log truncation failed", "err", err)
		}
	}
	for {
		// While writes wait for flushes (the memtable budget), look
		// again every 50 ms: no write kicks the loop meanwhile.
		var recheck <-chan time.Time
		if h.gate.isShut() {
			recheck = time.After(50 * time.Millisecond)
		}
		select {
		case <-h.stop:
			return
		case <-recheck:
			h.enforceMemtableBudget()
			continue
		case <-splitTick.C:
		case <-h.kick:
			// Writes kick often; a check every 50 ms is plenty.
			if time.Since(lastCheck) < 50*time.Millisecond {
				if ctxtime.Sleep(ctx, 50*time.Millisecond) != nil {
					return
				}
			}
		case <-truncTick.C:
			truncate()
			continue
		case <-metaTick:
			releaseMetadata()
			continue
		case <-idleTick:
			if h.opts.Pacer.IdleFor() >= h.opts.IdleMergeAfter {
				h.mergeWhileIdle()
			}
			continue
		}
		lastCheck = time.Now()
		h.enforceMemtableBudget()
		h.splitBig(ctx)
		// Segments of an object-store log end after a number of flushes
		// too (commitlog.Options.SegmentObjects): at a few hundred group
		// commits a second they come every few seconds, and waiting for
		// the ticker would let the log grow by a minute's objects, all
		// read at a crash.
		if h.opts.Log != nil && h.opts.Log.Tail().Segment >= truncatedAt+uint64(max(h.opts.LogFlushSegments/2, 1)) {
			truncate()
		}
		if metaTick != nil && h.opts.Log.Tail().Segment > metaReleasedAt {
			releaseMetadata()
		}
	}
}

// servedTables returns the open tables, in no order: a snapshot taken
// under h.mu, so that the background's walks over them hold no lock.
func (h *Host) servedTables() []*servedTable {
	h.mu.RLock()
	defer h.mu.RUnlock()
	tables := make([]*servedTable, 0, len(h.tables))
	for _, st := range h.tables {
		tables = append(tables, st)
	}
	return tables
}

// mergeWhileIdle asks every open tablet for an idle-time merge
// (tablet.MergeWhileIdle); a tablet with nothing to merge returns from it
// at once, so asking again on each tick of an idle spell is cheap, and it
// takes in the files of flushes that end during the spell.
func (h *Host) mergeWhileIdle() {
	for _, st := range h.servedTables() {
		for _, tb := range st.list() {
			tb.MergeWhileIdle()
		}
	}
}

// splitBig splits every open tablet whose stored size passed SplitBytes.
func (h *Host) splitBig(ctx context.Context) {
	for _, st := range h.servedTables() {
		limit := h.splitBytes(st.meta.Load().ID)
		for _, tb := range st.list() {
			if tb.ID() == meta.RootTabletID {
				continue // the root tablet never splits
			}
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
			if stored < limit {
				continue
			}
			h.noSplitMu.Lock()
			was, measured := h.noSplit[tb]
			h.noSplitMu.Unlock()
			if measured && stored < was+limit/8 {
				continue
			}
			if own, err := tabletBytes(tb); err != nil || own < limit {
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

// splitBytes is the split size of table id's tablets: METADATA's own
// (HostOptions.MetadataSplitBytes) or everyone else's.
func (h *Host) splitBytes(id meta.TableID) int64 {
	if id == meta.MetadataTable {
		return h.opts.MetadataSplitBytes
	}
	return h.opts.SplitBytes
}

// SplitTablet splits an open tablet of a table at a middle key, opens its
// children and swaps them in for it. Requests that meet the parent while it
// splits wait for the children (see withTablet). With HostOptions.OnSplit
// the split is then reported (see reportSplit). A METADATA tablet splits
// between two of its rows (tablet.Tablet.SplitBetweenRows); the root
// tablet never splits (an error matching tablet.ErrCannotSplit): it holds
// the rows of the other METADATA tablets, and its location is the lock
// service's root key (paper §5.1).
func (h *Host) SplitTablet(ctx context.Context, id meta.TableID, tabletID string) error {
	_, err := h.SplitTabletAt(ctx, id, tabletID, nil)
	return err
}

// SplitTabletAt is SplitTablet at row key (nil: a middle key chosen by
// size), returning the children. A key not strictly inside the tablet's
// range is an error and changes nothing. It is the forced split of the
// admin API (the cluster's TabletOps service). METADATA tablets split
// only at keys they choose (a key is an error matching
// tablet.ErrCannotSplit), the root tablet never.
func (h *Host) SplitTabletAt(ctx context.Context, id meta.TableID, tabletID string, key []byte) ([]TabletInfo, error) {
	if id == meta.MetadataTable {
		switch {
		case tabletID == meta.RootTabletID:
			return nil, fmt.Errorf("tablet %s: the root tablet never splits: %w", tabletID, tablet.ErrCannotSplit)
		case key != nil:
			return nil, fmt.Errorf("tablet %s: METADATA tablets split only between rows they choose: %w", tabletID, tablet.ErrCannotSplit)
		}
	}
	children, err := h.splitTablet(ctx, id, tabletID, key)
	if err != nil {
		return nil, err
	}
	if h.opts.OnSplit != nil {
		h.reportSplit(ctx, id, tabletID, children)
	}
	return children, nil
}

// CompactTablet runs a compaction of the open tablet tabletID of table id:
// major (every SSTable of each group rewritten into one, within the
// tablet's range, dropping deleted data) or merging.
func (h *Host) CompactTablet(ctx context.Context, id meta.TableID, tabletID string, major bool) error {
	st, err := h.table(id)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.list(), func(tb *tablet.Tablet) bool { return tb.ID() == tabletID })
	if i < 0 {
		return fmt.Errorf("tablet %s of table %s: %w", tabletID, id, ErrTabletNotHere)
	}
	return st.list()[i].Compact(ctx, major)
}

// ErrTabletNotHere: the Host does not serve the tablet asked for.
var ErrTabletNotHere = errors.New("tabletserver: tablet not served here")

// splitTablet is SplitTabletAt without the report: it returns the children.
func (h *Host) splitTablet(ctx context.Context, id meta.TableID, tabletID string, key []byte) ([]TabletInfo, error) {
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
		return nil, fmt.Errorf("tablet %s of table %s: %w", tabletID, id, ErrTabletNotHere)
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
	split := func() (tablet.SplitResult, error) { return parent.SplitAt(ctx, key) }
	if id == meta.MetadataTable {
		// Between two rows: a lookup key then never falls after the last
		// row of the METADATA tablet holding it (one read per level).
		split = func() (tablet.SplitResult, error) { return parent.SplitBetweenRows(ctx) }
	}
	res, err := split()
	if err != nil {
		return nil, err
	}
	h.forgetNoSplit(parent)
	t := *st.meta.Load()
	// The two children open at once: their rows are unserved until both
	// are open, and opening reads each file's index and filters (and an
	// in-memory group's files whole), work the two cores share.
	// They adopt the parent's open files rather than open them again.
	var opened [2][]*tablet.Tablet
	var errs [2]error
	var wg sync.WaitGroup
	for i, c := range []tabletdesc.State{res.Left, res.Right} {
		wg.Go(func() { opened[i], errs[i] = h.openTabletAdopting(ctx, t, c.ID, res.Files) })
	}
	wg.Wait()
	res.Files.Release()
	children := slices.Concat(opened[0], opened[1])
	if err := errors.Join(errs[0], errs[1]); err != nil {
		// The split is committed (the parent's state names its
		// children), but the children did not open — their states could
		// not be saved, the server's lease having lapsed, say. The
		// parent leaves the list as an unload would: the master, no
		// longer seeing it served here, assigns it again, and loading a
		// split parent opens its children (openTabletFrom). Kept in the
		// list, closed, it would answer "not serving" for ever, and the
		// master would wait on it.
		for _, c := range children {
			_ = c.Close()
		}
		st.set(slices.Concat(tabs[:i], tabs[i+1:]))
		h.log.Error("opening split children failed; the tablet is left for the master to assign again", "table", id.String(), "tablet", tabletID, "err", err)
		return nil, err
	}
	st.set(slices.Concat(tabs[:i], children, tabs[i+1:]))
	h.metrics.splits.Inc()
	unserved := time.Since(res.Stopped)
	h.log.Info("tablet split", "table", id.String(), "tablet", tabletID, "key", string(res.Key),
		"left", res.Left.ID, "right", res.Right.ID, "unserved", unserved, "flushed_unserved_bytes", res.UnservedFlushBytes)
	infos := make([]TabletInfo, 0, len(children))
	for _, c := range children {
		info := tabletInfo(c)
		info.TableCreated = t.Created
		infos = append(infos, info)
	}
	return infos, nil
}

// TruncateLog deletes the commit log's segments that no open tablet needs:
// those wholly before the oldest redo point of the open tablets. Tablets
// whose redo points lie HostOptions.LogFlushSegments or more segments
// before the log's tail are made to release it first (tablet.ReleaseLog:
// flushed, or their redo point moved if idle), so that a tablet taking
// few writes — a METADATA tablet, a small table — does not pin the log.
// With no tablet open, or while a table is being opened, it does nothing
// (unopened tablets of a crashed run may still need the log).
func (h *Host) TruncateLog(ctx context.Context) error {
	if h.opts.Log == nil || h.opening.Load() > 0 {
		return nil
	}
	tail := h.opts.Log.Tail()
	var pinning []*tablet.Tablet
	for _, tb := range h.openTablets() {
		if p := tb.State().RedoPoint; p.Segment+uint64(h.opts.LogFlushSegments) <= tail.Segment {
			pinning = append(pinning, tb)
		}
	}
	for _, tb := range pinning {
		if err := tb.ReleaseLog(ctx); err != nil && !errors.Is(err, tabletdesc.ErrNotServing) {
			// It keeps its redo point: the log is truncated up to it.
			h.log.Warn("flushing a tablet that holds old commit-log segments", "tablet", tb.ID(), "err", err)
		}
	}
	if len(pinning) > 0 {
		h.metrics.logReleases.Add(float64(len(pinning)))
		h.log.Info("flushed tablets that held old commit-log segments", "tablets", len(pinning), "log_segment", tail.Segment)
	}
	var oldest *tabletdesc.LogPosition
	for _, tb := range h.openTablets() {
		p := tb.State().RedoPoint
		if oldest == nil || p.Compare(*oldest) < 0 {
			oldest = &p
		}
	}
	// The releases take a while: a table may have begun to open since the
	// check above (its tablets may need records before every redo point
	// read here).
	if oldest == nil || h.opening.Load() > 0 {
		return nil
	}
	return h.opts.Log.Truncate(ctx, *oldest)
}

// releaseMetadataLog makes the open METADATA tablets whose redo point is
// behind the log's tail release the log (see
// HostOptions.MetadataLogRelease). A failure is logged; the tablet keeps
// its redo point until the next try.
func (h *Host) releaseMetadataLog(ctx context.Context) {
	h.mu.RLock()
	st := h.tables[meta.MetadataTable]
	h.mu.RUnlock()
	if st == nil {
		return
	}
	tail := h.opts.Log.Tail()
	for _, tb := range st.list() {
		if tb.State().RedoPoint.Compare(tail) >= 0 {
			continue
		}
		if err := tb.ReleaseLog(ctx); err != nil {
			if !errors.Is(err, tabletdesc.ErrNotServing) && ctx.Err() == nil {
				h.log.Warn("releasing the commit log of a METADATA tablet", "tablet", tb.ID(), "err", err)
			}
			continue
		}
		h.metrics.metaReleases.Inc()
	}
}

// openTablets returns the tablets open on the host, of every table.
func (h *Host) openTablets() []*tablet.Tablet {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []*tablet.Tablet
	for _, st := range h.tables {
		out = append(out, st.list()...)
	}
	return out
}
