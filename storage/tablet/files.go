package tablet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/sstable"
)

// sstSuffix ends every SSTable object name.
const sstSuffix = ".sst"

// newFileName returns a fresh SSTable name under dir:
// <dir>/<creation time, µs, 16 hex digits>-<16 random hex digits>.sst. The
// time lets garbage collection spare young files without listing dates;
// the random part makes names unique across processes, so a name is never
// reused.
func newFileName(dir string, now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	base := fmt.Sprintf("%016x-%s%s", now.UnixMicro(), hex.EncodeToString(b[:]), sstSuffix)
	if dir == "" {
		return base
	}
	return strings.TrimSuffix(dir, "/") + "/" + base
}

// FileCreated returns the creation time encoded in an SSTable name made by
// a tablet, and false for names of another shape.
func FileCreated(name string) (time.Time, bool) {
	base := path.Base(name)
	if !strings.HasSuffix(base, sstSuffix) || len(base) < 17 || base[16] != '-' {
		return time.Time{}, false
	}
	us, err := strconv.ParseUint(base[:16], 16, 63)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMicro(int64(us)), true
}

// tableFile is an open SSTable shared by the versions that list it. The
// last version to drop it closes it (but never deletes it: see
// CollectGarbage).
type tableFile struct {
	meta FileMeta
	r    *sstable.Reader
	obj  blob.Object
	refs atomic.Int64
}

func openTableFile(ctx context.Context, store blob.Store, meta FileMeta, opts sstable.ReaderOptions) (*tableFile, error) {
	obj, err := store.Open(ctx, meta.Name)
	if err != nil {
		return nil, err
	}
	r, err := sstable.Open(obj, meta.Name, opts)
	if err != nil {
		obj.Close()
		return nil, err
	}
	f := &tableFile{meta: meta, r: r, obj: obj}
	f.refs.Store(1)
	return f, nil
}

func (f *tableFile) ref() { f.refs.Add(1) }

func (f *tableFile) unref() {
	if f.refs.Add(-1) == 0 {
		_ = f.r.Close()
		_ = f.obj.Close()
	}
}

// GCOptions configure CollectGarbage.
type GCOptions struct {
	// Prefix is listed for candidates; only names ending in ".sst" are
	// considered.
	Prefix string
	// Live holds the name of every file referenced by any live tablet
	// state (State.Files of every tablet, split parents excluded).
	Live map[string]bool
	// InProgress holds names that compactions or splits under way may
	// still commit.
	InProgress map[string]bool
	// Grace spares files created less than Grace before Now (by the time
	// in their name; names of another shape count as old), which covers
	// files being written whose names nobody has reported yet.
	Grace time.Duration
	// Now defaults to time.Now().
	Now time.Time
	// DryRun lists what would be deleted without deleting it.
	DryRun bool
}

// CollectGarbage deletes the SSTables under opts.Prefix that no live state
// references, that are not in progress and that are older than the grace
// period — the master's mark-and-sweep. It returns the names deleted (or,
// with DryRun, that would be). Objects already gone are not errors.
func CollectGarbage(ctx context.Context, store blob.Store, opts GCOptions) ([]string, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	list, err := store.List(ctx, opts.Prefix)
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for _, a := range list {
		if !strings.HasSuffix(a.Name, sstSuffix) || opts.Live[a.Name] || opts.InProgress[a.Name] {
			continue
		}
		if created, ok := FileCreated(a.Name); ok && now.Sub(created) < opts.Grace {
			continue
		}
		if !opts.DryRun {
			if err := store.Delete(ctx, a.Name); err != nil && !blob.IsNotExist(err) {
				errs = append(errs, err)
				continue
			}
		}
		deleted = append(deleted, a.Name)
	}
	return deleted, errors.Join(errs...)
}

// LiveFiles returns the set of files the given states reference; states of
// split parents (SplitInto set) reference nothing.
func LiveFiles(states ...State) map[string]bool {
	live := make(map[string]bool)
	for _, st := range states {
		if len(st.SplitInto) > 0 {
			continue
		}
		for _, n := range st.Files() {
			live[n] = true
		}
	}
	return live
}
