package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// NewMemory returns an empty Store held in memory, for tests and for
// single-process use where nothing needs to outlive the process. It copies
// data on Put and on Get, so callers may reuse their buffers, and it is safe
// for concurrent use.
func NewMemory() Store {
	return &memStore{objects: make(map[string][]byte)}
}

type memStore struct {
	mu      sync.RWMutex
	objects map[string][]byte // values are never mutated once stored
}

func (m *memStore) Put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	m.store(name, bytes.Clone(data))
	return nil
}

// store installs data under name. data must not be modified afterwards:
// readers share it.
func (m *memStore) store(name string, data []byte) {
	if data == nil {
		data = []byte{}
	}
	m.mu.Lock()
	m.objects[name] = data
	m.mu.Unlock()
}

func (m *memStore) GetVersion(ctx context.Context, name string) ([]byte, Version, error) {
	data, err := m.Get(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return data, contentVersion(data), nil
}

func (m *memStore) PutIfVersion(ctx context.Context, name string, data []byte, v Version) (Version, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	data = append([]byte{}, data...) // never nil: stored objects are not
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.objects[name]
	if ok != (v != "") || (ok && contentVersion(cur) != v) {
		return "", versionMismatch(name)
	}
	m.objects[name] = data
	return contentVersion(data), nil
}

func (m *memStore) Create(ctx context.Context, name string) (Writer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return &memWriter{store: m, name: name}, nil
}

func (m *memStore) lookup(name string) ([]byte, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	data, ok := m.objects[name]
	return data, ok
}

func (m *memStore) Open(ctx context.Context, name string) (Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	data, ok := m.lookup(name)
	if !ok {
		return nil, notExist("open", name)
	}
	// The stored slice is never mutated, so the object can read it without
	// copying and is unaffected by later overwrites or deletes.
	return memObject{data: data}, nil
}

func (m *memStore) Get(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	data, ok := m.lookup(name)
	if !ok {
		return nil, notExist("get", name)
	}
	return bytes.Clone(data), nil
}

func (m *memStore) List(ctx context.Context, prefix string) ([]Attrs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	var out []Attrs
	for name, data := range m.objects {
		if strings.HasPrefix(name, prefix) {
			out = append(out, Attrs{Name: name, Size: int64(len(data))})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Attrs) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *memStore) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[name]; !ok {
		return notExist("delete", name)
	}
	delete(m.objects, name)
	return nil
}

type memWriter struct {
	store *memStore
	name  string
	buf   bytes.Buffer
	done  bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone(w.name)
	}
	return w.buf.Write(p)
}

func (w *memWriter) Close() error {
	if w.done {
		return errWriterDone(w.name)
	}
	w.done = true
	w.store.store(w.name, w.buf.Bytes())
	return nil
}

func (w *memWriter) Abort() error {
	if w.done {
		return errWriterDone(w.name)
	}
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}

type memObject struct{ data []byte }

func (o memObject) ReadAt(p []byte, off int64) (int, error) {
	return readAtBytes(o.data, p, off)
}

func (o memObject) Size() int64  { return int64(len(o.data)) }
func (o memObject) Close() error { return nil }

// readAtBytes implements io.ReaderAt over data.
func readAtBytes(data, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("blob: negative offset")
	}
	if off >= int64(len(data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// notExist returns an error wrapping ErrNotExist that names the object.
func notExist(op, name string) error {
	return &OpError{Op: op, Name: name, Err: ErrNotExist}
}

func errWriterDone(name string) error {
	return fmt.Errorf("blob: writer for %q already closed or aborted", name)
}
