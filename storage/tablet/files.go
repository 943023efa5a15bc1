package tablet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
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
// last version to drop it closes it (but never deletes it: the master's
// sweep does, master.SweepFiles).
type tableFile struct {
	meta tabletdesc.FileMeta
	r    *sstable.Reader
	obj  blob.Object
	refs atomic.Int64
}

func openTableFile(ctx context.Context, store blob.Store, meta tabletdesc.FileMeta, opts sstable.ReaderOptions) (*tableFile, error) {
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
