package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Version identifies what one write stored under a name: the object's
// ETag in S3, a hash of its content in the local and memory stores. Two
// writes of the same bytes may have the same Version; that is harmless to
// the compare-and-swap it serves (the object is what the caller read).
type Version string

// ErrVersionMismatch is returned (wrapped) by PutIfVersion when the object
// is no longer at the version the caller read: someone else wrote (or
// deleted) it since. Nothing was written.
var ErrVersionMismatch = errors.New("object changed since it was read")

// Versioned is a Store that can replace an object only if it is still what
// the caller read — the compare-and-swap that fences a writer who lost its
// claim on an object (a tablet server whose lease lapsed) from
// overwriting what the object's next owner wrote. Every Store of this
// package implements it.
type Versioned interface {
	// GetVersion reads a whole object and its version, both of the same
	// write; ErrNotExist if it is absent.
	GetVersion(ctx context.Context, name string) ([]byte, Version, error)
	// PutIfVersion writes data as name, as Put does, only if the object
	// is at version v (v empty: only if there is no such object), and
	// returns the new version. Otherwise it returns an error matching
	// ErrVersionMismatch and writes nothing.
	PutIfVersion(ctx context.Context, name string, data []byte, v Version) (Version, error)
}

// contentVersion is the Version of the local and memory stores.
func contentVersion(data []byte) Version {
	sum := sha256.Sum256(data)
	return Version(hex.EncodeToString(sum[:16]))
}

func versionMismatch(name string) error {
	return &OpError{Op: "put", Name: name, Err: ErrVersionMismatch}
}

var (
	_ Versioned = (*memStore)(nil)
	_ Versioned = (*localStore)(nil)
	_ Versioned = (*s3Store)(nil)
)
