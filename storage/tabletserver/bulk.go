package tabletserver

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/internal/ctxtime"
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
	var todo []int
	for i := range rms {
		if errs[i] == nil {
			todo = append(todo, i)
		}
	}
	backoff := notServingBackoff
	for attempt := 1; ; attempt++ {
		turnedAway := h.applyRouted(ctx, st, rms, todo, errs)
		if len(turnedAway) == 0 {
			break
		}
		h.metrics.writesTurnedAway.Add(float64(len(turnedAway)))
		// A split (or an unload) raced the batch: the entries the
		// stopped tablet turned away go again once its children serve,
		// in batches by tablet as before — in request order, so that
		// entries of one row keep theirs. (One by one, each waited for
		// a commit-log flush of its own: a hundred log objects' PUTs in
		// a cluster, 600 ms.)
		if attempt == notServingRetries {
			for _, i := range turnedAway {
				errs[i] = withRow(errs[i], rms[i].Row)
			}
			break
		}
		if err := ctxtime.Sleep(ctx, backoff); err != nil {
			for _, i := range turnedAway {
				errs[i] = err
			}
			break
		}
		backoff = min(2*backoff, notServingMaxBackoff)
		slices.Sort(turnedAway)
		todo = turnedAway
		if st, err = h.table(id); err != nil {
			for _, i := range todo {
				errs[i] = h.unroutedError(id, rms[i].Row, err)
			}
			break
		}
	}
	h.noteWrite()
	return nil
}

// applyRouted applies entries todo of rms to the tablets of st that hold
// their rows, each tablet's entries in one tablet.ApplyBatch and the
// tablets' batches concurrently, setting errs[i] for each entry applied
// or refused, and returns the entries to try again: those a tablet
// turned away because it stopped serving (a split, an unload), with
// their errs[i] set to that error. An entry no tablet of st holds gets
// unroutedError, and is tried again unless in Partial mode.
func (h *Host) applyRouted(ctx context.Context, st *servedTable, rms []cell.RowMutation, todo []int, errs []error) []int {
	routes := st.routes.Load()
	groups, unrouted := fanout.Group(todo, func(i int) (*tablet.Tablet, bool) {
		tb := routes.find(rms[i].Row)
		return tb, tb != nil
	})
	var turnedAway []int
	for _, i := range unrouted {
		errs[i] = h.unroutedError(st.meta.Load().ID, rms[i].Row, nil)
		if !h.opts.Partial {
			// A gap in a table served whole here is a moment's: wait
			// for it, as withTablet does.
			turnedAway = append(turnedAway, i)
		}
	}
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
				turnedAway = append(turnedAway, i)
				mu.Unlock()
			} else if err == nil {
				err = lapsed
			}
			errs[i] = err
		}
	})
	return turnedAway
}

// unroutedError is the error of a write to row of table id that no
// tablet here holds (err, when the table itself is not open here): in
// Partial mode the client must look the row up again (notHere);
// otherwise a not-serving error, or err.
func (h *Host) unroutedError(id meta.TableID, row []byte, err error) error {
	switch {
	case h.opts.Partial:
		return notHere(id, row)
	case err != nil:
		return err
	}
	return &tabletdesc.NotServingError{Tablet: id.String(), Row: row, Reason: "no tablet holds the row"}
}

// withRow is err naming row, if it is a tabletdesc.NotServingError that
// names none (a stopped tablet's, which says which tablet, not which row
// was asked for: the client's NotServing detail wants it). The tablet
// returns one such error to every write it turns away, so it is copied,
// not changed.
func withRow(err error, row []byte) error {
	var ns *tabletdesc.NotServingError
	if !errors.As(err, &ns) || ns.Row != nil {
		return err
	}
	named := *ns
	named.Row = row
	return &named
}
