package tablet

import (
	"context"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// answerLosingStore stores a conditional write and then, when armed,
// fails it anyway: lost reports an unknown outcome (the object store
// restarted before answering), retried reports the mismatch the S3
// client's retry of an already-stored attempt meets.
type answerLosingStore struct {
	blob.Store
	lost, retried, down bool
}

var errAnswerLost = errors.New("connection reset before the answer")

var errStoreDown = errors.New("connection refused")

func (s *answerLosingStore) GetVersion(ctx context.Context, name string) ([]byte, blob.Version, error) {
	if s.down {
		return nil, "", errStoreDown
	}
	return s.Store.(blob.Versioned).GetVersion(ctx, name)
}

func (s *answerLosingStore) PutIfVersion(ctx context.Context, name string, data []byte, v blob.Version) (blob.Version, error) {
	if s.down {
		return "", errStoreDown
	}
	next, err := s.Store.(blob.Versioned).PutIfVersion(ctx, name, data, v)
	if err != nil {
		return next, err
	}
	switch {
	case s.lost:
		s.lost = false
		return "", errAnswerLost
	case s.retried:
		s.retried = false
		// What the retry of a stored attempt gets: its If-Match names
		// the version the first attempt replaced.
		_, err := s.Store.(blob.Versioned).PutIfVersion(ctx, name, data, v)
		return "", err
	}
	return next, nil
}

// TestSaveSettlesItsOwnLandedWrite: a state Save that the object store
// stored but did not acknowledge does not leave the tablet's later Saves
// refused as if another server had written (the fault campaign saw a
// tablet that could never flush again after MinIO restarted), while a
// state another writer stored is still refused.
func TestSaveSettlesItsOwnLandedWrite(t *testing.T) {
	ctx := context.Background()
	store := &answerLosingStore{Store: blob.NewMemory()}
	states := NewBlobStateStore(store, "state")
	st := tabletdesc.State{ID: "settle", LastSeq: 1}
	if err := states.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := states.Load(ctx, "settle"); err != nil {
		t.Fatal(err)
	}
	saveSeq := func(seq uint64) error {
		st.LastSeq = seq
		return states.Save(ctx, st)
	}
	stored := func() uint64 {
		t.Helper()
		got, err := NewBlobStateStore(store, "state").Load(ctx, "settle")
		if err != nil {
			t.Fatal(err)
		}
		return got.LastSeq
	}

	// The answer is lost: the Save fails, but what it wrote is ours and
	// the next Save goes over it.
	store.lost = true
	if err := saveSeq(2); !errors.Is(err, errAnswerLost) {
		t.Fatalf("save with its answer lost: %v", err)
	}
	if got := stored(); got != 2 {
		t.Fatalf("stored state has LastSeq %d, want 2 (the write landed)", got)
	}
	if err := saveSeq(3); err != nil {
		t.Fatalf("save after one whose answer was lost: %v", err)
	}
	if got := stored(); got != 3 {
		t.Fatalf("stored state has LastSeq %d, want 3", got)
	}

	// The client retried a stored attempt: this Save is done.
	store.retried = true
	if err := saveSeq(4); err != nil {
		t.Fatalf("save whose retry met its own write: %v", err)
	}
	if err := saveSeq(5); err != nil {
		t.Fatalf("save after it: %v", err)
	}
	if got := stored(); got != 5 {
		t.Fatalf("stored state has LastSeq %d, want 5", got)
	}

	// A stored Save without its answer, then one that did not reach the
	// store: the first is still recognized as this store's.
	store.lost = true
	if err := saveSeq(10); !errors.Is(err, errAnswerLost) {
		t.Fatalf("save with its answer lost: %v", err)
	}
	store.down = true
	if err := saveSeq(11); !errors.Is(err, errStoreDown) {
		t.Fatalf("save with the store down: %v", err)
	}
	store.down = false
	if err := saveSeq(12); err != nil {
		t.Fatalf("save after an unanswered and a failed one: %v", err)
	}
	if got := stored(); got != 12 {
		t.Fatalf("stored state has LastSeq %d, want 12", got)
	}

	// Another writer after an unsettled Save: still fenced.
	store.lost = true
	if err := saveSeq(6); !errors.Is(err, errAnswerLost) {
		t.Fatalf("save with its answer lost: %v", err)
	}
	other := NewBlobStateStore(store, "state")
	if _, err := other.Load(ctx, "settle"); err != nil {
		t.Fatal(err)
	}
	if err := other.Save(ctx, tabletdesc.State{ID: "settle", LastSeq: 100}); err != nil {
		t.Fatal(err)
	}
	if err := saveSeq(7); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("save after another writer took the state: %v, want ErrStateConflict", err)
	}
	if got := stored(); got != 100 {
		t.Fatalf("stored state has LastSeq %d, want the other writer's 100", got)
	}
	// And a Save that was never stored is not taken for one that was.
	if err := saveSeq(8); !errors.Is(err, ErrStateConflict) {
		t.Fatalf("second save after the takeover: %v, want ErrStateConflict", err)
	}
}
