package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
)

// The table catalog of a one-process tabula dev: the master keeps it in the
// object store, next to the tablets' files. (The cluster keeps it in the
// lock service: cluster.NewCoordCatalog.) It lives here, not in meta, so
// that meta — which the client imports — does not link the object stores.

// blobCatalog keeps one JSON object per table under a prefix.
type blobCatalog struct {
	store  blob.Store
	prefix string
}

// NewBlobCatalog returns a Catalog that keeps each table's entry as one
// object <prefix>/<instance>/<table>.json in store; blob.Store.Put is atomic,
// so an entry survives a crash whole, old or new.
func NewBlobCatalog(store blob.Store, prefix string) meta.Catalog {
	return &blobCatalog{store: store, prefix: strings.TrimSuffix(prefix, "/")}
}

func (c *blobCatalog) name(id meta.TableID) string {
	return c.prefix + "/" + id.Instance + "/" + id.Table + ".json"
}

func (c *blobCatalog) Get(ctx context.Context, id meta.TableID) (meta.Table, error) {
	b, err := c.store.Get(ctx, c.name(id))
	if blob.IsNotExist(err) {
		return meta.Table{}, fmt.Errorf("%w: %s", meta.ErrTableNotFound, id)
	}
	if err != nil {
		return meta.Table{}, err
	}
	var t meta.Table
	if err := json.Unmarshal(b, &t); err != nil {
		return meta.Table{}, fmt.Errorf("catalog entry %s: %w", c.name(id), err)
	}
	return t, nil
}

func (c *blobCatalog) List(ctx context.Context, instance string) ([]meta.Table, error) {
	prefix := c.prefix + "/"
	if instance != "" {
		prefix += instance + "/"
	}
	objs, err := c.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []meta.Table
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
		var t meta.Table
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", o.Name, err)
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out, nil
}

func (c *blobCatalog) Create(ctx context.Context, t meta.Table) error {
	if _, err := c.Get(ctx, t.ID); err == nil {
		return fmt.Errorf("%w: %s", meta.ErrTableExists, t.ID)
	} else if !errors.Is(err, meta.ErrTableNotFound) {
		return err
	}
	return c.put(ctx, t)
}

func (c *blobCatalog) Update(ctx context.Context, t meta.Table) error {
	if _, err := c.Get(ctx, t.ID); err != nil {
		return err
	}
	return c.put(ctx, t)
}

func (c *blobCatalog) put(ctx context.Context, t meta.Table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return c.store.Put(ctx, c.name(t.ID), b)
}

func (c *blobCatalog) Delete(ctx context.Context, id meta.TableID) error {
	err := c.store.Delete(ctx, c.name(id))
	if blob.IsNotExist(err) {
		return fmt.Errorf("%w: %s", meta.ErrTableNotFound, id)
	}
	return err
}
