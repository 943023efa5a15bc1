package rowfile

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
)

// Location is a place where shard files live: a local directory, or a
// directory (key prefix) of an S3 or MinIO bucket. Files are written
// through the object store's atomic commit (storage/blob): a local file is
// written under a hidden temporary name and renamed when complete, an S3
// object is a multipart upload completed only on commit. A crash therefore
// never leaves a file under its final name that is not whole.
type Location struct {
	store blob.Store
	dir   string // key prefix inside the store, no leading or trailing slash; "" for the root
	desc  string // as given, for messages
}

// OpenLocation opens a location from its description:
//
//	/some/dir, ./dir, dir       a local directory (created if missing)
//	file:///abs/dir             the same
//	s3://BUCKET/PATH?endpoint=HOST:PORT&secure=false
//	                            objects BUCKET/PATH/NAME; the query is
//	                            storage/blob.OpenURL's (credentials from
//	                            AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)
func OpenLocation(ctx context.Context, desc string) (*Location, error) {
	return openLocation(ctx, desc)
}

// openLocation is OpenLocation with blob.OpenURL options for an s3://
// location.
func openLocation(ctx context.Context, desc string, opts ...func(*blob.S3Config)) (*Location, error) {
	if desc == "" {
		return nil, errors.New("rowfile: empty location: want a directory or s3://bucket/path?endpoint=host:port")
	}
	if !strings.Contains(desc, "://") {
		st, err := blob.NewLocal(desc)
		if err != nil {
			return nil, fmt.Errorf("rowfile: location %s: %w", desc, err)
		}
		return &Location{store: st, desc: desc}, nil
	}
	u, err := url.Parse(desc)
	if err != nil {
		return nil, fmt.Errorf("rowfile: location %q: %w", desc, err)
	}
	dir := ""
	if u.Scheme == "s3" {
		dir = strings.Trim(u.Path, "/")
		if dir != "" {
			if err := blob.ValidateName(dir); err != nil {
				return nil, fmt.Errorf("rowfile: location %q: path: %w", desc, err)
			}
		}
		u.Path, u.RawPath = "", ""
	}
	st, err := blob.OpenURL(ctx, u.String(), opts...)
	if err != nil {
		return nil, fmt.Errorf("rowfile: location %q: %w", desc, err)
	}
	return &Location{store: st, dir: dir, desc: desc}, nil
}

// OpenSource opens a location to read from: as OpenLocation, except that
// a local directory or an S3 bucket must exist (OpenLocation would create
// it; a misspelt input would then read as empty).
func OpenSource(ctx context.Context, desc string) (*Location, error) {
	dir := desc
	if strings.HasPrefix(desc, "file://") {
		u, err := url.Parse(desc)
		if err != nil {
			return nil, fmt.Errorf("rowfile: location %q: %w", desc, err)
		}
		dir = u.Path
	} else if strings.Contains(desc, "://") {
		return openLocation(ctx, desc, blob.BucketMustExist)
	}
	if dir != "" {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("rowfile: location %s: %w", desc, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("rowfile: location %s: not a directory", desc)
		}
	}
	return OpenLocation(ctx, desc)
}

// NewLocation returns the location dir (a key prefix without leading or
// trailing slash; "" for the root) of an open store.
func NewLocation(store blob.Store, dir string) *Location {
	return &Location{store: store, dir: strings.Trim(dir, "/"), desc: dir}
}

// String returns the location as it was given.
func (l *Location) String() string { return l.desc }

func (l *Location) key(name string) string {
	if l.dir == "" {
		return name
	}
	return l.dir + "/" + name
}

// Create starts writing the file name (a base name, no slashes). Nothing
// is visible under name until the returned writer's Close returns nil;
// Abort discards it.
func (l *Location) Create(ctx context.Context, name string) (blob.Writer, error) {
	if strings.Contains(name, "/") {
		return nil, fmt.Errorf("rowfile: file name %q must not contain '/'", name)
	}
	return l.store.Create(ctx, l.key(name))
}

// Open opens the file name for reading.
func (l *Location) Open(ctx context.Context, name string) (blob.Object, error) {
	return l.store.Open(ctx, l.key(name))
}

// Delete removes the file name; a missing file is an error matching
// blob.ErrNotExist.
func (l *Location) Delete(ctx context.Context, name string) error {
	return l.store.Delete(ctx, l.key(name))
}

// List returns the base names of the committed files directly in the
// location, sorted.
func (l *Location) List(ctx context.Context) ([]string, error) {
	prefix := ""
	if l.dir != "" {
		prefix = l.dir + "/"
	}
	attrs, err := l.store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("rowfile: list %s: %w", l.desc, err)
	}
	var names []string
	for _, a := range attrs {
		rest := strings.TrimPrefix(a.Name, prefix)
		if !strings.Contains(rest, "/") {
			names = append(names, rest)
		}
	}
	return names, nil
}

// Shards returns the names of the complete shard set PREFIX-SSSSS-of-
// NNNNN.EXT in the location, in shard order (see ListShards for the
// errors).
func (l *Location) Shards(ctx context.Context, prefix, ext string) ([]string, error) {
	names, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	set, err := ListShards(names, prefix, ext)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.desc, err)
	}
	return set, nil
}

// ShardWriter writes one file of rows to a Location. Write rows, then
// Commit to make the file visible whole, or Abort to discard it.
// Between them, Finish may end the file's content first (the CPU work),
// leaving Commit only the waiting for the location (flushing, fsync or
// upload, rename).
type ShardWriter struct {
	RowWriter
	name     string
	out      blob.Writer
	finished bool // the RowWriter is closed (Finish)
	done     bool
}

// CreateShard starts the file name with a RowWriter of opts on it.
func (l *Location) CreateShard(ctx context.Context, name string, opts WriterOptions) (*ShardWriter, error) {
	out, err := l.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	rw, err := NewWriter(out, opts)
	if err != nil {
		out.Abort()
		return nil, err
	}
	return &ShardWriter{RowWriter: rw, name: name, out: out}, nil
}

// Name is the file's name in its location.
func (w *ShardWriter) Name() string { return w.name }

// Close is Commit.
func (w *ShardWriter) Close() error { return w.Commit() }

// Finish ends the file's content: the rows still buffered, the footer,
// all handed to the location's writer (which may still buffer them), but
// nothing committed. No row may be written after it. On error the file
// is discarded (Abort then does nothing, Commit fails). It lets a caller
// that bounds its concurrent work end a file's CPU work there and commit
// it — mostly a wait for storage — outside that bound.
func (w *ShardWriter) Finish() error {
	if w.done {
		return errors.New("rowfile: shard committed or aborted already")
	}
	if w.finished {
		return nil
	}
	w.finished = true
	if err := w.RowWriter.Close(); err != nil {
		w.done = true
		w.out.Abort()
		return fmt.Errorf("rowfile: %s: %w", w.name, err)
	}
	return nil
}

// Commit finishes the file (footer, flush; see Finish) and commits it
// under its name. On error the file is discarded and nothing is visible.
func (w *ShardWriter) Commit() error {
	if w.done {
		return errors.New("rowfile: shard committed or aborted already")
	}
	if err := w.Finish(); err != nil {
		return err
	}
	w.done = true
	if err := w.out.Close(); err != nil {
		return fmt.Errorf("rowfile: commit %s: %w", w.name, err)
	}
	return nil
}

// Abort discards the file. It is safe after a failed Commit and a no-op
// after a successful one.
func (w *ShardWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	return w.out.Abort()
}

// OpenShard opens the file name for reading rows: the returned reader's
// Close closes the file as well.
func (l *Location) OpenShard(ctx context.Context, name string, opts ReaderOptions) (RowReader, error) {
	obj, err := l.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("rowfile: open %s: %w", path.Join(l.desc, name), err)
	}
	if opts.Name == "" {
		opts.Name = name
	}
	rr, err := NewReader(obj, obj.Size(), opts)
	if err != nil {
		obj.Close()
		return nil, err
	}
	return &objectReader{RowReader: rr, obj: obj}, nil
}

type objectReader struct {
	RowReader
	obj blob.Object
}

func (r *objectReader) Close() error {
	err := r.RowReader.Close()
	if err2 := r.obj.Close(); err == nil {
		err = err2
	}
	return err
}

// OpenShards finds the complete shard set PREFIX-*-of-N.EXT of format in
// the location and returns a reader per shard, in shard order. Every
// Parquet file's schema is checked before it returns, so a wrong file is
// found before any row is read; each file is then opened again when its
// reader is first used (and closed by Close), so a large set does not
// hold every file open at once.
func (l *Location) OpenShards(ctx context.Context, prefix string, opts ReaderOptions) ([]RowReader, error) {
	names, err := l.Shards(ctx, prefix, opts.Format.Ext())
	if err != nil {
		return nil, err
	}
	readers := make([]RowReader, 0, len(names))
	for _, n := range names {
		o := opts
		o.Name = n
		rr, err := l.OpenShard(ctx, n, o)
		if err != nil {
			return nil, err
		}
		if err := rr.Close(); err != nil {
			return nil, err
		}
		readers = append(readers, &lazyReader{ctx: ctx, loc: l, name: n, opts: o})
	}
	return readers, nil
}

// lazyReader opens its shard on the first Next.
type lazyReader struct {
	ctx  context.Context
	loc  *Location
	name string
	opts ReaderOptions
	r    RowReader
	err  error
}

func (z *lazyReader) Next() (cell.Row, error) {
	if z.r == nil && z.err == nil {
		z.r, z.err = z.loc.OpenShard(z.ctx, z.name, z.opts)
	}
	if z.err != nil {
		return cell.Row{}, z.err
	}
	return z.r.Next()
}

func (z *lazyReader) Close() error {
	if z.r == nil {
		return nil
	}
	err := z.r.Close()
	z.r, z.err = nil, errors.New("rowfile: reader closed")
	return err
}
