package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
)

// DevCoordFile is the file under DevConfig.Dir that keeps the keys of
// dev's lock service (coord.OpenLocal): the table catalog (coord's schema/
// keys, NewCoordCatalog), as the cluster keeps it in Consul.
const DevCoordFile = "coord.json"

// legacyCatalogPrefix is where dev kept its catalog before it moved to
// the lock service: one object per table in the store
// (master.NewBlobCatalog).
const legacyCatalogPrefix = "catalog"

// legacyCatalogGuard is an object in the older dev's catalog, written once
// the catalog has moved, that no older dev can read as a table: it is not
// JSON, so an older binary's catalog listing fails and it refuses to start
// (naming this object) instead of finding no tables and collecting every
// table's files as garbage.
const legacyCatalogGuard = legacyCatalogPrefix + "/moved-to-coord.json"

// legacyCatalogGuardText is legacyCatalogGuard's content.
const legacyCatalogGuardText = "This directory's table catalog moved to " + DevCoordFile + ". " +
	"Start it with the tabula binary that moved it, or a newer one: an older one would take every table's files for garbage.\n"

// openDevCoord opens dir's lock service, creating its file on the first
// start, and moves into it the catalog an older dev kept in store
// (migrateDevCatalog).
func openDevCoord(ctx context.Context, dir string, store blob.Store, log *slog.Logger) (*coord.Local, error) {
	// No lock-delay on what the previous run held: it is gone (the
	// directory's LOCK says so).
	kv, err := coord.OpenLocal(coord.LocalConfig{Path: filepath.Join(dir, DevCoordFile), LockDelay: devLockDelay})
	if err != nil {
		return nil, fmt.Errorf("dev: opening the lock service: %w", err)
	}
	n, err := migrateDevCatalog(ctx, store, NewCoordCatalog(kv))
	if err != nil {
		_ = kv.Close()
		return nil, fmt.Errorf("dev: moving the catalog from %s/ into %s: %w", legacyCatalogPrefix, DevCoordFile, err)
	}
	if n > 0 {
		log.Info("moved the table catalog into the lock service", "tables", n, "file", DevCoordFile)
	}
	return kv, nil
}

// migrateDevCatalog moves every entry of the catalog an older dev kept in
// store (under legacyCatalogPrefix) into to, and returns how many it
// moved. Each entry is first written to to (unless to has the table
// already: an earlier migration cut short wrote it), then deleted from the
// store, so a crash at any point leaves every table in one catalog or the
// other and the next start finishes the move. A store with no legacy
// catalog moves nothing.
//
// Once every entry has moved it writes legacyCatalogGuard, which keeps an
// older binary from starting on the directory; a store holding the guard
// has nothing left to move.
func migrateDevCatalog(ctx context.Context, store blob.Store, to meta.Catalog) (int, error) {
	switch _, err := store.Get(ctx, legacyCatalogGuard); {
	case err == nil:
		return 0, nil
	case !blob.IsNotExist(err):
		return 0, err
	}
	from := master.NewBlobCatalog(store, legacyCatalogPrefix)
	tables, err := from.List(ctx, "")
	if err != nil {
		return 0, err
	}
	for _, t := range tables {
		if err := to.Create(ctx, t); err != nil && !errors.Is(err, meta.ErrTableExists) {
			return 0, fmt.Errorf("table %s: %w", t.ID, err)
		}
		if err := from.Delete(ctx, t.ID); err != nil && !errors.Is(err, meta.ErrTableNotFound) {
			return 0, fmt.Errorf("table %s: %w", t.ID, err)
		}
	}
	if err := store.Put(ctx, legacyCatalogGuard, []byte(legacyCatalogGuardText)); err != nil {
		return 0, fmt.Errorf("writing %s: %w", legacyCatalogGuard, err)
	}
	return len(tables), nil
}
