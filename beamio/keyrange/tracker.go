package keyrange

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Tracker tracks the claims of a splittable DoFn over a Restriction. Its
// positions are row keys ([]byte): a DoFn claims each row's key, in
// strictly increasing order, before it emits anything for the row, and
// stops when a claim fails. Claiming the empty key (nil or []byte{}),
// which is no row's key, claims the rest of the restriction: a DoFn does
// so when its read reached the end without the tracker stopping it, so
// that the restriction is done even when its end is unbounded.
//
// It implements sdf.BoundableRTracker (always bounded) and is safe for
// concurrent use, as dynamic splitting needs: the runner's TrySplit and
// GetProgress arrive while ProcessElement claims.
type Tracker struct {
	mu      sync.Mutex
	rest    Restriction
	claimed []byte // the last key claimed; nil: none yet
	ended   bool   // a claim reached the end (the empty key, or a key at or past End)
	stopped bool   // TryClaim returned false
	splits  int    // successful TrySplits
	err     error
}

// NewTracker returns a tracker of rest.
func NewTracker(rest Restriction) *Tracker {
	return &Tracker{rest: rest}
}

func (t *Tracker) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("keyrange.Tracker(%v claimed %q ended %v stopped %v err %v)", t.rest, t.claimed, t.ended, t.stopped, t.err)
}

// TryClaim claims the key pos ([]byte). It returns true when pos lies in
// the restriction after every key claimed before: the caller must then
// process the row fully. It returns false, and the caller must stop
// without emitting anything more, when
//   - pos is empty (the end is claimed) or at or past End: the
//     restriction is done;
//   - pos is before Start, not after the last claimed key, or not a
//     []byte, or the tracker had already stopped: an error, reported by
//     GetError (the bundle fails).
func (t *Tracker) TryClaim(pos any) bool {
	key, ok := pos.([]byte)
	if !ok {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.stopped {
			t.err = errors.New("keyrange: a key was claimed after the tracker had stopped the DoFn")
			return false
		}
		t.stopped = true
		t.err = fmt.Errorf("keyrange: claimed position is a %T, want a []byte row key", pos)
		return false
	}
	return t.TryClaimKey(key)
}

// TryClaimKey is TryClaim of a row key without the boxing of pos into an
// interface: a DoFn claims every row it reads, so this is its per-row
// path (no allocation: the tracker keeps its own copy of the last key in
// a buffer it reuses).
func (t *Tracker) TryClaimKey(key []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.claimLocked(key, t.claimed) {
		return false
	}
	// The copy lives in a buffer of the tracker's own (nothing outside the
	// lock keeps a reference to it: from and Position copy or only read),
	// so that claiming allocates only when a key outgrows it.
	t.claimed = append(t.claimed[:0], key...)
	return true
}

// TryClaimKeys claims n keys, key(0) to key(n-1), in turn as TryClaimKey
// claims each, and returns how many it claimed: all n, or those before
// the first whose claim failed (the tracker then stopped, as that
// TryClaimKey would have stopped it). It takes the lock once for all of
// them and keeps a copy of the last key claimed only: a DoFn that has
// rows at hand in batches claims a batch before it emits its rows, at a
// small part of the per-row cost. key(i) must stay valid during the call.
func (t *Tracker) TryClaimKeys(n int, key func(i int) []byte) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == 0 {
		return 0
	}
	if t.stopped || !t.endsAfter(key(n-1)) {
		return t.claimEachLocked(n, key)
	}
	// The batch's last key is before End, so every key is once the keys
	// are known to ascend: one comparison per key instead of
	// claimLocked's two (a batch is a read's rows, and these comparisons
	// were about a tenth of Read's own CPU).
	last := t.claimed
	for i := range n {
		k := key(i)
		if len(k) == 0 || (last != nil && bytes.Compare(k, last) <= 0) ||
			(last == nil && bytes.Compare(k, t.rest.Start) < 0) {
			// Not an ascending batch within the restriction: claim
			// key by key from the start (nothing was recorded yet),
			// which stops where TryClaimKey would — possibly before
			// this key, at one at or past End.
			return t.claimEachLocked(n, key)
		}
		last = k
	}
	return t.keep(n, last)
}

// endsAfter reports whether key is before the restriction's End (always,
// when the restriction is unbounded). Callers hold mu.
func (t *Tracker) endsAfter(key []byte) bool {
	return t.rest.Unbounded() || bytes.Compare(key, t.rest.End) < 0
}

// claimEachLocked is TryClaimKeys checking every key with claimLocked.
// Callers hold mu.
func (t *Tracker) claimEachLocked(n int, key func(i int) []byte) int {
	last := t.claimed
	claimed := 0
	for ; claimed < n; claimed++ {
		k := key(claimed)
		if !t.claimLocked(k, last) {
			break
		}
		last = k
	}
	return t.keep(claimed, last)
}

// keep records last as the last key claimed when claimed keys were, and
// returns claimed. Callers hold mu.
func (t *Tracker) keep(claimed int, last []byte) int {
	if claimed > 0 {
		t.claimed = append(t.claimed[:0], last...)
	}
	return claimed
}

// claimLocked is TryClaimKey's check of key, last the key claimed before
// it (nil: none), without recording key as claimed. Callers hold mu.
func (t *Tracker) claimLocked(key, last []byte) bool {
	if t.stopped {
		t.err = errors.New("keyrange: a key was claimed after the tracker had stopped the DoFn")
		return false
	}
	t.stopped = true // until the claim succeeds
	switch {
	case len(key) == 0:
		t.ended = true
		return false
	case last != nil && bytes.Compare(key, last) <= 0:
		// (After a first claim, a key after the claimed one is after
		// Start too: one comparison per row.)
		t.err = fmt.Errorf("keyrange: claimed key %q is not after the last claimed key %q", key, last)
		return false
	case last == nil && bytes.Compare(key, t.rest.Start) < 0:
		t.err = fmt.Errorf("keyrange: claimed key %q is before the restriction %v", key, t.rest)
		return false
	case !t.rest.Unbounded() && bytes.Compare(key, t.rest.End) >= 0:
		t.ended = true
		return false
	}
	t.stopped = false
	return true
}

// GetError returns the error that stopped the tracker, nil if none did.
func (t *Tracker) GetError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// from returns the first key not yet claimed. Callers hold mu.
func (t *Tracker) from() []byte {
	if t.claimed == nil {
		return t.rest.Start
	}
	return Successor(t.claimed)
}

// isDone reports IsDone. Callers hold mu.
func (t *Tracker) isDone() bool {
	if t.err != nil {
		return false
	}
	if t.ended {
		return true
	}
	return !t.rest.Unbounded() && bytes.Compare(t.from(), t.rest.End) >= 0
}

// IsDone reports whether every key of the restriction has been claimed
// or ruled out: a claim reached the end, or no key lies between the last
// claimed key and End (as after a split at fraction 0). A tracker
// stopped by an error is not done.
func (t *Tracker) IsDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.isDone()
}

// TrySplit splits the unclaimed keys at about fraction of them (by key
// position, clamped to [0, 1]): the tracker keeps [Start, s) as the
// primary and returns [s, End) as the residual, where s is after the
// last claimed key. Fraction 0 is a checkpoint: s is the first unclaimed
// key, the primary has no work left and the tracker is done. When no
// split is possible — the tracker is done or stopped, or no key lies
// between the split point and End — it returns the restriction and a nil
// residual. Bytes is divided by key position.
func (t *Tracker) TrySplit(fraction float64) (primary, residual any, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.isDone() {
		return t.rest, nil, nil
	}
	if math.IsNaN(fraction) || fraction < 0 {
		fraction = 0
	}
	from := t.from()
	s, ok := Interpolate(from, t.rest.End, fraction)
	if !ok {
		return t.rest, nil, nil
	}
	p := Position(t.rest.Start, t.rest.End, s)
	pBytes := int64(math.Round(float64(t.rest.Bytes) * p))
	res := Restriction{Start: s, End: t.rest.End, Bytes: t.rest.Bytes - pBytes}
	t.rest = Restriction{Start: t.rest.Start, End: s, Bytes: pBytes}
	t.splits++
	return t.rest, res, nil
}

// Splits returns how many times TrySplit gave away a residual: a DoFn
// reports it (as a metric) to show that the runner split its work.
func (t *Tracker) Splits() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.splits
}

// GetProgress reports the work done and remaining by key position
// within the restriction, scaled to its estimated Bytes (to 1 when
// unknown): done grows as keys are claimed, and a done tracker has
// nothing remaining.
func (t *Tracker) GetProgress() (done, remaining float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	size := float64(t.rest.Bytes)
	if size <= 0 {
		size = 1
	}
	if t.isDone() {
		return size, 0
	}
	p := 0.0
	if t.claimed != nil {
		p = Position(t.rest.Start, t.rest.End, t.claimed)
	}
	return p * size, (1 - p) * size
}

// GetRestriction returns the current restriction (the primary after a
// split).
func (t *Tracker) GetRestriction() any {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest
}

// IsBounded reports true: a key range holds finitely many rows.
func (t *Tracker) IsBounded() bool { return true }
