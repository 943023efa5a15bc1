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

// OpenFiles are open SSTables handed from one tablet to others on the same
// server — a split parent's to its children — so that the children need
// not open (for an in-memory locality group: read whole) the files they
// share with it: the parent's rows are unserved until its children open.
// It holds a reference to each file until Release.
type OpenFiles struct {
	files    map[string]*tableFile
	inMemory map[string]bool // whether each file was opened in memory
}

// take returns the file named by m, with a reference for the caller, when
// it is among o's and was opened as the caller would open it; nil
// otherwise (the caller opens it). A nil o holds nothing.
func (o *OpenFiles) take(m tabletdesc.FileMeta, inMemory bool) *tableFile {
	if o == nil {
		return nil
	}
	f := o.files[m.Name]
	if f == nil || o.inMemory[m.Name] != inMemory || f.meta.Size != m.Size || f.meta.MaxSeq != m.MaxSeq {
		return nil
	}
	f.ref()
	return f
}

// Release drops o's references; the files close once no tablet holds them.
// Safe on nil.
func (o *OpenFiles) Release() {
	if o == nil {
		return
	}
	for _, f := range o.files {
		f.unref()
	}
	o.files = nil
}

// openFiles returns the files of version v, each with a new reference.
func openFiles(v *version) *OpenFiles {
	o := &OpenFiles{files: map[string]*tableFile{}, inMemory: map[string]bool{}}
	for name, g := range v.groups {
		inMemory := v.schema.Group(name).InMemory
		for _, f := range g.files {
			if _, dup := o.files[f.meta.Name]; dup {
				continue
			}
			f.ref()
			o.files[f.meta.Name] = f
			o.inMemory[f.meta.Name] = inMemory
		}
	}
	return o
}
