package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/storage/master/assign"
)

// Merges of adjacent tablets (assign's Merge action), carried out by the
// control loop with the help of METADATA's TabletMerger:
//
//  1. The planner emits Merge for two adjacent, served, settled user
//     tablets L and R: small ones when LoopOptions.AutoMerge is set, or
//     the two an operator asked for (Loop.RequestMerge). From then on
//     the term records the merge as under way (assign.State.Merges): the
//     planner neither assigns, moves nor merges L or R again.
//  2. Their holders major-compact them (TabletCompactor, when the servers
//     offer it), so that every SSTable of each lies within its own range
//     (a split child's files are its parent's, with rows of its sibling
//     that a merged tablet must not see again), then unload them: closing
//     a tablet flushes its memtable, so nothing of either is left in a
//     commit log.
//  3. TabletMerger.MergeTablets saves the merged tablet's state (both
//     tablets' SSTables) and commits it to METADATA in one conditional
//     write of R's row (the commit point), then deletes L's row; a crash
//     in between is repaired by the next METADATA read.
//  4. The merge is no longer under way: the next round finds the merged
//     tablet unassigned and assigns it.
//
// A failure before the commit (a server died, a tablet split or moved
// meanwhile, its files still reach beyond its range) abandons the merge:
// L and R, unloaded, are assigned again as any unassigned tablet. So is a
// merge cut short by the master's own end: a successor knows nothing of
// it, and METADATA shows either L and R (not committed) or the merged
// tablet (committed, perhaps with L's row to delete).

// TabletMerger is implemented by a Metadata that can commit merges.
type TabletMerger interface {
	// MergeTablets commits to METADATA one tablet over the union of left
	// and right, adjacent tablets of one table that no server holds (both
	// unloaded cleanly), and returns it (unassigned). Its saved state
	// references both tablets' SSTables. An error means METADATA still
	// shows left and right (nothing committed), unless it says otherwise.
	MergeTablets(ctx context.Context, left, right assign.Tablet) (assign.Tablet, error)
}

// SplitRepairer is implemented by a Metadata that can finish splits
// interrupted before their commit point (a tablet server died after saving
// the parent's split state, before writing METADATA).
type SplitRepairer interface {
	// RepairSplits replaces, among METADATA's rows of table (assign.Tablet.Table
	// form) overlapping [start, end) (end "": no bound), those of tablets
	// whose saved state says they were split by their children's rows.
	RepairSplits(ctx context.Context, table, start, end string) error
}

// TabletCompactor is implemented by TabletServers that can compact one
// tablet on request.
type TabletCompactor interface {
	// Compact runs a compaction (major or merging) of tabletID of table
	// (assign.Tablet.Table form) on server.
	Compact(ctx context.Context, server, table, tabletID string, major bool) error
}

// ErrNoMerge: a requested merge cannot be carried out.
var ErrNoMerge = errors.New("master: merge not possible")

// mergeRequest is a merge asked for through RequestMerge.
type mergeRequest struct {
	assign.MergeUnderway
	started bool
	done    chan mergeOutcome // buffered, 1
}

// mergeOutcome is how a merge ended.
type mergeOutcome struct {
	assign.MergeUnderway
	merged assign.Tablet
	err    error
}

// RequestMerge asks the active master to merge left with right, its
// right neighbour in table (assign.Tablet.Table form), and waits until the
// merged tablet is committed to METADATA (it is assigned right after), the
// merge failed, or ctx ends. The merge waits while either tablet is not
// served or is busy (moving, splitting, in another merge); tablets
// METADATA does not hold, or that are not adjacent, fail with ErrNoMerge.
// On a standby it waits until the master leads or ctx ends.
func (c *Loop) RequestMerge(ctx context.Context, table string, left, right assign.TabletID) (assign.Tablet, error) {
	r := &mergeRequest{MergeUnderway: assign.MergeUnderway{Table: table, Left: left, Right: right}, done: make(chan mergeOutcome, 1)}
	c.mu.Lock()
	c.mergeReqs = append(c.mergeReqs, r)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.mergeReqs = slices.DeleteFunc(c.mergeReqs, func(x *mergeRequest) bool { return x == r })
		c.mu.Unlock()
	}()
	c.wake()
	select {
	case o := <-r.done:
		return o.merged, o.err
	case <-ctx.Done():
		return assign.Tablet{}, ctx.Err()
	}
}

// Wake asks the running term for a round now (no-op while standing by):
// a caller that changed what a round observes (a tablet split by its
// server) gets the new view in the next round, not after a Tick.
func (c *Loop) Wake() { c.wake() }

// wake asks the running term for a round now.
func (c *Loop) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// pendingMergeRequests returns the requests not yet under way, and fails
// those whose tablets METADATA (tablets) does not hold or that are not
// adjacent.
func (c *Loop) pendingMergeRequests(tablets []assign.Tablet) []assign.MergeUnderway {
	byID := make(map[assign.TabletID]assign.Tablet, len(tablets))
	for _, tb := range tablets {
		byID[tb.ID] = tb
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []assign.MergeUnderway
	for _, r := range c.mergeReqs {
		if r.started {
			continue
		}
		l, okL := byID[r.Left]
		rt, okR := byID[r.Right]
		var err error
		switch {
		case !okL || !okR:
			err = fmt.Errorf("%w: tablet %s or %s is not in METADATA (split, merged or dropped meanwhile)", ErrNoMerge, r.Left, r.Right)
		case l.Table != r.Table || rt.Table != r.Table || l.Kind != assign.User || rt.Kind != assign.User:
			err = fmt.Errorf("%w: tablets %s and %s are not both of user table %s", ErrNoMerge, r.Left, r.Right, r.Table)
		case l.End == "" || l.End != rt.Start:
			err = fmt.Errorf("%w: tablet %s does not end where %s starts", ErrNoMerge, r.Left, r.Right)
		}
		if err != nil {
			r.started = true
			r.done <- mergeOutcome{MergeUnderway: r.MergeUnderway, err: err}
			continue
		}
		out = append(out, r.MergeUnderway)
	}
	return out
}

// finishRequests hands o to the request for the same merge, if any, or
// (started) marks it under way.
func (c *Loop) noteMerge(m assign.MergeUnderway, o *mergeOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.mergeReqs {
		if r.Left != m.Left || r.Right != m.Right {
			continue
		}
		if o == nil {
			r.started = true
			continue
		}
		if r.started {
			select {
			case r.done <- *o:
			default:
			}
		}
	}
}

// failMergeRequests fails every request under way: the term carrying
// them out ended (the merge may still be committed: METADATA says).
func (c *Loop) failMergeRequests(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.mergeReqs {
		if r.started {
			select {
			case r.done <- mergeOutcome{MergeUnderway: r.MergeUnderway, err: err}:
			default:
			}
		}
	}
}

// startMerge records the merge of action a under way and carries it out
// in the background; the outcome arrives on t.merged.
func (t *term) startMerge(ctx context.Context, st assign.State, tablets map[assign.TabletID]assign.Tablet, a assign.Action) {
	merger, ok := t.c.opts.Metadata.(TabletMerger)
	if !ok {
		return
	}
	left, okL := tablets[a.Tablet]
	right, okR := tablets[a.Right]
	if !okL || !okR {
		return
	}
	holders := make(map[assign.TabletID]assign.ServerID)
	for _, s := range st.Live {
		for _, sv := range s.Serving {
			if sv.ID == left.ID || sv.ID == right.ID {
				holders[sv.ID] = s.ID
			}
		}
	}
	m := assign.MergeUnderway{Table: a.Table, Left: a.Tablet, Right: a.Right}
	t.merging[m.Left] = m
	t.c.noteMerge(m, nil)
	t.c.opts.Logger.Info("master: merging", "table", a.Table, "left", left.ID, "right", right.ID, "reason", a.Reason)
	go func() {
		merged, err := t.merge(ctx, merger, left, right, holders)
		select {
		case t.merged <- mergeOutcome{MergeUnderway: m, merged: merged, err: err}:
		case <-ctx.Done():
		}
	}()
}

// merge compacts and unloads left and right from their holders, then
// commits the merged tablet.
func (t *term) merge(ctx context.Context, merger TabletMerger, left, right assign.Tablet, holders map[assign.TabletID]assign.ServerID) (assign.Tablet, error) {
	compactor, _ := t.c.opts.Servers.(TabletCompactor)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, tb := range []assign.Tablet{left, right} {
		server, ok := holders[tb.ID]
		if !ok {
			return assign.Tablet{}, fmt.Errorf("%w: tablet %s is not served", ErrNoMerge, tb.ID)
		}
		wg.Go(func() {
			if t.lost() {
				errs[i] = errLost
				return
			}
			if compactor != nil {
				cctx, cancel := context.WithTimeout(ctx, t.c.opts.SortTimeout)
				err := compactor.Compact(cctx, string(server), tb.Table, string(tb.ID), true)
				cancel()
				if err != nil {
					// The unload goes on: MergeTablets refuses files that
					// reach beyond their tablet's range.
					t.c.opts.Logger.Warn("master: compaction before a merge failed", "tablet", tb.ID, "server", server, "err", err)
				}
			}
			if t.lost() {
				errs[i] = errLost
				return
			}
			rctx, cancel := t.rpcCtx(ctx)
			defer cancel()
			if err := t.c.opts.Servers.Unload(rctx, string(server), string(tb.ID)); err != nil {
				errs[i] = fmt.Errorf("unload %s from %s: %w", tb.ID, server, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return assign.Tablet{}, err
	}
	// Fencing: the commit must not follow a successor's reassignment of
	// left or right (its new server's writes would be lost to the merged
	// tablet's older file lists). A successor exists only once this
	// master's session ended; lost() says so from the session's own
	// clock (Valid is false from the moment the lease may have lapsed),
	// and a successor waits for the lock-delay besides.
	if t.lost() {
		return assign.Tablet{}, errLost
	}
	rctx, cancel := t.rpcCtx(ctx)
	defer cancel()
	return merger.MergeTablets(rctx, left, right)
}

// mergeDone ends a merge under way and hands its outcome to a request.
func (t *term) mergeDone(o mergeOutcome) {
	delete(t.merging, o.Left)
	if o.err != nil {
		t.c.opts.Logger.Warn("master: merge abandoned", "table", o.Table, "left", o.Left, "right", o.Right, "err", o.err)
	} else {
		t.c.opts.Logger.Info("master: merged", "table", o.Table, "left", o.Left, "right", o.Right, "merged", o.merged.ID)
	}
	t.c.noteMerge(o.MergeUnderway, &o)
}
