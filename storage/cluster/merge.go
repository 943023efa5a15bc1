package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Merges in METADATA (the master's side is storage/master/merge.go).
//
// Tablets L = [S, K) and R = [K, E) of one table, both unloaded cleanly
// (their memtables flushed: nothing of them is in any commit log) and
// major-compacted before (so that every SSTable of each lies within its
// own range), become M = [S, E):
//
//  1. M's state is saved (state/<M>.tablet): the SSTables of L and R per
//     locality group, the higher of their sequence numbers, no redo point
//     (there is nothing to replay), MergedFrom [L, R].
//  2. R's row (end row E, which M keeps) becomes M's — state, MergedFrom,
//     unassigned location — in one conditional write, only if it still
//     names R. This is the commit point: from then on METADATA says M.
//  3. L's row is deleted, only if it still names L.
//
// A crash before 2 leaves L and R as they were (unloaded: the master
// assigns them again) and an orphan state object. Between 2 and 3
// METADATA shows L overlapping M, which the planner holds (a conflict);
// every read of METADATA finishes the merge (finishMerges): a row
// followed by an overlapping row whose MergedFrom names it is deleted.

// newMergedID returns a fresh tablet ID, of the form tablet.Options.NewID's
// default gives split children.
func newMergedID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("t%013x%s", time.Now().UnixMicro(), hex.EncodeToString(b[:]))
}

// mergedState returns the state of tablet id merging l and r, the saved
// states of adjacent tablets l = [S, K) and r = [K, E), or an error saying
// why they cannot be merged as they are: not adjacent, one of them split
// meanwhile, an SSTable reaching beyond its tablet's range (it holds rows
// of a split sibling, which the merged tablet would see again), or a
// family drop not yet compacted away (sequence numbers of two tablets
// cannot be compared).
func mergedState(l, r tabletdesc.State, id string) (tabletdesc.State, error) {
	switch {
	case len(l.End) == 0 || !bytes.Equal(l.End, r.Start):
		return tabletdesc.State{}, fmt.Errorf("tablets %s [%q, %q) and %s [%q, %q) are not adjacent", l.ID, l.Start, l.End, r.ID, r.Start, r.End)
	case len(l.SplitInto) > 0 || len(r.SplitInto) > 0:
		return tabletdesc.State{}, fmt.Errorf("tablet %s or %s was split", l.ID, r.ID)
	case len(l.Drops) > 0 || len(r.Drops) > 0:
		return tabletdesc.State{}, fmt.Errorf("tablet %s or %s has a family drop not yet compacted away", l.ID, r.ID)
	}
	out := tabletdesc.State{
		ID:         id,
		Start:      bytes.Clone(l.Start),
		End:        bytes.Clone(r.End),
		Groups:     make(map[string][]tabletdesc.FileMeta),
		FlushedSeq: max(l.FlushedSeq, r.FlushedSeq),
		LastSeq:    max(l.LastSeq, r.LastSeq),
		MergedFrom: []string{l.ID, r.ID},
	}
	seen := make(map[string]bool)
	for _, s := range []tabletdesc.State{l, r} {
		for g, fs := range s.Groups {
			for _, f := range fs {
				if s.SharesFiles() {
					return tabletdesc.State{}, fmt.Errorf("tablet %s: SSTable %s reaches beyond its range (not compacted since its split)", s.ID, f.Name)
				}
				if !seen[f.Name] {
					seen[f.Name] = true
					out.Groups[g] = append(out.Groups[g], f)
				}
			}
		}
		for _, fam := range s.Families {
			if !slices.Contains(out.Families, fam) {
				out.Families = append(out.Families, fam)
			}
		}
	}
	slices.Sort(out.Families)
	return out, nil
}

// MergeTablets implements master.TabletMerger (see the comment above).
func (m *metadataStore) MergeTablets(ctx context.Context, left, right assign.Tablet) (assign.Tablet, error) {
	if m.states == nil {
		return assign.Tablet{}, errors.New("cluster: merges need the tablets' state store")
	}
	table, err := parseTableString(left.Table)
	if err != nil {
		return assign.Tablet{}, err
	}
	if table == meta.MetadataTable {
		return assign.Tablet{}, fmt.Errorf("%w: METADATA tablets do not merge", master.ErrNoMerge)
	}
	ls, err := m.states.Load(ctx, string(left.ID))
	if err != nil {
		return assign.Tablet{}, fmt.Errorf("merge: state of %s: %w", left.ID, err)
	}
	rs, err := m.states.Load(ctx, string(right.ID))
	if err != nil {
		return assign.Tablet{}, fmt.Errorf("merge: state of %s: %w", right.ID, err)
	}
	ms, err := mergedState(ls, rs, newMergedID())
	if err != nil {
		return assign.Tablet{}, fmt.Errorf("%w: %v", master.ErrNoMerge, err)
	}
	if err := m.states.Save(ctx, ms); err != nil {
		return assign.Tablet{}, fmt.Errorf("merge: saving the state of %s: %w", ms.ID, err)
	}
	rm, err := mergedRowMutation(table, ms, m.now())
	if err != nil {
		return assign.Tablet{}, err
	}
	// The commit point.
	if err := replaceParentRow(ctx, m.cl, rm, string(right.ID), ms.ID); err != nil {
		return assign.Tablet{}, fmt.Errorf("merge: committing %s over %s and %s: %w", ms.ID, left.ID, right.ID, err)
	}
	merged := assign.Tablet{ID: assign.TabletID(ms.ID), Table: left.Table, Start: left.Start, End: right.End, Kind: assign.User}
	if m.log != nil {
		m.log.Info("merge committed to METADATA", "table", left.Table, "left", left.ID, "right", right.ID, "merged", ms.ID)
	}
	if err := deleteRowNaming(ctx, m.cl, meta.MetadataRowKey(table, ls.End), string(left.ID)); err != nil {
		// Committed all the same: the next METADATA read deletes it.
		m.warn("deleting the row of merged tablet "+string(left.ID), err)
	}
	return merged, nil
}

// mergedRowMutation is the METADATA row of merged tablet st: its state,
// no location (unassigned; nothing to recover) and a merge event.
func mergedRowMutation(table meta.TableID, st tabletdesc.State, now time.Time) (cell.RowMutation, error) {
	rm, err := meta.StateMutation(table, st, cell.ServerTimestamp)
	if err != nil {
		return cell.RowMutation{}, err
	}
	loc := locationWithEvent(meta.Location{Table: table, Start: st.Start, End: st.End, TabletID: st.ID}, meta.EventMerge, fmt.Sprintf("from %v", st.MergedFrom), now)
	rm.Mutations = append(rm.Mutations, loc.Mutations...)
	return rm, nil
}

// deleteRowNaming deletes METADATA's row key if it still describes tablet id.
func deleteRowNaming(ctx context.Context, cl *client.Client, key []byte, id string) error {
	_, err := cl.CheckAndMutate(ctx, meta.MetadataTableName, key, namesTabletPredicate(id), []cell.Mutation{cell.DeleteRow()}, nil)
	return err
}

// unfinishedMerges returns the rows (of rows, in METADATA key order) that
// a committed merge left behind: a row followed, in the same table, by an
// overlapping row whose MergedFrom names it first (its left tablet).
func unfinishedMerges(rows []meta.MetadataEntry) []meta.MetadataEntry {
	var out []meta.MetadataEntry
	for i := 0; i+1 < len(rows); i++ {
		p, n := rows[i], rows[i+1]
		if p.Table != n.Table || len(n.State.MergedFrom) == 0 || n.State.MergedFrom[0] != p.State.ID {
			continue
		}
		if len(p.State.End) > 0 && bytes.Compare(n.State.Start, p.State.End) < 0 {
			out = append(out, p)
		}
	}
	return out
}

// finishMerges deletes the rows that committed merges left behind among
// rows, the rows of the METADATA tablet [start, end) just read, and
// returns METADATA's rows as they are then. A delete that fails leaves the
// rows as read (the planner holds the overlap) for the next read to retry.
func (m *metadataStore) finishMerges(ctx context.Context, start, end []byte, rows []meta.MetadataEntry) []meta.MetadataEntry {
	left := unfinishedMerges(rows)
	if len(left) == 0 {
		return rows
	}
	for _, p := range left {
		if err := deleteRowNaming(ctx, m.cl, meta.MetadataRowKey(p.Table, p.State.End), p.State.ID); err != nil {
			m.warn("finishing the merge of tablet "+p.State.ID, err)
			continue
		}
		if m.log != nil {
			m.log.Info("finished a merge in METADATA", "table", p.Table.String(), "tablet", p.State.ID)
		}
	}
	again, err := m.scanEntries(ctx, start, end)
	if err != nil {
		m.warn("reading METADATA again after finishing merges", err)
		return rows
	}
	return again
}

var _ master.TabletMerger = (*metadataStore)(nil)
