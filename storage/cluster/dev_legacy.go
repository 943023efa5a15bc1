package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// A dev directory written before dev ran the cluster's roles has one
// commit log in Dir/log (legacyLogDir), no METADATA, and tablets found
// from the catalog's initial tablets and the split records of their
// states. StartDev moves it to the roles' layout in two steps, each safe
// to repeat after a crash: flushLegacyLog (before the roles start) puts
// everything that log holds into SSTables and tablet states, then deletes
// it; adoptLegacyTables (once METADATA is served) gives every table of the
// catalog without METADATA rows the rows of its tablets, which the master
// then assigns as any other.

// legacyLogDir is where an older dev kept its commit log, under Dir.
const legacyLogDir = "log"

// flushLegacyLog, when dir holds an older dev's commit log, opens every
// table of catalog on a Host over that log — the older dev's recovery:
// each tablet replays the log from its redo point — and closes it, which
// flushes every tablet's memtable into an SSTable and its state; then the
// log is deleted. If anything fails the log stays, for the next start.
func flushLegacyLog(ctx context.Context, dir string, store blob.Store, states tablet.StateStore, catalog meta.Catalog, log *slog.Logger) (err error) {
	logDir := filepath.Join(dir, legacyLogDir)
	if _, err := os.Stat(logDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	start := time.Now()
	opts := commitlog.Options{Dir: logDir}
	cl, err := commitlog.Open(ctx, opts)
	if err != nil {
		return fmt.Errorf("dev: opening the older dev's commit log %s: %w", logDir, err)
	}
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{
		Store: store, Log: cl, LogOptions: opts, Cache: sstable.NewCache(0), StateStore: states, Logger: log,
		// Nothing may be truncated before every table is open.
		LogTruncateInterval: neverInterval,
	})
	if err != nil {
		_ = cl.Close()
		return err
	}
	tables, err := catalog.List(ctx, "")
	if err == nil {
		for _, t := range tables {
			if err = host.OpenTable(ctx, t); err != nil {
				err = fmt.Errorf("dev: recovering table %s from the older dev's commit log: %w", t.ID, err)
				break
			}
		}
	}
	err = errors.Join(err, host.Close(), cl.Close())
	if err != nil {
		return err
	}
	if err := os.RemoveAll(logDir); err != nil {
		return err
	}
	log.Info("flushed the older dev's commit log into the tables and deleted it", "tables", len(tables), "took", time.Since(start).String())
	return nil
}

// neverInterval is a ticker period that never comes (about 146 years).
const neverInterval = time.Duration(1 << 62)

// adoptLegacyTables gives every table of catalog whose METADATA rows do
// not cover its rows the rows of the tablets that are missing: all of an
// older dev's tables, which had none, and a table whose creation (a
// RestoreTable, say) was cut short between its catalog entry and its last
// row. The tablets are the leaves of the split records in the states under
// the catalog's initial tablets (legacyTablets); a row is written,
// unassigned, for each whose range no row has, and the master then assigns
// them. It waits for METADATA to be served.
func (d *Dev) adoptLegacyTables(ctx context.Context, catalog meta.Catalog) error {
	if err := d.waitServed(ctx, meta.MetadataTable); err != nil {
		return err
	}
	tables, err := catalog.List(ctx, "")
	if err != nil {
		return err
	}
	md := d.master.md
	for _, t := range tables {
		rows, err := md.tableRows(ctx, t.ID)
		if err != nil {
			return fmt.Errorf("dev: reading the METADATA rows of %s: %w", t.ID, err)
		}
		if locationsCover(rows) {
			continue
		}
		tablets, err := legacyTablets(ctx, d.states, t.Tablets)
		if err != nil {
			return fmt.Errorf("dev: the tablets of %s: %w", t.ID, err)
		}
		added := 0
		for _, st := range tablets {
			if overlapsAny(rows, st.Start, st.End) {
				continue
			}
			rm, err := meta.StateMutation(t.ID, st, cell.ServerTimestamp)
			if err != nil {
				return err
			}
			if err := md.cl.Apply(ctx, meta.MetadataTableName, rm); err != nil {
				return fmt.Errorf("dev: writing the METADATA row of %s's tablet %s: %w", t.ID, st.ID, err)
			}
			added++
		}
		d.log.Info("table given the METADATA rows it lacked", "table", t.ID.String(), "had", len(rows), "added", added)
	}
	d.master.loop.Poke()
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

// legacyTablets returns the tablets that serve refs' rows now: each ref,
// or, when its saved state records a split, its children's (recursively),
// in key order. A ref without a saved state was never written.
func legacyTablets(ctx context.Context, states tablet.StateStore, refs []meta.TabletRef) ([]tabletdesc.State, error) {
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
