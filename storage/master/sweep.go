package master

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/tablet"
)

// SweepFiles is the one sweep of unreferenced SSTables, used by the cluster
// master's rounds, by `tabula dev` and for the files of a dropped table: it
// lists the store under prefix, lets assign.PlanSweep choose the files no
// tablet of referenced needs (older than grace at now), and deletes them.
// Files an unexpired backup references, or under a table directory a
// backup or restore in progress marks, are kept (see BackupsPrefix); expired
// backups are deleted here. It returns the names deleted; an object
// already gone is not an error.
//
// The caller must have read referenced before calling: the listing is
// taken here, after, so that a file committed in between is either
// referenced or younger than grace.
func SweepFiles(ctx context.Context, store blob.Store, prefix string, referenced []assign.TabletFiles, grace time.Duration, now time.Time) ([]string, error) {
	list, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	// After the listing: backups in progress or committed (and restores
	// in progress) keep their files (see BackupsPrefix).
	retained, err := retainedByBackups(ctx, store, now)
	if err != nil {
		return nil, fmt.Errorf("reading the backups: %w", err)
	}
	listed := make([]assign.StoredFile, 0, len(list))
	for _, a := range list {
		if retained.keeps(a.Name) {
			continue
		}
		// blob.Attrs carries no modification time: names carry the
		// creation time (tablet.FileCreated).
		listed = append(listed, assign.StoredFile{Name: a.Name})
	}
	doomed := assign.PlanSweep(assign.SweepInput{Referenced: referenced, Listed: listed, Grace: grace, Now: now})
	deleted := make([]string, 0, len(doomed))
	var errs []error
	for _, name := range doomed {
		if err := store.Delete(ctx, name); err != nil && !blob.IsNotExist(err) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, name)
	}
	return deleted, errors.Join(errs...)
}

// ReferencedFiles returns the files referenced by the states of tablets ids
// and of their split descendants (a split parent's state lists children
// in SplitInto, which reference what they share with it). A tablet without
// a state (never loaded) has no files. Any error reading a state is
// returned, naming the tablet, and nothing else: a state left out would
// lose its files to the sweep.
func ReferencedFiles(ctx context.Context, states tablet.StateStore, ids []string) ([]assign.TabletFiles, error) {
	var out []assign.TabletFiles
	seen := make(map[string]bool)
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		if seen[id] {
			continue
		}
		seen[id] = true
		st, err := states.Load(ctx, id)
		if errors.Is(err, tablet.ErrStateNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the state of tablet %s: %w", id, err)
		}
		ids = append(ids, st.SplitInto...)
		out = append(out, assign.TabletFiles{Tablet: assign.TabletID(id), Files: st.Files()})
	}
	return out, nil
}
