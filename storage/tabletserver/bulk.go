package tabletserver

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/internal/fanout"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// applyBatch applies independent row mutations of one table, each
// atomically; errs[i] is rms[i]'s outcome (a non-nil errs[i] on entry is
// kept and the entry skipped). The entries of each tablet go in one
// tablet.ApplyBatch — one critical section and one commit-log wait for all
// of them — and the tablets' batches run concurrently. Entries that meet a
// tablet in the middle of a split are retried one by one through the
// routing, as single writes are.
//
// Each tablet's batch is applied only while HostOptions.Lease is valid, and
// its entries are acknowledged (errs[i] nil) only if the lease is still
// valid after the batch was made durable; otherwise their errors match
// ErrLeaseLapsed (see writeTablet).
func (h *Host) applyBatch(ctx context.Context, id meta.TableID, rms []cell.RowMutation, errs []error) error {
	st, err := h.table(id)
	if err != nil {
		if !h.opts.Partial {
			return err
		}
		// No tablet of the table here (servedTable): each entry is
		// looked up again by its client.
		for i := range errs {
			if errs[i] == nil {
				errs[i] = notHere(id, rms[i].Row)
			}
		}
		return nil
	}
	pending := 0
	for _, err := range errs {
		if err == nil {
			pending++
		}
	}
	err = h.admitWrite(ctx, id)
	if err == nil {
		err = h.checkLease(pending, false)
	}
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return nil
	}
	routes := st.routes.Load()
	var todo []int
	for i := range rms {
		if errs[i] == nil {
			todo = append(todo, i)
		}
	}
	groups, unrouted := fanout.Group(todo, func(i int) (*tablet.Tablet, bool) {
		tb := routes.find(rms[i].Row)
		return tb, tb != nil
	})
	var mu sync.Mutex
	fanout.Each(groups, func(g *fanout.Batch[*tablet.Tablet]) {
		batch := make([]cell.RowMutation, len(g.Idx))
		for j, i := range g.Idx {
			batch[j] = rms[i]
		}
		if err := h.checkLease(len(batch), false); err != nil {
			for _, i := range g.Idx {
				errs[i] = err
			}
			return
		}
		res := g.Dest.ApplyBatch(ctx, batch)
		applied := 0
		for _, err := range res {
			if err == nil {
				applied++
			}
		}
		// The applied entries are durable now; acknowledge them
		// only if the lease still holds.
		lapsed := h.checkLease(applied, true)
		for j, err := range res {
			i := g.Idx[j]
			if errors.Is(err, tabletdesc.ErrNotServing) {
				mu.Lock()
				unrouted = append(unrouted, i)
				mu.Unlock()
				continue
			}
			if err == nil {
				err = lapsed
			}
			errs[i] = err
		}
	})
	// Rare: a split raced the batch. Retry in request order, so that
	// entries of one row keep theirs.
	slices.Sort(unrouted)
	for _, i := range unrouted {
		errs[i] = h.writeTablet(ctx, id, rms[i].Row, func(tb *tablet.Tablet) error { return tb.Apply(ctx, rms[i]) })
	}
	h.noteWrite()
	return nil
}
