package tabletserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// flushTableAttempts and flushTableBackoff bound flushTable's retries
// when tablets split or move while it runs. A split leaves its parent in
// the table's list, answering not serving, until both children are open;
// a retry at once would find it again, so each retry first waits for the
// table's structural change (st.mu) and then a little longer each time.
const (
	flushTableAttempts = 12
	flushTableBackoff  = 2 * time.Millisecond
	flushTableMaxWait  = 200 * time.Millisecond
)

// FlushTableStates flushes the memtable of every tablet of table t and returns
// their saved states in key order, covering every row of the table (one
// process serving the whole table, tabula dev): a backup's consistent
// point, tablet by tablet — every write acknowledged before the call is in
// the states' SSTables. A split during the call makes it start again.
func (h *Host) FlushTableStates(ctx context.Context, t meta.Table) ([]tabletdesc.State, error) {
	return h.flushTable(ctx, t, false)
}

// FlushServedTablets is FlushTableStates for the tablets of t this Host serves,
// in a cluster where others serve the rest.
func (h *Host) FlushServedTablets(ctx context.Context, t meta.Table) ([]tabletdesc.State, error) {
	return h.flushTable(ctx, t, true)
}

func (h *Host) flushTable(ctx context.Context, t meta.Table, partial bool) ([]tabletdesc.State, error) {
	var lastErr error
	wait := flushTableBackoff
	for attempt := range flushTableAttempts {
		st, err := h.table(t.ID)
		if err != nil {
			return nil, err
		}
		if attempt > 0 {
			// A split in progress holds st.mu until its children
			// are in the list; a tablet unloaded or loaded meanwhile
			// (a merge, a move) is waited out by the backoff.
			st.mu.Lock()
			//lint:ignore SA2001 waiting for the holder is the point
			st.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, flushTableMaxWait)
		}
		tabs := st.list()
		var states []tabletdesc.State
		lastErr = nil
		for _, tb := range tabs {
			if err := tb.Flush(ctx); err != nil {
				lastErr = err
				break
			}
			states = append(states, tb.State())
		}
		if lastErr != nil {
			var ns *tabletdesc.NotServingError
			if errors.As(lastErr, &ns) && ctx.Err() == nil {
				continue // split or unloaded meanwhile: take the new list
			}
			return nil, lastErr
		}
		if partial || coversTable(states) {
			return states, nil
		}
		lastErr = fmt.Errorf("tabletserver: the tablets of %s changed while flushing", t.ID)
	}
	return nil, lastErr
}

// coversTable reports whether states are adjacent and cover every row.
func coversTable(states []tabletdesc.State) bool {
	var at []byte
	for i, s := range states {
		if !bytes.Equal(s.Start, at) || (len(s.End) == 0 && i != len(states)-1) {
			return false
		}
		at = s.End
	}
	return len(states) > 0 && len(at) == 0
}
