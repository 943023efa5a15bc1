package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Splits interrupted before their commit point.
//
// A tablet server splits a tablet P by saving its children's states, then
// P's state recording SplitInto (tablet.Tablet.SplitAt), then committing
// the split to METADATA (commitSplitNew, commitSplitLast). A crash between
// P's state and the first METADATA write leaves METADATA naming P alone,
// with nothing overlapping it: finishSplits cannot see it. P's next server
// loads P's children instead of P (Host.LoadTablet follows SplitInto) and
// reports them; METADATA does not know them, so the planner asks for P's
// range to be read again (assign's Rescan, "split"), and the master's
// loop calls RepairSplits for it: every row in the range whose saved
// state says it was split is replaced by its children's rows, exactly as
// the splitting server would have written them — the left children each
// if absent, the last one in P's row only if it still names P — located
// where P's row says P is (the server that loaded P and serves its
// children, or, if it died since, the server whose log holds their
// writes). A crash before P's state was saved leaves P intact and orphan
// child states nobody references: the split is rolled back.

// RepairSplits implements master.SplitRepairer.
func (m *metadataStore) RepairSplits(ctx context.Context, table, start, end string) error {
	if m.states == nil {
		return errors.New("cluster: repairing splits needs the tablets' state store")
	}
	id, err := parseTableString(table)
	if err != nil {
		return err
	}
	lo, hi := meta.MetadataTableRange(id)
	rows, err := m.scanEntries(ctx, lo, hi)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range rows {
		if !overlapsRange(p.State, start, end) {
			continue
		}
		ps, err := m.states.Load(ctx, p.State.ID)
		if errors.Is(err, tablet.ErrStateNotFound) {
			// Never opened (a table just created, its tablets not yet
			// loaded), so never split: the unknown tablets that asked for
			// this repair are some other table's, of the name.
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tablet %s: %w", p.State.ID, err))
			continue
		}
		if len(ps.SplitInto) == 0 {
			continue
		}
		states := map[string]tabletdesc.State{}
		for _, c := range ps.SplitInto {
			cs, err := m.states.Load(ctx, c)
			if err != nil {
				errs = append(errs, fmt.Errorf("tablet %s's child %s: %w", p.State.ID, c, err))
				continue
			}
			states[c] = cs
		}
		children, err := splitChildren(p, ps, states)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.writeSplit(ctx, p, children); err != nil {
			errs = append(errs, err)
			continue
		}
		if m.log != nil {
			m.log.Info("finished an interrupted split in METADATA", "table", table, "parent", p.State.ID, "children", len(children), "server", p.Server)
		}
	}
	return errors.Join(errs...)
}

// writeSplit writes the rows of split parent p's children: the left ones
// if absent, the last in p's row if it still names p.
func (m *metadataStore) writeSplit(ctx context.Context, p meta.MetadataEntry, children []splitChild) error {
	now := m.now()
	for i, c := range children {
		rm, err := splitChildMutation(p.Table, c, p.State.ID, p.Server, p.Epoch, "from "+p.State.ID+", an interrupted split finished by the master", now)
		if err != nil {
			return err
		}
		if i == len(children)-1 {
			err = replaceParentRow(ctx, m.cl, rm, p.State.ID, c.ID)
		} else {
			err = writeRowIfAbsent(ctx, m.cl, rm)
		}
		if err != nil {
			return fmt.Errorf("finishing the split of %s: %w", p.State.ID, err)
		}
	}
	return nil
}

// overlapsRange reports whether st's rows meet [start, end) (end "": no
// bound).
func overlapsRange(st tabletdesc.State, start, end string) bool {
	return (end == "" || string(st.Start) < end) && (len(st.End) == 0 || string(st.End) > start)
}

var _ master.SplitRepairer = (*metadataStore)(nil)
