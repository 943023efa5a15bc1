package meta

import (
	"context"
	"errors"
)

// ErrTableNotFound is returned (wrapped) for a table that does not exist.
var ErrTableNotFound = errors.New("table not found")

// ErrTableExists is returned (wrapped) by Create for a table that exists.
var ErrTableExists = errors.New("table already exists")

// Catalog stores table entries. Implementations are safe for concurrent
// use; changes of one table are serialised by the caller (the master).
type Catalog interface {
	// Get returns a table's entry; ErrTableNotFound if there is none.
	Get(ctx context.Context, id TableID) (Table, error)
	// List returns the tables of an instance ("" for all), sorted by name.
	List(ctx context.Context, instance string) ([]Table, error)
	// Create stores a new entry; ErrTableExists if the table exists.
	Create(ctx context.Context, t Table) error
	// Update replaces an existing entry; ErrTableNotFound if there is none.
	Update(ctx context.Context, t Table) error
	// Delete removes an entry; ErrTableNotFound if there is none.
	Delete(ctx context.Context, id TableID) error
}
