package blob

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// tempPrefix starts the name of every file a Local store is still writing.
// Names with a segment that starts with it are reserved: List never returns
// them and Local rejects them as object names, so a temporary file can never
// be mistaken for an object or collide with one.
const tempPrefix = ".tabula-tmp-"

// localWriteBuffer is the buffer of a Local Writer: large enough that an
// SSTable writer's small writes do not each cost a system call.
const localWriteBuffer = 256 << 10

// NewLocal returns a Store that keeps each object as a file under dir (which
// is created if missing): the object "a/b/c" is the file dir/a/b/c.
//
// Put and Writer.Close are atomic and durable: the data goes to a temporary
// file in the destination directory, which is fsynced, renamed over the
// destination, and the directory is fsynced, so after a crash a name holds
// either its old object or the whole new one. Directories are created as
// needed and removed again when Delete leaves them empty.
//
// A crash can leave temporary files behind (names starting with
// ".tabula-tmp-"); they are invisible to List and harmless. Other programs
// must not write into dir. Symbolic links inside dir are followed.
func NewLocal(dir string) (Store, error) {
	if dir == "" {
		return nil, errors.New("blob: local store: empty directory path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob: local store %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("blob: local store: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("blob: local store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("blob: local store %q: not a directory", abs)
	}
	return &localStore{root: abs}, nil
}

type localStore struct {
	root  string     // absolute
	casMu sync.Mutex // serialises PutIfVersion's read and write
}

// path maps a validated object name to its file.
func (l *localStore) path(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	for seg := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(seg, tempPrefix) {
			return "", fmt.Errorf("blob: %w %q: segments starting with %q are reserved by the local store",
				ErrInvalidName, name, tempPrefix)
		}
	}
	return filepath.Join(l.root, filepath.FromSlash(name)), nil
}

func (l *localStore) Put(ctx context.Context, name string, data []byte) error {
	w, err := l.create(ctx, "put", name)
	if err != nil {
		return err
	}
	if _, err := w.f.Write(data); err != nil {
		w.Abort()
		return &OpError{Op: "put", Name: name, Err: err}
	}
	return w.commit("put")
}

func (l *localStore) GetVersion(ctx context.Context, name string) ([]byte, Version, error) {
	data, err := l.Get(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return data, contentVersion(data), nil
}

// PutIfVersion compares and swaps among this Store's PutIfVersion
// callers (a Put between its read and its write is not seen): the local
// store belongs to one process (tabula dev locks its directory), whose
// conditional writers all go through here.
func (l *localStore) PutIfVersion(ctx context.Context, name string, data []byte, v Version) (Version, error) {
	l.casMu.Lock()
	defer l.casMu.Unlock()
	cur, err := l.Get(ctx, name)
	switch {
	case IsNotExist(err):
		if v != "" {
			return "", versionMismatch(name)
		}
	case err != nil:
		return "", err
	case contentVersion(cur) != v:
		return "", versionMismatch(name)
	}
	if err := l.Put(ctx, name, data); err != nil {
		return "", err
	}
	return contentVersion(data), nil
}

func (l *localStore) Create(ctx context.Context, name string) (Writer, error) {
	w, err := l.create(ctx, "create", name)
	if err != nil {
		return nil, err
	}
	w.buf = bufio.NewWriterSize(&writebackWriter{f: w.f}, localWriteBuffer)
	return w, nil
}

// create opens a new temporary file in name's directory.
func (l *localStore) create(ctx context.Context, op, name string) (*localWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := l.path(name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	// A concurrent Delete may remove a directory that has just become
	// empty between our mkdir and our CreateTemp; try again then.
	for attempt := 0; ; attempt++ {
		if err := l.mkdirAll(dir); err != nil {
			return nil, &OpError{Op: op, Name: name, Err: err}
		}
		f, err := os.CreateTemp(dir, tempPrefix+"*")
		if err == nil {
			return &localWriter{ctx: ctx, name: name, path: path, f: f}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 10 {
			return nil, &OpError{Op: op, Name: name, Err: err}
		}
	}
}

// mkdirAll creates dir (under root) and its missing parents, fsyncing the
// parent of each directory it creates so that the new entries survive a
// crash together with the file that will be renamed into dir.
func (l *localStore) mkdirAll(dir string) error {
	if dir == l.root {
		return nil
	}
	if fi, err := os.Stat(dir); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	}
	if err := l.mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Created concurrently by another writer, or a file is in the
			// way; Stat tells which.
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return nil
			}
		}
		return err
	}
	return syncDir(filepath.Dir(dir))
}

func (l *localStore) Open(ctx context.Context, name string) (Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := l.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, l.mapErr("open", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &OpError{Op: "open", Name: name, Err: err}
	}
	if !fi.IsDir() && fi.Mode().IsRegular() {
		return &localObject{f: f, name: name, size: fi.Size()}, nil
	}
	f.Close()
	// A directory is a prefix of other names, not an object.
	return nil, notExist("open", name)
}

func (l *localStore) Get(ctx context.Context, name string) ([]byte, error) {
	obj, err := l.Open(ctx, name)
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			oe.Op = "get"
		}
		return nil, err
	}
	defer obj.Close()
	data := make([]byte, obj.Size())
	n, err := obj.ReadAt(data, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(data)) {
		return nil, &OpError{Op: "get", Name: name, Err: err}
	}
	return data, nil
}

func (l *localStore) List(ctx context.Context, prefix string) ([]Attrs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if prefixMatchesNothing(prefix) {
		return nil, nil
	}
	// Walk only the deepest directory the prefix names.
	start := l.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir, err := l.path(prefix[:i])
		if err != nil {
			return nil, nil // a reserved temporary name: no objects there
		}
		start = dir
	}
	var out []Attrs
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// Directories vanish when a concurrent Delete empties them.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if strings.HasPrefix(d.Name(), tempPrefix) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return ctx.Err()
		}
		rel, err := filepath.Rel(l.root, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while we listed
			}
			return err
		}
		out = append(out, Attrs{Name: name, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, &OpError{Op: "list", Name: prefix, Err: err}
	}
	// WalkDir's per-directory order is not byte order of whole names
	// ("a-b" sorts before "a/b" but is visited after it).
	slices.SortFunc(out, func(a, b Attrs) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (l *localStore) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := l.path(name)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return l.mapErr("delete", name, err)
	}
	if fi.IsDir() {
		return notExist("delete", name)
	}
	if err := os.Remove(path); err != nil {
		return l.mapErr("delete", name, err)
	}
	dir := filepath.Dir(path)
	if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &OpError{Op: "delete", Name: name, Err: err}
	}
	// Remove directories this delete left empty, so that a store whose
	// tablets come and go does not accumulate empty directories. Remove
	// fails on a non-empty directory, which ends the climb.
	for dir != l.root && os.Remove(dir) == nil {
		dir = filepath.Dir(dir)
	}
	return nil
}

// mapErr turns a file-system error into a blob error; a missing file or a
// file where a directory should be both mean that the object is absent.
func (l *localStore) mapErr(op, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return notExist(op, name)
	}
	return &OpError{Op: op, Name: name, Err: err}
}

type localWriter struct {
	ctx  context.Context
	name string
	path string        // final path
	f    *os.File      // temporary file
	buf  *bufio.Writer // nil for Put, which writes once
	done bool
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone(w.name)
	}
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := w.buf.Write(p)
	if err != nil {
		return n, &OpError{Op: "write", Name: w.name, Err: err}
	}
	return n, nil
}

func (w *localWriter) Close() error {
	if w.done {
		return errWriterDone(w.name)
	}
	if err := w.ctx.Err(); err != nil {
		w.Abort()
		return err
	}
	if err := w.buf.Flush(); err != nil {
		w.Abort()
		return &OpError{Op: "close", Name: w.name, Err: err}
	}
	return w.commit("close")
}

// commit makes the temporary file durable and renames it into place.
func (w *localWriter) commit(op string) error {
	w.done = true
	tmp := w.f.Name()
	fail := func(err error) error {
		w.f.Close()
		os.Remove(tmp)
		return &OpError{Op: op, Name: w.name, Err: err}
	}
	// CreateTemp makes the file private (0600); objects get the mode an
	// ordinary file would.
	if err := w.f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := w.f.Sync(); err != nil {
		return fail(err)
	}
	if err := w.f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		return fail(err)
	}
	if err := syncDir(filepath.Dir(w.path)); err != nil {
		return &OpError{Op: op, Name: w.name, Err: err}
	}
	return nil
}

func (w *localWriter) Abort() error {
	if w.done {
		return errWriterDone(w.name)
	}
	w.done = true
	w.f.Close()
	if err := os.Remove(w.f.Name()); err != nil {
		return &OpError{Op: "abort", Name: w.name, Err: err}
	}
	return nil
}

type localObject struct {
	f    *os.File
	name string
	size int64
}

func (o *localObject) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = &OpError{Op: "read", Name: o.name, Err: err}
	}
	return n, err
}

func (o *localObject) Size() int64  { return o.size }
func (o *localObject) Close() error { return o.f.Close() }

// syncDir fsyncs a directory, making renames and removals in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
