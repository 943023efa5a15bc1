package tablet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/commitlog"
)

// FileMeta describes one SSTable of a tablet.
type FileMeta struct {
	Name string `json:"name"` // object name in the store
	Size int64  `json:"size"`
	// SmallestKey and LargestKey are the file's first and last internal
	// keys (of every row it holds, also rows outside the tablet's range
	// when the file is shared with a split sibling).
	SmallestKey []byte `json:"smallest_key,omitempty"`
	LargestKey  []byte `json:"largest_key,omitempty"`
	MaxSeq      uint64 `json:"max_seq"`
	Entries     uint64 `json:"entries"`
}

// State is what a tablet persists: enough to reopen it. It is small and
// saved whole after every change of the file lists (flush, compaction,
// split).
type State struct {
	ID string `json:"id"`
	// Start and End bound the tablet's rows to [Start, End); an empty End
	// is the end of the table.
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"`
	// Groups lists each locality group's SSTables, newest first.
	Groups map[string][]FileMeta `json:"groups,omitempty"`
	// RedoPoint is where replay of the commit log starts; FlushedSeq is
	// the highest sequence number whose entries are in the SSTables:
	// records at or after RedoPoint with higher sequence numbers are
	// replayed.
	RedoPoint  commitlog.Position `json:"redo_point"`
	FlushedSeq uint64             `json:"flushed_seq"`
	// LastSeq is the highest sequence number used when the state was
	// saved (also by drops); a reopened tablet continues above it.
	LastSeq uint64 `json:"last_seq"`
	// Families are the names of the schema's families when the state was
	// saved, so that Open notices families dropped meanwhile.
	Families []string `json:"families,omitempty"`
	// Drops records families dropped from the schema: name → the sequence
	// number that shadows their older cells (a table-wide family marker),
	// kept until a major compaction removed those cells.
	Drops map[string]uint64 `json:"drops,omitempty"`
	// Parent is the tablet this one was split from, if any.
	Parent string `json:"parent,omitempty"`
	// SplitInto, when set, says the tablet was split into these children
	// (left, right) at SplitKey; it is no longer served.
	SplitInto []string `json:"split_into,omitempty"`
	SplitKey  []byte   `json:"split_key,omitempty"`
}

// Files returns the names of every SSTable the state references.
func (s State) Files() []string {
	var out []string
	for _, g := range slices.Sorted(maps.Keys(s.Groups)) {
		for _, f := range s.Groups[g] {
			out = append(out, f.Name)
		}
	}
	return out
}

func (s State) clone() State {
	out := s
	out.Groups = make(map[string][]FileMeta, len(s.Groups))
	for g, fs := range s.Groups {
		out.Groups[g] = slices.Clone(fs)
	}
	out.Families = slices.Clone(s.Families)
	out.Drops = maps.Clone(s.Drops)
	out.SplitInto = slices.Clone(s.SplitInto)
	return out
}

// StateStore persists tablet states. The cluster keeps them in METADATA
// rows; NewBlobStateStore keeps one object per tablet.
type StateStore interface {
	// Load returns the saved state of tablet id; an error matching
	// ErrStateNotFound when there is none.
	Load(ctx context.Context, id string) (State, error)
	// Save replaces the state of tablet st.ID atomically: after a crash
	// Load returns either the old or the new state, whole.
	Save(ctx context.Context, st State) error
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

func (b *blobStateStore) Load(ctx context.Context, id string) (State, error) {
	if err := ValidateID(id); err != nil {
		return State{}, err
	}
	data, err := b.store.Get(ctx, b.name(id))
	if blob.IsNotExist(err) {
		return State{}, fmt.Errorf("tablet %s: %w", id, ErrStateNotFound)
	}
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("tablet %s: decoding state %s: %w", id, b.name(id), err)
	}
	if st.ID != id {
		return State{}, fmt.Errorf("tablet %s: state %s holds tablet %q", id, b.name(id), st.ID)
	}
	return st, nil
}

func (b *blobStateStore) Save(ctx context.Context, st State) error {
	if err := ValidateID(st.ID); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return b.store.Put(ctx, b.name(st.ID), data)
}
