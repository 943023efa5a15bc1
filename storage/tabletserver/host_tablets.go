package tabletserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tabuladb/tabula/internal/ctxtime"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// This file is the Host's cluster mode (HostOptions.Partial): the master
// assigns individual tablets, which the tablet server loads and unloads
// one by one, and the Host reports what it holds and the splits it made.

// ServedTablet describes a tablet the Host serves, is loading or is
// unloading (ServedTablets).
type ServedTablet struct {
	Table meta.TableID
	ID    string
	// Start and End bound the tablet's rows to [Start, End); nil End is
	// the end of the table. For a tablet being loaded they are the range
	// LoadTablet was given.
	Start, End []byte
	// Bytes estimates the tablet's own rows, as TabletInfo.Bytes; zero
	// while loading.
	Bytes int64
	// Loading: LoadTablet was called and has not returned. Unloading:
	// UnloadTablet was called and has not returned (the tablet no longer
	// serves; it is being flushed and closed). Splitting: the Host is
	// splitting the tablet.
	Loading, Unloading, Splitting bool
	// SharesFiles: some SSTable of the tablet holds rows outside its range
	// (tabletdesc.State.SharesFiles), so Bytes undercounts what it stores.
	SharesFiles bool
}

// errHostClosed is returned by the calls that open tablets on a closed Host.
var errHostClosed = errors.New("tabletserver: host closed")

// loadOp is a LoadTablet call under way.
type loadOp struct {
	table      meta.TableID
	id         string // the tablet asked for (its split children share the op)
	start, end []byte
	done       chan struct{}
	err        error // set before done is closed
}

// unloadOp is an UnloadTablet call under way.
type unloadOp struct {
	table meta.TableID
	tb    *tablet.Tablet
	done  chan struct{}
}

// ReplayLog is the commit log a loading tablet replays its writes after its
// redo point from (LoadTablet): the master's master.RecoverySource, resolved
// to the log's location.
type ReplayLog struct {
	// Log is the commit log to replay from the tablet's redo point: the
	// log of the server that served the tablet last, if it died. The zero
	// value replays nothing: the tablet was unloaded cleanly (flushed), or
	// is new.
	Log commitlog.Options
	// Sorted, when its Store is set, is the sorted copy of Log (made by
	// commitlog.SortSegment for every segment, as the master has the dead
	// server's log sorted when it recovers many of its tablets): the
	// tablet then reads only its own records from it instead of the whole
	// log (tablet.Options.SortedLog). A segment the copy lacks fails the
	// load (commitlog.ErrNotSorted).
	Sorted commitlog.SortedLog
}

// recovers reports whether rec names a log to replay.
func (rec ReplayLog) recovers() bool { return rec.Log.Dir != "" || rec.Log.Store != nil }

// LoadTablet starts serving tablet ref of table t: it opens the tablet
// (with t's schema) and adds it to the table's routing, creating the
// table's entry if this is its first tablet here. recover says which
// commit log to replay from the tablet's redo point, and whether from its
// sorted copy. A tablet whose state says it was split is not served: its
// children are loaded instead (recursively), recovering from the same log.
//
// LoadTablet is idempotent: a tablet already served (or whose split
// children are) returns nil; a tablet being loaded by another call waits
// for that load and returns its outcome; a tablet being unloaded is
// loaded once the unload finished. A t newer (Generation) than the entry
// the Host holds replaces it, and its schema is set on the table's other
// tablets, as UpdateSchema does. The commit log is not truncated while a
// load is under way (the tablet may need records before every open
// tablet's redo point).
func (h *Host) LoadTablet(ctx context.Context, t meta.Table, ref meta.TabletRef, recover ReplayLog) error {
	if err := tablet.ValidateID(ref.ID); err != nil {
		return err
	}
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errHostClosed
		}
		if op := h.loads[ref.ID]; op != nil {
			h.mu.Unlock()
			if err := waitDone(ctx, op.done); err != nil {
				return err
			}
			if op.id != ref.ID {
				// Loaded as a split child of another load: look again.
				continue
			}
			return op.err
		}
		if u := h.unloads[ref.ID]; u != nil {
			h.mu.Unlock()
			if err := waitDone(ctx, u.done); err != nil {
				return err
			}
			continue
		}
		if h.servesLocked(t.ID, ref.ID) {
			h.mu.Unlock()
			return h.updateMeta(ctx, t)
		}
		op := &loadOp{table: t.ID, id: ref.ID, start: bytes.Clone(ref.Start), end: bytes.Clone(ref.End), done: make(chan struct{})}
		h.loads[ref.ID] = op
		h.opening.Add(1)
		h.mu.Unlock()

		op.err = h.load(ctx, t, ref, recover, op)
		h.mu.Lock()
		for id, o := range h.loads {
			if o == op {
				delete(h.loads, id)
			}
		}
		h.mu.Unlock()
		h.opening.Add(-1)
		close(op.done)
		return op.err
	}
}

func waitDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// servesLocked reports whether tablet id of table is in the table's
// routing. Called under h.mu.
func (h *Host) servesLocked(table meta.TableID, id string) bool {
	st := h.tables[table]
	return st != nil && !st.gone.Load() &&
		slices.ContainsFunc(st.list(), func(tb *tablet.Tablet) bool { return tb.ID() == id })
}

// updateMeta stores t as the table's entry if it is newer than the one
// held, and sets its schema on the table's tablets.
func (h *Host) updateMeta(ctx context.Context, t meta.Table) error {
	st, err := h.table(t.ID)
	if err != nil {
		return nil // unloaded meanwhile: nothing to update
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if t.Generation <= st.meta.Load().Generation {
		return nil
	}
	st.meta.Store(&t)
	var errs []error
	for _, tb := range st.list() {
		errs = append(errs, tb.SetSchema(ctx, t.Schema()))
	}
	return errors.Join(errs...)
}

// load opens ref (or its split children) for op and inserts the tablets
// into the routing.
func (h *Host) load(ctx context.Context, t meta.Table, ref meta.TabletRef, recover ReplayLog, op *loadOp) error {
	tabs, err := h.openForLoad(ctx, t, ref.ID, ref.Start, ref.End, recover, op, nil)
	if err != nil {
		closeAll(tabs)
		return err
	}
	if len(tabs) == 0 {
		return nil // split, and the children are served already
	}
	if err := h.insertTablets(ctx, t, tabs); err != nil {
		closeAll(tabs)
		return err
	}
	h.log.Info("tablet loaded", "table", t.ID.String(), "tablet", ref.ID, "tablets", len(tabs),
		"recovered", recover.recovers(), "sorted", recover.Sorted.Store != nil)
	return nil
}

func closeAll(tabs []*tablet.Tablet) {
	for _, tb := range tabs {
		_ = tb.Close()
	}
}

// openForLoad opens tablet id recovering as recover says, or,
// when it was split, those of its children no other call serves or loads
// (claimed for op, so that no tablet is ever opened twice), appending
// them to out in range order.
func (h *Host) openForLoad(ctx context.Context, t meta.Table, id string, start, end []byte, recover ReplayLog, op *loadOp, out []*tablet.Tablet) ([]*tablet.Tablet, error) {
	opts := h.tabletOptions(t, id, start, end)
	opts.LogOptions, opts.SortedLog = recover.Log, recover.Sorted
	tb, err := tablet.Open(ctx, opts)
	var se *tablet.SplitError
	if errors.As(err, &se) {
		for _, child := range se.Children {
			if !h.claim(t.ID, child, op) {
				continue
			}
			// The children's states carry their ranges.
			if out, err = h.openForLoad(ctx, t, child, nil, nil, recover, op, out); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("load tablet %s of table %s: %w", id, t.ID, err)
	}
	return append(out, tb), nil
}

// claim records that op opens tablet id; false when the tablet is served
// or being loaded or unloaded already.
func (h *Host) claim(table meta.TableID, id string, op *loadOp) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loads[id] != nil || h.unloads[id] != nil || h.servesLocked(table, id) {
		return false
	}
	h.loads[id] = op
	return true
}

// insertTablets adds opened tablets to the routing of table t, creating
// the table's entry when needed. The tablets must not overlap the ones
// served; on error the caller closes them.
func (h *Host) insertTablets(ctx context.Context, t meta.Table, tabs []*tablet.Tablet) error {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errHostClosed
		}
		st := h.tables[t.ID]
		if st == nil || st.gone.Load() {
			st = &servedTable{}
			st.meta.Store(&t)
			st.set(nil)
			h.tables[t.ID] = st
		}
		h.mu.Unlock()

		st.mu.Lock()
		if st.dropped || st.gone.Load() {
			// Dropped, closed or emptied since: the loop sees the
			// Host closed or makes a fresh entry.
			st.mu.Unlock()
			continue
		}
		err := h.insertLocked(ctx, st, t, tabs)
		st.mu.Unlock()
		return err
	}
}

// insertLocked is insertTablets under st.mu.
func (h *Host) insertLocked(ctx context.Context, st *servedTable, t meta.Table, tabs []*tablet.Tablet) error {
	merged := slices.Concat(st.list(), tabs)
	slices.SortFunc(merged, func(a, b *tablet.Tablet) int { return bytes.Compare(a.Range().Start, b.Range().Start) })
	for i := 1; i < len(merged); i++ {
		// Sorted by start: a tablet overlaps one before it when it
		// starts before the previous one ends.
		if merged[i-1].Range().EndsAfter(merged[i].Range().Start) {
			return fmt.Errorf("tablet %s of table %s overlaps tablet %s served here", merged[i].ID(), t.ID, merged[i-1].ID())
		}
	}
	cur := *st.meta.Load()
	switch {
	case t.Generation > cur.Generation:
		st.meta.Store(&t)
		for _, tb := range st.list() {
			if err := tb.SetSchema(ctx, t.Schema()); err != nil {
				h.log.Error("setting a newer schema failed", "tablet", tb.ID(), "err", err)
			}
		}
	case t.Generation < cur.Generation:
		// Opened with an older schema than the table's others.
		for _, tb := range tabs {
			if err := tb.SetSchema(ctx, cur.Schema()); err != nil {
				return err
			}
		}
	}
	st.set(merged)
	return nil
}

// UnloadTablet stops serving a tablet: it leaves the routing first (new
// requests for its rows answer tabletdesc.NotServingError), then is closed,
// which flushes its memtable, so that its next server need not replay this
// server's log. The table's entry goes with its last tablet. A tablet
// being loaded is unloaded once loaded; an unknown tablet is not an error
// (nor a tablet split meanwhile: its children stay, and are reported
// through HostOptions.OnSplit).
func (h *Host) UnloadTablet(ctx context.Context, tabletID string) error {
	for {
		h.mu.Lock()
		if op := h.loads[tabletID]; op != nil {
			h.mu.Unlock()
			if err := waitDone(ctx, op.done); err != nil {
				return err
			}
			continue
		}
		if u := h.unloads[tabletID]; u != nil {
			h.mu.Unlock()
			return waitDone(ctx, u.done)
		}
		var st *servedTable
		var tb *tablet.Tablet
		for _, s := range h.tables {
			if i := slices.IndexFunc(s.list(), func(tb *tablet.Tablet) bool { return tb.ID() == tabletID }); i >= 0 {
				st, tb = s, s.list()[i]
				break
			}
		}
		if tb == nil {
			h.mu.Unlock()
			return nil
		}
		u := &unloadOp{table: st.meta.Load().ID, tb: tb, done: make(chan struct{})}
		h.unloads[tabletID] = u
		// Out of the routing but not yet flushed: the log must stay.
		h.opening.Add(1)
		h.mu.Unlock()

		err := h.unload(ctx, st, tabletID)
		h.mu.Lock()
		delete(h.unloads, tabletID)
		h.mu.Unlock()
		h.opening.Add(-1)
		close(u.done)
		return err
	}
}

// unload removes tablet id from st's routing and closes it. It first
// flushes the tablet while it still serves (the paper's first minor
// compaction of an unload; again while writes keep coming,
// tablet.FlushForHandoff, so that Close's flush is short): a flush that
// fails (the object store down) fails the unload with the tablet still
// served here, its writes in memory and in this server's log. Closing it
// regardless, as unload did, left writes acknowledged since the last
// flush only in this log, which the tablet's next server, given a clean
// move, does not replay: a fault campaign lost 28 acknowledged writes to
// a balance move during a MinIO restart. The flush at Close then holds
// only what arrived meanwhile.
func (h *Host) unload(ctx context.Context, st *servedTable, id string) error {
	// (A tablet that stopped serving meanwhile, or failed — its log is
	// recovered when this server stops — is closed as before.)
	served := st.list()
	if i := slices.IndexFunc(served, func(tb *tablet.Tablet) bool { return tb.ID() == id }); i >= 0 {
		if err := served[i].FlushForHandoff(ctx); err != nil && !errors.Is(err, tabletdesc.ErrNotServing) && !errors.Is(err, tablet.ErrFailed) {
			return fmt.Errorf("unload tablet %s: flushing it first (it is still served here): %w", id, err)
		}
	}
	st.mu.Lock()
	tabs := st.list()
	i := slices.IndexFunc(tabs, func(tb *tablet.Tablet) bool { return tb.ID() == id })
	if i < 0 || st.dropped {
		st.mu.Unlock()
		return nil // split, dropped or closed meanwhile
	}
	tb := tabs[i]
	rest := slices.Delete(slices.Clone(tabs), i, i+1)
	st.set(rest)
	if len(rest) == 0 {
		st.gone.Store(true)
	}
	st.mu.Unlock()
	table := st.meta.Load().ID
	if len(rest) == 0 {
		h.mu.Lock()
		if h.tables[table] == st {
			delete(h.tables, table)
		}
		h.mu.Unlock()
	}
	h.forgetNoSplit(tb)
	// Close flushes the memtable (and saves the state) after the writes
	// under way: the next server opens the tablet without this log.
	if err := tb.Close(); err != nil {
		return fmt.Errorf("unload tablet %s of table %s: %w", id, table, err)
	}
	h.log.Info("tablet unloaded", "table", table.String(), "tablet", id)
	return nil
}

// ServedTablets returns every tablet the Host serves, is loading (from
// the moment LoadTablet is called) or is unloading, sorted by table
// (TableID.String) then start.
func (h *Host) ServedTablets() []ServedTablet {
	h.mu.RLock()
	tables := make(map[meta.TableID]*servedTable, len(h.tables))
	for id, st := range h.tables {
		tables[id] = st
	}
	var out []ServedTablet
	for id, op := range h.loads {
		if id == op.id {
			out = append(out, ServedTablet{Table: op.table, ID: id, Start: bytes.Clone(op.start), End: bytes.Clone(op.end), Loading: true})
		}
	}
	unloads := make(map[string]*unloadOp, len(h.unloads))
	for id, u := range h.unloads {
		unloads[id] = u
	}
	splitting := make(map[string]bool, len(h.splitting))
	for id := range h.splitting {
		splitting[id] = true
	}
	h.mu.RUnlock()

	describe := func(table meta.TableID, tb *tablet.Tablet) ServedTablet {
		r := tb.Range()
		own, _ := tabletBytes(tb) // zero for a tablet closed meanwhile
		return ServedTablet{Table: table, ID: tb.ID(), Start: r.Start, End: r.End, Bytes: own, Splitting: splitting[tb.ID()],
			SharesFiles: tb.State().SharesFiles()}
	}
	for id, st := range tables {
		for _, tb := range st.list() {
			s := describe(id, tb)
			if _, ok := unloads[tb.ID()]; ok {
				s.Unloading = true
				delete(unloads, tb.ID())
			}
			out = append(out, s)
		}
	}
	for _, u := range unloads {
		s := describe(u.table, u.tb)
		s.Unloading = true
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ServedTablet) int {
		if c := cmpString(a.Table.String(), b.Table.String()); c != 0 {
			return c
		}
		if c := bytes.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmpString(a.ID, b.ID)
	})
	return out
}

// Backoff of the retries of HostOptions.OnSplit.
const (
	onSplitFirstBackoff = 100 * time.Millisecond
	onSplitMaxBackoff   = 5 * time.Second
)

// ErrTableGone is what HostOptions.OnSplit returns (wrapped) when the
// split tablet's table was deleted — the split raced the deletion, whose
// unloads found the parent, not the children it was becoming: the
// children are unloaded, and the split is not reported again. Left
// served, they held the deleted table's rows for ever, and kept a table
// created again under the name from being served (the master assigns
// nothing that overlaps tablets a server reports and METADATA lacks).
var ErrTableGone = errors.New("tabletserver: the tablet's table was deleted")

// reportSplit calls HostOptions.OnSplit for a split the Host made; if it
// fails, a goroutine retries it with backoff until it succeeds or the Host
// closes, so that neither serving nor the splitter waits for the master.
// A table deleted meanwhile (ErrTableGone) ends it once the children are
// unloaded (dropGoneChildren).
func (h *Host) reportSplit(ctx context.Context, table meta.TableID, parent string, children []TabletInfo) {
	err := h.reportSplitOnce(ctx, table, parent, children)
	if err == nil {
		return
	}
	h.log.Warn("reporting a split failed; retrying in the background", "table", table.String(), "tablet", parent, "err", err)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.reports.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.reports.Done()
		backoff := onSplitFirstBackoff
		for {
			if ctxtime.Sleep(h.bgCtx, backoff) != nil {
				return
			}
			err := h.reportSplitOnce(h.bgCtx, table, parent, children)
			if err == nil || h.bgCtx.Err() != nil {
				return
			}
			backoff = min(2*backoff, onSplitMaxBackoff)
			h.log.Warn("reporting a split failed", "table", table.String(), "tablet", parent, "err", err, "retry_in", backoff)
		}
	}()
}

// reportSplitOnce calls HostOptions.OnSplit once; when it answers that
// the table is gone, it unloads the children instead (dropGoneChildren)
// and fails only if that fails. A split none of whose rows is served
// here any more (its children unloaded — by a deletion of the table, or
// by the master — or moved) is not reported: whoever took them away
// knows of them, and the master repairs METADATA from the tablets'
// states if need be.
func (h *Host) reportSplitOnce(ctx context.Context, table meta.TableID, parent string, children []TabletInfo) error {
	if !h.servesAnyOf(table, children[0].Start, children[len(children)-1].End) {
		h.log.Info("a split's rows are no longer served here; not reported", "table", table.String(), "tablet", parent)
		return nil
	}
	err := h.opts.OnSplit(ctx, table, parent, children)
	if errors.Is(err, ErrTableGone) {
		return h.dropGoneChildren(ctx, table, parent, children, err)
	}
	return err
}

// dropGoneChildren unloads the children of a split whose table was
// deleted (ErrTableGone, why). A child that split in turn meanwhile
// leaves its own children, whose report finds the table gone too.
func (h *Host) dropGoneChildren(ctx context.Context, table meta.TableID, parent string, children []TabletInfo, why error) error {
	h.log.Info("the table of a split was deleted meanwhile; unloading its children", "table", table.String(), "tablet", parent, "children", len(children), "reason", why)
	var errs []error
	for _, c := range children {
		errs = append(errs, h.UnloadTablet(ctx, c.ID))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unloading the children of a deleted table's split: %w", err)
	}
	return nil
}

// servesAnyOf reports whether a tablet of table open here holds rows of
// [start, end) (nil end: no bound).
func (h *Host) servesAnyOf(table meta.TableID, start, end []byte) bool {
	st, err := h.table(table)
	if err != nil {
		return false
	}
	want := tabletdesc.KeyRange{Start: start, End: end}
	for _, tb := range st.list() {
		if tb.Range().Overlaps(want) {
			return true
		}
	}
	return false
}

// servesTablet reports whether tablet id of table is open here and in the
// table's routing.
func (h *Host) servesTablet(table meta.TableID, id string) bool {
	st, err := h.table(table)
	if err != nil {
		return false
	}
	for _, tb := range st.list() {
		if tb.ID() == id {
			return true
		}
	}
	return false
}

// coversRanges reports whether the tablets open here hold every row of
// ranges.
func (h *Host) coversRanges(table meta.TableID, ranges []tabletdesc.KeyRange) bool {
	st, err := h.table(table)
	if err != nil {
		return false
	}
	rt := st.routes.Load()
	for _, r := range ranges {
		at := r.Start
		for {
			tb := rt.find(at)
			if tb == nil {
				return false
			}
			end := tb.Range().End
			if tabletdesc.CompareEnds(end, r.End) >= 0 {
				break
			}
			at = end
		}
	}
	return true
}
