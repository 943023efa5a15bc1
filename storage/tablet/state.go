package tablet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// StateStore persists tablet states. NewBlobStateStore keeps one object
// per tablet; `tabula dev` and the cluster both use it (the cluster's
// METADATA rows hold a tablet's ID, range and location, not its state).
type StateStore interface {
	// Load returns the saved state of tablet id; an error matching
	// ErrStateNotFound when there is none.
	Load(ctx context.Context, id string) (tabletdesc.State, error)
	// Save replaces the state of tablet st.ID atomically: after a crash
	// Load returns either the old or the new state, whole.
	Save(ctx context.Context, st tabletdesc.State) error
}

// ValidateID checks that a tablet ID can name an object: non-empty,
// printable, no '/'.
func ValidateID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\\\x00") || len(id) > 200 {
		return fmt.Errorf("tablet: invalid tablet ID %q (non-empty, at most 200 bytes, no '/', '\\' or NUL)", id)
	}
	return nil
}

type blobStateStore struct {
	store  blob.Store
	prefix string
}

// NewBlobStateStore returns a StateStore keeping each state as the JSON
// object <prefix>/<id>.tablet in store (Put is atomic).
func NewBlobStateStore(store blob.Store, prefix string) StateStore {
	return &blobStateStore{store: store, prefix: strings.TrimSuffix(prefix, "/")}
}

func (b *blobStateStore) name(id string) string {
	if b.prefix == "" {
		return id + ".tablet"
	}
	return b.prefix + "/" + id + ".tablet"
}

func (b *blobStateStore) Load(ctx context.Context, id string) (tabletdesc.State, error) {
	if err := ValidateID(id); err != nil {
		return tabletdesc.State{}, err
	}
	data, err := b.store.Get(ctx, b.name(id))
	if blob.IsNotExist(err) {
		return tabletdesc.State{}, fmt.Errorf("tablet %s: %w", id, ErrStateNotFound)
	}
	if err != nil {
		return tabletdesc.State{}, err
	}
	var st tabletdesc.State
	if err := json.Unmarshal(data, &st); err != nil {
		return tabletdesc.State{}, fmt.Errorf("tablet %s: decoding state %s: %w", id, b.name(id), err)
	}
	if st.ID != id {
		return tabletdesc.State{}, fmt.Errorf("tablet %s: state %s holds tablet %q", id, b.name(id), st.ID)
	}
	return st, nil
}

func (b *blobStateStore) Save(ctx context.Context, st tabletdesc.State) error {
	if err := ValidateID(st.ID); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return b.store.Put(ctx, b.name(st.ID), data)
}
