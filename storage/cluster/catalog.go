package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

// coordCatalog is a meta.Catalog kept in the lock service: one key per
// table under coord's schema/, its value the table's JSON entry.
type coordCatalog struct {
	kv coord.KV
}

// NewCoordCatalog returns a catalog kept in kv under coord.PrefixSchema.
// Create, Update and Delete are compare-and-sets, so two masters serving
// the admin API never lose each other's changes: an Update that lost a race
// fails with an error matching coord.ErrConflict that is also a gRPC status
// of code Aborted.
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
	// Keys sort by their escaped form, not by name ("a-b/t" escapes after
	// "a/t"): sort as the contract (and blobCatalog) says.
	slices.SortFunc(out, func(a, b meta.Table) int { return strings.Compare(a.ID.String(), b.ID.String()) })
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
	err = c.kv.CAS(ctx, schemaKey(t.ID), b, e.ModifyIndex)
	if errors.Is(err, coord.ErrConflict) {
		return &conflictError{Table: t.ID, Err: err}
	}
	return err
}

// deleteAttempts bounds the compare-and-deletes of one Delete that other
// writers of the entry may make fail.
const deleteAttempts = 5

func (c *coordCatalog) Delete(ctx context.Context, id meta.TableID) error {
	key := schemaKey(id)
	var err error
	for range deleteAttempts {
		var e coord.Entry
		if e, err = c.kv.Get(ctx, key); err == nil {
			err = c.kv.DeleteCAS(ctx, key, e.ModifyIndex)
		}
		switch {
		case errors.Is(err, coord.ErrNotFound):
			return fmt.Errorf("%w: %s", meta.ErrTableNotFound, id)
		case errors.Is(err, coord.ErrConflict):
			continue // changed since it was read: read it again
		}
		return err
	}
	return &conflictError{Table: id, Err: err}
}

// conflictError is returned by the coord catalog's Update (and Delete) when
// another writer (another master) changed the table's entry between its
// read and its compare-and-set: nothing was written, and the caller may
// retry. It matches coord.ErrConflict (errors.Is) and is a gRPC status of
// code Aborted (GRPCStatus), which is what the admin API answers, as Cloud
// Bigtable answers a concurrent modification.
type conflictError struct {
	Table meta.TableID
	Err   error // coord.ErrConflict, wrapped
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("cluster: catalog entry of %s changed concurrently; retry: %v", e.Table, e.Err)
}

func (e *conflictError) Unwrap() error { return e.Err }

// GRPCStatus makes the admin API answer Aborted (master's toStatus passes
// gRPC statuses through).
func (e *conflictError) GRPCStatus() *status.Status { return status.New(codes.Aborted, e.Error()) }

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
