package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
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
// not cover its rows the rows of the tablets that are missing — all of an
// older dev's tables, which had none — and finishes the creations a crash
// cut short (repairTables, which the master also runs whenever it becomes
// the active one). It waits for METADATA to be served.
func (d *Dev) adoptLegacyTables(ctx context.Context, catalog meta.Catalog) error {
	if err := d.waitServed(ctx, meta.MetadataTable); err != nil {
		return err
	}
	if _, err := repairTables(ctx, catalog, d.master.md, d.states, repairAll, d.log); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	d.master.loop.Poke()
	return nil
}
