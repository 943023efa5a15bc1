package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Repairing tables whose METADATA rows do not cover them.
//
// A table created by reference (RestoreTable, UndeleteTable; see
// master's createByReference) gets its catalog entry first, marked
// Restoring, then one METADATA row per tablet, then the flag cleared. A
// master killed in between leaves a Restoring entry with some rows
// missing. Such a table is hidden: the admin API answers NOT_FOUND for it
// and the assignment loop does not assign its tablets (withoutRestoring),
// so no client sees half a table. The master that next becomes the active
// one finishes it (LoopOptions.Repair → repairTables): it writes the
// missing rows, each only if absent (a creator still running writes the
// same rows), and clears the flag. The tablets' states were saved before
// the entry was written, and the files they reference are kept by the
// backup's manifest (or the dropped table's record) and the creation's
// pending marker, so finishing loses nothing. An older dev's tables (no
// METADATA rows at all) are repaired the same way when dev starts.

// repairScope says which catalog entries repairTables looks at.
type repairScope struct {
	// all repairs every table whose rows do not cover it (an older dev's
	// tables, at dev's start); otherwise only Restoring entries are.
	all bool
	// minAge, when positive, spares Restoring entries created less than
	// minAge before now: their creator may still be at work.
	minAge time.Duration
	now    time.Time
}

var (
	// repairAll is dev's scope at its start.
	repairAll = repairScope{all: true}
	// repairRestores is the active master's scope when it begins to lead.
	repairRestores = repairScope{}
)

// inRepairScope reports whether repairTables looks at t.
func inRepairScope(t meta.Table, s repairScope) bool {
	if !t.Restoring {
		return s.all
	}
	return s.minAge <= 0 || s.now.Sub(t.Created) >= s.minAge
}

// repairPlan is what repairing one table writes.
type repairPlan struct {
	Table meta.Table
	// Rows are the tablets whose METADATA rows are missing, in key order.
	Rows []tabletdesc.State
	// Finish clears the table's Restoring flag once Rows are written.
	Finish bool
}

// planRepair returns the repair of table t given rows, its METADATA rows
// in key order, and tablets, its tablets in key order (currentTablets;
// needed only when rows do not cover t): a row for every tablet whose range
// no row overlaps, and the Restoring flag cleared. A tablet overlapping an
// existing row is never written: that row is newer (a split of it, say).
func planRepair(t meta.Table, rows []meta.Location, tablets []tabletdesc.State) repairPlan {
	p := repairPlan{Table: t, Finish: t.Restoring}
	if locationsCover(rows) {
		return p
	}
	for _, st := range tablets {
		if !overlapsAny(rows, st.Start, st.End) {
			p.Rows = append(p.Rows, st)
		}
	}
	return p
}

// Empty reports whether the plan writes nothing.
func (p repairPlan) Empty() bool { return len(p.Rows) == 0 && !p.Finish }

// refTablets returns t's tablets as its catalog entry lists them (no
// state is read: right for a table just created).
func refTablets(t meta.Table) []tabletdesc.State {
	out := make([]tabletdesc.State, 0, len(t.Tablets))
	for _, r := range t.Tablets {
		out = append(out, tabletdesc.State{ID: r.ID, Start: r.Start, End: r.End})
	}
	return out
}

// repairTables carries out the repair (planRepair) of every table of
// catalog in scope, reading their rows from md and their tablets from
// states, and returns how many tables it changed. It stops at the first
// error; what it wrote stays (every step may be repeated).
func repairTables(ctx context.Context, catalog meta.Catalog, md *metadataStore, states tablet.StateStore, scope repairScope, log *slog.Logger) (int, error) {
	tables, err := catalog.List(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("repairing tables: listing the catalog: %w", err)
	}
	repaired := 0
	for _, t := range tables {
		if !inRepairScope(t, scope) {
			continue
		}
		rows, err := md.tableRows(ctx, t.ID)
		if err != nil {
			return repaired, fmt.Errorf("repairing table %s: reading its METADATA rows: %w", t.ID, err)
		}
		var tablets []tabletdesc.State
		if !locationsCover(rows) {
			if tablets, err = currentTablets(ctx, states, t.Tablets); err != nil {
				return repaired, fmt.Errorf("repairing table %s: its tablets: %w", t.ID, err)
			}
		}
		p := planRepair(t, rows, tablets)
		if p.Empty() {
			continue
		}
		if err := applyRepair(ctx, catalog, md, p); err != nil {
			return repaired, fmt.Errorf("repairing table %s: %w", t.ID, err)
		}
		repaired++
		log.Info("table repaired: METADATA rows it lacked written", "table", t.ID.String(), "had", len(rows), "added", len(p.Rows), "restore finished", p.Finish)
	}
	return repaired, nil
}

// repairWriters bounds the METADATA rows applyRepair writes at once: each
// is a durable write (a commit-log flush), so one at a time made a table
// of 1000 tablets take seconds to create.
const repairWriters = 16

// applyRepair writes p's rows, each only if its row key describes no
// tablet yet (repairWriters at a time: the rows are independent, and any
// subset of them is a state the repair completes), then clears the
// table's Restoring flag if p says so.
func applyRepair(ctx context.Context, catalog meta.Catalog, md *metadataStore, p repairPlan) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(repairWriters)
	for _, st := range p.Rows {
		rm, err := meta.StateMutation(p.Table.ID, st, cell.ServerTimestamp)
		if err != nil {
			return err
		}
		g.Go(func() error {
			if err := writeRowIfAbsent(gctx, md.cl, rm); err != nil {
				return fmt.Errorf("writing the METADATA row of tablet %s: %w", st.ID, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if p.Finish {
		if _, err := master.FinishRestoring(ctx, catalog, p.Table.ID); err != nil && !errors.Is(err, meta.ErrTableNotFound) {
			return fmt.Errorf("clearing its restoring state: %w", err)
		}
	}
	return nil
}

// locationsCover reports whether rows, a table's METADATA rows in key
// order, cover all its rows without gaps.
func locationsCover(rows []meta.Location) bool {
	if len(rows) == 0 || len(rows[0].Start) != 0 {
		return false
	}
	for i := 1; i < len(rows); i++ {
		if !bytes.Equal(rows[i-1].End, rows[i].Start) {
			return false
		}
	}
	return len(rows[len(rows)-1].End) == 0
}

// overlapsAny reports whether [start, end) (nil end: unbounded) overlaps
// the range of one of rows.
func overlapsAny(rows []meta.Location, start, end []byte) bool {
	for _, r := range rows {
		startsBeforeEnd := len(end) == 0 || bytes.Compare(r.Start, end) < 0
		endsAfterStart := len(r.End) == 0 || bytes.Compare(r.End, start) > 0
		if startsBeforeEnd && endsAfterStart {
			return true
		}
	}
	return false
}

// currentTablets returns the tablets that serve refs' rows now: each ref,
// or, when its saved state records a split, its children's (recursively),
// in key order. A ref without a saved state was never written.
func currentTablets(ctx context.Context, states tablet.StateStore, refs []meta.TabletRef) ([]tabletdesc.State, error) {
	var out []tabletdesc.State
	var walk func(id string, start, end []byte) error
	walk = func(id string, start, end []byte) error {
		st, err := states.Load(ctx, id)
		if errors.Is(err, tablet.ErrStateNotFound) {
			out = append(out, tabletdesc.State{ID: id, Start: start, End: end})
			return nil
		}
		if err != nil {
			return err
		}
		if len(st.SplitInto) == 0 {
			out = append(out, tabletdesc.State{ID: id, Start: st.Start, End: st.End})
			return nil
		}
		for _, c := range st.SplitInto {
			if err := walk(c, nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range refs {
		if err := walk(r.ID, r.Start, r.End); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// restoringTables returns the IDs (meta.TableID.String) of the catalog's
// Restoring entries.
func restoringTables(ctx context.Context, catalog meta.Catalog) (map[string]bool, error) {
	tables, err := catalog.List(ctx, "")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, t := range tables {
		if t.Restoring {
			out[t.ID.String()] = true
		}
	}
	return out, nil
}

// withoutRestoring returns tablets without the unassigned tablets of the
// tables restoring names: a half-created table's tablets are not assigned
// (nothing serves them) until its creation is finished. A tablet already
// assigned stays (nothing may drop out of the planner's sight while a
// server holds it).
func withoutRestoring(tablets []assign.Tablet, restoring map[string]bool) []assign.Tablet {
	if len(restoring) == 0 {
		return tablets
	}
	out := tablets[:0:0]
	for _, t := range tablets {
		if t.LastServer == "" && restoring[t.Table] {
			continue
		}
		out = append(out, t)
	}
	return out
}

// anyUnassigned reports whether a tablet of a user table has no server:
// only then can one belong to a Restoring table, and the catalog is read.
func anyUnassigned(tablets []assign.Tablet) bool {
	for _, t := range tablets {
		if t.LastServer == "" && t.Kind == assign.User {
			return true
		}
	}
	return false
}
