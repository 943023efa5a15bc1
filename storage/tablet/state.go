package tablet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

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

// Forgetter is implemented by StateStores that keep something per tablet
// (NewBlobStateStore: the version of the state it last read or wrote, for
// its conditional writes). A tablet calls Forget with its ID once it is
// closed, so that a server loading and unloading tablets for months does
// not keep an entry for every tablet it ever served; the tablet's next
// Open loads its state afresh. Wrappers of a StateStore pass it on.
type Forgetter interface {
	Forget(id string)
}

// ValidateID checks that a tablet ID can name an object: non-empty,
// printable, no '/'.
func ValidateID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\\\x00") || len(id) > 200 {
		return fmt.Errorf("tablet: invalid tablet ID %q (non-empty, at most 200 bytes, no '/', '\\' or NUL)", id)
	}
	return nil
}

// savedState is a state as NewBlobStateStore writes it: the state's
// fields and a random number of the save (ignored when loading).
type savedState struct {
	tabletdesc.State
	Nonce uint64 `json:"save_nonce"`
}

type blobStateStore struct {
	store  blob.Store
	prefix string

	mu       sync.Mutex
	versions map[string]blob.Version // of each state this store last loaded or saved ("": found absent)
	saving   map[string]*sync.Mutex  // one Save of a tablet at a time
	// unsettled holds digests of the bytes of a tablet's Saves that
	// failed with an unknown outcome since its version was last known,
	// until a Save or Load settles them. All were conditional on that
	// version, so at most one of them can have been stored.
	unsettled map[string]map[[sha256.Size]byte]bool
}

// NewBlobStateStore returns a StateStore keeping each state as the JSON
// object <prefix>/<id>.tablet in store (Put is atomic).
//
// When store is a blob.Versioned (every store of package blob is), a Save
// replaces the state only if it is still the one this StateStore loaded or
// last saved (a conditional write), and otherwise fails with an error
// matching ErrStateConflict: another server has taken the tablet over and
// written since, and a server that lost its lease while a Save was in
// flight must not overwrite it. Opening a tablet saves its state before
// the tablet serves, so the old owner's late write either lands before
// that save (which then fails: the load is retried and reads it) or is
// refused; a state Load found absent is created only if it still is. A
// state this StateStore has not loaded (a split's children, a restored
// table's tablets, written by whoever creates them) is written
// unconditionally, as it is by a store without versions.
func NewBlobStateStore(store blob.Store, prefix string) StateStore {
	return &blobStateStore{store: store, prefix: strings.TrimSuffix(prefix, "/"),
		versions: make(map[string]blob.Version), saving: make(map[string]*sync.Mutex),
		unsettled: make(map[string]map[[sha256.Size]byte]bool)}
}

// Forget drops what the store keeps of tablet id: its last version (the
// next Save without a Load writes unconditionally, as for a state this
// store never read) and its save lock.
func (b *blobStateStore) Forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.versions, id)
	delete(b.saving, id)
	delete(b.unsettled, id)
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
	var data []byte
	var err error
	var version blob.Version
	if vs, ok := b.store.(blob.Versioned); ok {
		data, version, err = vs.GetVersion(ctx, b.name(id))
	} else {
		data, err = b.store.Get(ctx, b.name(id))
	}
	if blob.IsNotExist(err) {
		if _, ok := b.store.(blob.Versioned); ok {
			// Known absent: the Save creating it expects no state.
			b.mu.Lock()
			b.versions[id] = ""
			b.mu.Unlock()
		}
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
	if version != "" {
		b.mu.Lock()
		b.versions[id] = version
		delete(b.unsettled, id) // what is stored is now known
		b.mu.Unlock()
	}
	return st, nil
}

func (b *blobStateStore) Save(ctx context.Context, st tabletdesc.State) error {
	if err := ValidateID(st.ID); err != nil {
		return err
	}
	// Every save's bytes differ (Nonce), so that its version does too:
	// a store's version may be a hash of the content (an S3 ETag is), and
	// two servers can save byte-identical states (a takeover that
	// replayed nothing), which would let the stale one's write pass.
	data, err := json.Marshal(savedState{State: st, Nonce: rand.Uint64()})
	if err != nil {
		return err
	}
	vs, ok := b.store.(blob.Versioned)
	if !ok {
		return b.store.Put(ctx, b.name(st.ID), data)
	}
	b.mu.Lock()
	l := b.saving[st.ID]
	if l == nil {
		l = new(sync.Mutex)
		b.saving[st.ID] = l
	}
	b.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	b.mu.Lock()
	version, known := b.versions[st.ID]
	b.mu.Unlock()
	if !known {
		return b.store.Put(ctx, b.name(st.ID), data)
	}
	next, err := vs.PutIfVersion(ctx, b.name(st.ID), data, version)
	if errors.Is(err, blob.ErrVersionMismatch) {
		next, err = b.settle(ctx, vs, st.ID, data, err)
	}
	if err != nil {
		if !errors.Is(err, ErrStateConflict) {
			// The outcome is unknown: the object store may have stored
			// the state and lost its answer (a restart, a timeout). The
			// next Save's conditional write then finds this one's bytes
			// and settles it; see settle.
			b.mu.Lock()
			if b.unsettled[st.ID] == nil {
				b.unsettled[st.ID] = make(map[[sha256.Size]byte]bool)
			}
			b.unsettled[st.ID][sha256.Sum256(data)] = true
			b.mu.Unlock()
		}
		return err
	}
	b.mu.Lock()
	b.versions[st.ID] = next
	delete(b.unsettled, st.ID)
	b.mu.Unlock()
	return nil
}

// settle decides a conditional write of tablet id's state (data) that was
// refused because the object is no longer at the version this store
// knows. The refusal fences another writer's state; it may also come from
// this store's own write that landed without its answer: an earlier
// Save whose outcome was unknown, or an attempt of this one retried by
// the S3 client after the first was stored. Each Save's bytes are unique
// (their nonce), so the object's content tells them apart: this Save's
// bytes mean it is done; an earlier Save's with an unknown outcome mean
// the write goes again over them; anything else is another writer's, and
// the conflict (ErrStateConflict) stands. Called with id's save lock held.
func (b *blobStateStore) settle(ctx context.Context, vs blob.Versioned, id string, data []byte, refused error) (blob.Version, error) {
	conflict := fmt.Errorf("tablet %s: state %s: %w (%v)", id, b.name(id), ErrStateConflict, refused)
	current, version, err := vs.GetVersion(ctx, b.name(id))
	if blob.IsNotExist(err) {
		// Deleted behind this store's back: not a state it wrote.
		return "", conflict
	}
	if err != nil {
		return "", err
	}
	if bytes.Equal(current, data) {
		return version, nil
	}
	b.mu.Lock()
	ours := b.unsettled[id][sha256.Sum256(current)]
	b.mu.Unlock()
	if !ours {
		// The version stays the stale one: every later Save fails too,
		// until a Load reads what the other writer left.
		return "", conflict
	}
	b.mu.Lock()
	b.versions[id] = version
	delete(b.unsettled, id)
	b.mu.Unlock()
	next, err := vs.PutIfVersion(ctx, b.name(id), data, version)
	if errors.Is(err, blob.ErrVersionMismatch) {
		return b.settle(ctx, vs, id, data, err)
	}
	return next, err
}
