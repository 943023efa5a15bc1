package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

// coordCatalog is a meta.Catalog kept in the lock service: one key per
// table under coord's schema/, its value the table's JSON entry.
type coordCatalog struct {
	kv coord.KV
}

// NewCoordCatalog returns a catalog kept in kv under coord.PrefixSchema.
// Create and Update are compare-and-sets, so two masters serving the admin
// API never lose each other's changes.
func NewCoordCatalog(kv coord.KV) meta.Catalog { return &coordCatalog{kv: kv} }

func schemaKey(id meta.TableID) string { return coord.SchemaKey(id.String()) }

func (c *coordCatalog) Get(ctx context.Context, id meta.TableID) (meta.Table, error) {
	e, err := c.kv.Get(ctx, schemaKey(id))
	if errors.Is(err, coord.ErrNotFound) {
		return meta.Table{}, fmt.Errorf("%w: %s", meta.ErrTableNotFound, id)
	}
	if err != nil {
		return meta.Table{}, err
	}
	return decodeTable(e.Value)
}

func decodeTable(b []byte) (meta.Table, error) {
	var t meta.Table
	if err := json.Unmarshal(b, &t); err != nil {
		return meta.Table{}, fmt.Errorf("cluster: corrupt catalog entry: %w", err)
	}
	return t, nil
}

func (c *coordCatalog) List(ctx context.Context, instance string) ([]meta.Table, error) {
	ents, err := c.kv.List(ctx, coord.PrefixSchema)
	if err != nil {
		return nil, err
	}
	var out []meta.Table
	for _, e := range ents {
		t, err := decodeTable(e.Value)
		if err != nil {
			return nil, err
		}
		if instance == "" || t.ID.Instance == instance {
			out = append(out, t)
		}
	}
	return out, nil
}

func (c *coordCatalog) Create(ctx context.Context, t meta.Table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	err = c.kv.CAS(ctx, schemaKey(t.ID), b, 0)
	if errors.Is(err, coord.ErrConflict) {
		return fmt.Errorf("%w: %s", meta.ErrTableExists, t.ID)
	}
	return err
}

func (c *coordCatalog) Update(ctx context.Context, t meta.Table) error {
	e, err := c.kv.Get(ctx, schemaKey(t.ID))
	if errors.Is(err, coord.ErrNotFound) {
		return fmt.Errorf("%w: %s", meta.ErrTableNotFound, t.ID)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return c.kv.CAS(ctx, schemaKey(t.ID), b, e.ModifyIndex)
}

func (c *coordCatalog) Delete(ctx context.Context, id meta.TableID) error {
	return c.kv.Delete(ctx, schemaKey(id))
}

// parseTableString is the inverse of meta.TableID.String ("instance/table";
// "/METADATA" for METADATA).
func parseTableString(s string) (meta.TableID, error) {
	inst, table, ok := strings.Cut(s, "/")
	if !ok || table == "" {
		return meta.TableID{}, fmt.Errorf("cluster: malformed table %q", s)
	}
	return meta.TableID{Instance: inst, Table: table}, nil
}

// metadataTable is METADATA's catalog entry: it is in no catalog.
func metadataTable() meta.Table {
	return meta.Table{ID: meta.MetadataTable, Families: meta.MetadataFamilies()}
}
