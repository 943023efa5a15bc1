package master

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Backups are manifests in the object store that reference the SSTables of
// a table as of one point (the paper's immutable files: nothing is
// copied). A manifest is one object, written whole (blob.Store.Put is
// atomic): a backup exists once its manifest does, and never half.
//
// Every deletion of SSTables goes through SweepFiles, which keeps the files
// of every unexpired manifest and every file under a directory a pending
// marker names: CreateBackup and RestoreTable put a marker on the table
// directory they read or write before they read a tablet state and remove
// it after their manifest or table is committed. A sweep reads the markers
// and then the manifests after listing the store, so it either sees the
// marker or the manifest of a backup in progress, or it read the tablets'
// references before the backup read the states — and a file no state
// referenced then is in no state the backup reads later.
const (
	// BackupsPrefix holds the manifests: backups/<instance>/<backup>.json.
	BackupsPrefix = "backups/"
	// PendingPrefix holds the markers of backups and restores under way:
	// backups-pending/<instance>/<name>.json.
	PendingPrefix = "backups-pending/"
	// PendingMarkerTTL: a marker older than this is left over by a
	// process that died; sweeps ignore it and the expiry sweep deletes
	// it. A CreateBackup or the copy of a RestoreTable that runs longer
	// gives up before.
	PendingMarkerTTL = 30 * time.Minute
)

// BackupManifest is a backup: the source table's schema and the states of
// its tablets (with their file lists) at the backup's point.
type BackupManifest struct {
	ID       string `json:"id"`
	Instance string `json:"instance"`
	// Cluster is the cluster ID the backup was created in (echoed in its
	// name; Tabula has one cluster).
	Cluster string `json:"cluster"`
	// SourceTable is the table's ID; SourceBackup the full name of the
	// backup this one was copied from, if it was.
	SourceTable  string `json:"source_table"`
	SourceBackup string `json:"source_backup,omitempty"`
	// Schema is the table's catalog entry at the backup (Tablets and
	// AuthorizedViews cleared).
	Schema            meta.Table         `json:"schema"`
	Tablets           []tabletdesc.State `json:"tablets"`
	StartTime         time.Time          `json:"start_time"`
	EndTime           time.Time          `json:"end_time"`
	ExpireTime        time.Time          `json:"expire_time"`
	SizeBytes         int64              `json:"size_bytes"`
	Hot               bool               `json:"hot,omitempty"`
	HotToStandardTime *time.Time         `json:"hot_to_standard_time,omitempty"`
}

// Files returns every SSTable the backup references.
func (b BackupManifest) Files() []string {
	var out []string
	for _, st := range b.Tablets {
		out = append(out, st.Files()...)
	}
	return out
}

func manifestName(instance, id string) string {
	return BackupsPrefix + instance + "/" + id + ".json"
}

func pendingName(instance, name string) string {
	return PendingPrefix + instance + "/" + name + ".json"
}

// pendingMarker protects a table directory while a backup reads it or a
// table is deleted, and named files while a restored or undeleted table's
// tablets come to reference them.
type pendingMarker struct {
	Dir     string    `json:"dir,omitempty"`
	Files   []string  `json:"files,omitempty"`
	Created time.Time `json:"created"`
}

func putPending(ctx context.Context, store blob.Store, name, dir string, now time.Time) error {
	return putMarker(ctx, store, name, pendingMarker{Dir: dir, Created: now.UTC()})
}

// putPendingFiles writes a marker that keeps files from every sweep for
// PendingMarkerTTL. RestoreTable and UndeleteTable leave it to expire
// rather than delete it when they finish: a sweep that read the tablets'
// references before the new tablets existed may read the markers only
// later, when the backup or dropped-table record that kept the files until
// then may be gone.
func putPendingFiles(ctx context.Context, store blob.Store, name string, files []string, now time.Time) error {
	return putMarker(ctx, store, name, pendingMarker{Files: files, Created: now.UTC()})
}

func putMarker(ctx context.Context, store blob.Store, name string, m pendingMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return store.Put(ctx, name, b)
}

func deletePending(ctx context.Context, store blob.Store, name string) error {
	if err := store.Delete(ctx, name); err != nil && !blob.IsNotExist(err) {
		return err
	}
	return nil
}

func readManifest(ctx context.Context, store blob.Store, name string) (BackupManifest, error) {
	b, err := store.Get(ctx, name)
	if err != nil {
		return BackupManifest{}, err
	}
	var m BackupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return BackupManifest{}, fmt.Errorf("backup manifest %s: %w", name, err)
	}
	return m, nil
}

func putManifest(ctx context.Context, store blob.Store, m BackupManifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return store.Put(ctx, manifestName(m.Instance, m.ID), b)
}

// listManifests reads the manifests under prefix (BackupsPrefix, or one
// instance's); a manifest deleted meanwhile is skipped.
func listManifests(ctx context.Context, store blob.Store, prefix string) ([]BackupManifest, error) {
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []BackupManifest
	for _, o := range objs {
		if !strings.HasSuffix(o.Name, ".json") {
			continue
		}
		m, err := readManifest(ctx, store, o.Name)
		if blob.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// backupRetention is what the backups keep from a sweep.
type backupRetention struct {
	files map[string]bool
	dirs  []string // table directories with a live pending marker, each ending in "/"
}

func (r backupRetention) keeps(name string) bool {
	if r.files[name] {
		return true
	}
	for _, d := range r.dirs {
		if strings.HasPrefix(name, d) {
			return true
		}
	}
	return false
}

// retainedByBackups reads the pending markers, then the backup manifests
// and the dropped tables' records (undelete.go), then the markers again,
// and returns what they keep. A marker lives while its backup, restore,
// deletion or undelete is under way, or a while after (see
// putPendingFiles), and each of those writes its marker before the
// manifest or record it covers disappears (or after the one it precedes
// appears): reading the markers on both sides of the manifests and records
// sees, for every instant of the sweep, a marker or a manifest or record
// that keeps the files. Manifests and records expired at now are deleted
// first, and markers older than PendingMarkerTTL too: none keeps anything.
// Any error reading them is returned, so that the sweep deletes nothing.
func retainedByBackups(ctx context.Context, store blob.Store, now time.Time) (backupRetention, error) {
	r := backupRetention{files: map[string]bool{}}
	if err := r.readMarkers(ctx, store, now); err != nil {
		return r, err
	}
	ms, err := listManifests(ctx, store, BackupsPrefix)
	if err != nil {
		return r, err
	}
	for _, m := range ms {
		if !now.Before(m.ExpireTime) {
			// Expired: the backup is deleted, its files go with the
			// sweep unless something else keeps them.
			if err := store.Delete(ctx, manifestName(m.Instance, m.ID)); err != nil && !blob.IsNotExist(err) {
				return r, err
			}
			continue
		}
		for _, f := range m.Files() {
			r.files[f] = true
		}
	}
	drops, err := listDropped(ctx, store, DroppedPrefix)
	if err != nil {
		return r, err
	}
	for _, d := range drops {
		if !now.Before(d.ExpireTime) {
			// Past the retention: the table cannot be undeleted any
			// more, and its files go with the sweep.
			if err := store.Delete(ctx, d.object); err != nil && !blob.IsNotExist(err) {
				return r, err
			}
			continue
		}
		for _, f := range d.Files() {
			r.files[f] = true
		}
	}
	if err := r.readMarkers(ctx, store, now); err != nil {
		return r, err
	}
	return r, nil
}

// readMarkers adds what the live pending markers keep, deleting those
// older than PendingMarkerTTL.
func (r *backupRetention) readMarkers(ctx context.Context, store blob.Store, now time.Time) error {
	marks, err := store.List(ctx, PendingPrefix)
	if err != nil {
		return err
	}
	for _, o := range marks {
		b, err := store.Get(ctx, o.Name)
		if blob.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		var pm pendingMarker
		if err := json.Unmarshal(b, &pm); err != nil {
			return fmt.Errorf("pending marker %s: %w", o.Name, err)
		}
		if now.Sub(pm.Created) > PendingMarkerTTL {
			if err := deletePending(ctx, store, o.Name); err != nil {
				return err
			}
			continue
		}
		if pm.Dir != "" {
			r.dirs = append(r.dirs, strings.TrimSuffix(pm.Dir, "/")+"/")
		}
		for _, f := range pm.Files {
			r.files[f] = true
		}
	}
	return nil
}
