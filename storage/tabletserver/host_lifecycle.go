package tabletserver

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
)

// A table's life on a Host: opened whole (one-process mode; a cluster's
// tablet server loads single tablets, host_tablets.go), dropped, its schema
// changed, row ranges dropped, and what it serves.

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
// families dropped, granularity) on every tablet of the table. A schema
// older than the one served (a lower meta.Table.Generation) is ignored:
// a cluster's server can receive a table's schema both from the master's
// push and from its own read of the catalog after a load, in either order.
func (h *Host) UpdateSchema(ctx context.Context, t meta.Table) error {
	st, err := h.table(t.ID)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if t.Generation < st.meta.Load().Generation {
		return nil
	}
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
	return tb.OwnBytes()
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
