package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
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

// blobCatalog keeps one JSON object per table under a prefix.
type blobCatalog struct {
	store  blob.Store
	prefix string
}

// NewBlobCatalog returns a Catalog that keeps each table's entry as one
// object <prefix>/<instance>/<table>.json in store; blob.Store.Put is atomic,
// so an entry survives a crash whole, old or new.
func NewBlobCatalog(store blob.Store, prefix string) Catalog {
	return &blobCatalog{store: store, prefix: strings.TrimSuffix(prefix, "/")}
}

func (c *blobCatalog) name(id TableID) string {
	return c.prefix + "/" + id.Instance + "/" + id.Table + ".json"
}

func (c *blobCatalog) Get(ctx context.Context, id TableID) (Table, error) {
	b, err := c.store.Get(ctx, c.name(id))
	if blob.IsNotExist(err) {
		return Table{}, fmt.Errorf("%w: %s", ErrTableNotFound, id)
	}
	if err != nil {
		return Table{}, err
	}
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return Table{}, fmt.Errorf("catalog entry %s: %w", c.name(id), err)
	}
	return t, nil
}

func (c *blobCatalog) List(ctx context.Context, instance string) ([]Table, error) {
	prefix := c.prefix + "/"
	if instance != "" {
		prefix += instance + "/"
	}
	objs, err := c.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []Table
	for _, o := range objs {
		if !strings.HasSuffix(o.Name, ".json") {
			continue
		}
		b, err := c.store.Get(ctx, o.Name)
		if blob.IsNotExist(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		var t Table
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", o.Name, err)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out, nil
}

func (c *blobCatalog) Create(ctx context.Context, t Table) error {
	if _, err := c.Get(ctx, t.ID); err == nil {
		return fmt.Errorf("%w: %s", ErrTableExists, t.ID)
	} else if !errors.Is(err, ErrTableNotFound) {
		return err
	}
	return c.put(ctx, t)
}

func (c *blobCatalog) Update(ctx context.Context, t Table) error {
	if _, err := c.Get(ctx, t.ID); err != nil {
		return err
	}
	return c.put(ctx, t)
}

func (c *blobCatalog) put(ctx context.Context, t Table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return c.store.Put(ctx, c.name(t.ID), b)
}

func (c *blobCatalog) Delete(ctx context.Context, id TableID) error {
	err := c.store.Delete(ctx, c.name(id))
	if blob.IsNotExist(err) {
		return fmt.Errorf("%w: %s", ErrTableNotFound, id)
	}
	return err
}
