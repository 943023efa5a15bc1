// Package blob is the object store Tabula keeps SSTables and commit logs in —
// the role GFS plays in the Bigtable paper. Objects are immutable once
// written: they are created whole (Put, or a Writer that commits on Close),
// read by ranges, listed by prefix and deleted.
//
// Two implementations: a local directory (the embedded default) and S3 or
// MinIO through minio-go.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
)

// ErrNotExist is returned (wrapped) for an object that does not exist. It is
// fs.ErrNotExist, so errors.Is(err, fs.ErrNotExist) holds as well.
var ErrNotExist = fs.ErrNotExist

// Store is an object store. Names are slash-separated paths without a
// leading slash ("tables/t1/tablets/00a/sst/000012.sst"). All methods are
// safe for concurrent use.
type Store interface {
	// Put writes data as the object name, replacing any object of that
	// name. When Put returns nil the object is durable and visible whole;
	// readers never see a partial object.
	Put(ctx context.Context, name string, data []byte) error
	// Create returns a Writer that streams a large object. Nothing is
	// visible under name until the Writer's Close returns nil.
	Create(ctx context.Context, name string) (Writer, error)
	// Open opens an object for ranged reads; ErrNotExist if it is absent.
	Open(ctx context.Context, name string) (Object, error)
	// Get reads a whole object; ErrNotExist if it is absent.
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the objects whose names start with prefix, sorted by
	// name.
	List(ctx context.Context, prefix string) ([]Attrs, error)
	// Delete removes an object. Deleting an absent object returns
	// ErrNotExist.
	Delete(ctx context.Context, name string) error
}

// Attrs describes one stored object.
type Attrs struct {
	Name string
	Size int64
}

// Writer streams one object. Close commits it (durably, atomically); Abort
// discards it. After either, the Writer must not be used.
type Writer interface {
	io.Writer
	Close() error
	Abort() error
}

// Object is an open object for ranged reads. ReadAt follows io.ReaderAt: a
// read past the end returns io.EOF with the bytes there were.
type Object interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// IsNotExist reports whether err says an object does not exist.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// OpError records a failed operation on a named object. Its Err is matched
// by errors.Is and errors.As (for example against ErrNotExist).
type OpError struct {
	Op   string // "put", "create", "open", "get", "list", "delete", "read", "write", "close", "abort"
	Name string // object name (or prefix for "list")
	Err  error
}

func (e *OpError) Error() string {
	return "blob: " + e.Op + " " + strconv.Quote(e.Name) + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

// ErrInvalidName is returned (wrapped, with the reason) for a name that no
// Store accepts; see ValidateName.
var ErrInvalidName = errors.New("invalid object name")

// ValidateName reports whether name is a valid object name, the same rules
// for every Store so that code tested on one works on all: non-empty, at
// most 1024 bytes, slash-separated segments that are neither empty (no
// leading, trailing or doubled slash) nor "." or "..", and no NUL or
// backslash. Errors wrap ErrInvalidName.
//
// Names are keys, not directories, but a local directory cannot hold both
// "a" and "a/b": portable callers never use one object's name as a
// directory prefix of another's.
func ValidateName(name string) error {
	reason := ""
	switch {
	case name == "":
		reason = "empty"
	case len(name) > 1024:
		reason = "longer than 1024 bytes"
	case strings.ContainsAny(name, "\x00\\"):
		reason = "contains NUL or backslash"
	default:
		for seg := range strings.SplitSeq(name, "/") {
			switch seg {
			case "":
				reason = "empty path segment (leading, trailing or doubled '/')"
			case ".", "..":
				reason = "path segment " + strconv.Quote(seg)
			}
			if reason != "" {
				break
			}
		}
	}
	if reason != "" {
		return fmt.Errorf("blob: %w %q: %s", ErrInvalidName, name, reason)
	}
	return nil
}

// prefixMatchesNothing reports whether no valid name can start with prefix,
// so List can answer without asking a backend that may reject such a
// prefix outright (S3 does, for "a//").
func prefixMatchesNothing(prefix string) bool {
	if strings.ContainsAny(prefix, "\x00\\") {
		return true
	}
	// Every complete segment of the prefix is a segment of the name.
	i := strings.LastIndexByte(prefix, '/')
	return i >= 0 && ValidateName(prefix[:i]) != nil
}
