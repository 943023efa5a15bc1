// Package coord is Tabula's lock service: what the Bigtable paper asks of
// Chubby, behind one small interface with two implementations.
//
//   - [NewConsul] talks to a Consul agent (sessions, KV locks, blocking
//     queries); it is what a cluster runs on.
//   - [NewLocal] keeps everything in the process, with the same semantics and
//     a clock the caller may control ([FakeClock]); it is what unit tests of
//     the master's logic run on. [OpenLocal] is the same service with its
//     keys kept in a file, so that they survive a restart of the process
//     (sessions do not: their locks come back released): the lock service
//     of cluster roles run together in one process.
//
// The cluster uses it through four ideas:
//
//   - Sessions. A [Session] has a TTL and a lock-delay and is renewed in the
//     background. Its holder learns when the session may have lapsed
//     ([Session.Lapsed], [Session.Valid]: no renewal has succeeded for a full
//     TTL) and when it is definitely gone ([Session.Done]).
//   - Locks. A session holds a [Lock] on a key ([Session.TryLock],
//     [Session.Lock]); the key's value says who holds it (a server's
//     address). A lock is lost when its session lapses or ends, or when
//     someone else deletes the key, and [Lock.Lost] tells the holder.
//   - Small files. [KV] gets, puts, compare-and-sets, deletes and lists keys.
//   - Watches. [KV.Watch] and [KV.WatchKey] deliver changes, which is how the
//     master learns of tablet servers arriving and dying.
//
// # Keys
//
// Every key is relative to the service's per-cluster prefix (see
// [ClusterPrefix]); the names the cluster uses are [KeyMaster], [KeyRoot],
// [ServerKey], [SchemaKey] and [ACLKey].
//
// # Session behaviour: release, not delete
//
// When a session ends, the locks it held are released and their keys stay,
// with their values (Consul's "release" behaviour). This is what the
// paper's failure detection needs: the master declares a tablet server dead
// only after acquiring that server's lock itself, then deletes the key. A
// released key is a server that may be dead; a deleted key is a server that
// the master has declared dead, and a server that finds its key gone exits.
// With "delete" the key would vanish the moment the session expired, and the
// master could not tell a server that lost its session (and may try to
// reacquire its key) from one it has declared dead; nor would the key's
// lock-delay keep the master out while the old holder notices.
//
// Lock-delay: after a session ends (expiry or [Session.Destroy]), the keys
// it held cannot be locked by anyone for the session's lock-delay, which
// gives a holder cut off from the service time to notice that its lease has
// lapsed before a successor acts. An explicit [Lock.Release] has no delay.
//
// # Lease lapse
//
// A session's lease is measured on the holder's own monotonic clock,
// conservatively: it runs until TTL after the moment the last successful
// renewal was sent (the service starts its own TTL no earlier than when it
// receives the renewal, and Consul even waits twice the TTL before it
// invalidates a session). A lapse is final for the Session value: the
// holder must stop acting on its locks, and may start a new session and try
// to lock its keys again. Before acknowledging anything that relies on a
// lock (a write, for a tablet server) check [Session.Valid] synchronously:
// the Lapsed channel is closed by a goroutine that may run late, for
// example after the process was stopped with SIGSTOP.
//
// # Timing on Consul
//
// Consul invalidates a session only after twice its TTL without a renewal
// (measured: 20.0s for a 10s TTL after a holder was killed), while the
// holder lapses after one TTL on its own clock, so there is a margin of a
// TTL between a cut-off holder stopping and anyone else taking its locks,
// before any lock-delay. A master that takes a killed server's key waits
// up to 2×TTL plus the lock-delay: with the minimum TTL of 10s, a
// lock-delay of a few seconds keeps failover detection well under 30s;
// Consul's default 15s would not.
package coord

import (
	"context"
	"errors"
	"time"
)

// Errors returned by the services. Operations also return transport errors
// from Consul (wrapped, so errors.Is works on them) and the context's error.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("coord: key not found")
	// ErrConflict: a compare-and-set found a different modify index.
	ErrConflict = errors.New("coord: modify index conflict")
	// ErrLocked: the lock is held by another session, or the key is in its
	// lock-delay after the session holding it ended.
	ErrLocked = errors.New("coord: lock held or in lock-delay")
	// ErrSessionLapsed: the session's lease may have lapsed (no renewal
	// succeeded for a full TTL); the Session value can no longer be used.
	ErrSessionLapsed = errors.New("coord: session lease lapsed")
	// ErrSessionGone: the session no longer exists in the service (it
	// expired or was destroyed).
	ErrSessionGone = errors.New("coord: session gone")
	// ErrClosed: the service was closed.
	ErrClosed = errors.New("coord: service closed")
)

// Service is the lock service. It is safe for concurrent use.
type Service interface {
	KV

	// NewSession creates a session and, unless opts.ManualRenew, starts
	// renewing it in the background. Zero fields of opts take the
	// service's defaults. It fails with the service's error (Consul
	// unreachable, TTL out of range) and the context's.
	NewSession(ctx context.Context, opts SessionOptions) (Session, error)

	// EndSession ends another holder's session id, as the master ends the
	// session of a tablet server it has been unable to reach (the paper's
	// master deleting the server's file): its locks are released, their
	// keys stay and enter the session's lock-delay, and the holder learns
	// of it when it next renews. It returns the holder's lease — the
	// session's SessionOptions.Lease, or its TTL without one (HolderLease)
	// — because the holder may go on believing its lease valid for up to
	// that long after EndSession returns (see "Lease lapse" and lease.go):
	// nobody may act on the locks it held before FenceWait(lease) has
	// passed. It fails with ErrSessionGone if the session does not exist
	// (expired, destroyed or never created).
	EndSession(ctx context.Context, id string) (lease time.Duration, err error)

	// Close stops every background renewal and watch started through the
	// service and releases its resources. It does not destroy sessions: a
	// session of a closed service is left to expire, as if the process had
	// died. Later calls return ErrClosed.
	Close() error
}

// SessionOptions configure a session. The zero value means the service's
// defaults.
type SessionOptions struct {
	// Name is a label for operators (Consul shows it); it has no meaning.
	Name string
	// TTL is how long the session lives without a renewal. Consul accepts
	// 10s to 24h.
	TTL time.Duration
	// LockDelay is how long the keys the session held stay unlockable after
	// it ends. Consul accepts up to 60s; negative means none.
	LockDelay time.Duration
	// ManualRenew turns off background renewal: the session lives only as
	// long as the holder calls Renew. Tests use it to stop renewals.
	ManualRenew bool
	// Lease, when set and shorter than TTL, is the holder's own lease
	// (lease.go): the session is renewed every Lease/4 and is Valid only
	// until Lease after the start of the last successful renewal (again
	// after a later success; it lapses only after a TTL); EndSession
	// reports it, so that whoever ends the session waits FenceWait(Lease)
	// instead of a TTL. Zero: the TTL.
	Lease time.Duration
}

// Session is a lease on the service. Locks hang off it.
type Session interface {
	// ID is the service's name for the session (Consul's session ID); it
	// is what Entry.Session holds for keys this session has locked.
	ID() string

	// TTL and LockDelay are the session's effective settings.
	TTL() time.Duration
	LockDelay() time.Duration

	// Valid reports whether the lease is known to be valid now: false once
	// a full TTL has passed since the last successful renewal was sent, or
	// after the session ended, even if the goroutine that closes Lapsed
	// has not run yet. Check it before acknowledging work that relies on
	// the session's locks.
	Valid() bool

	// Lapsed is closed when the lease may have lapsed: no renewal has
	// succeeded for a full TTL, or the session ended. It is never reopened;
	// the session is then destroyed in the background (best effort, retried
	// until the service answers), so its locks are released subject to the
	// lock-delay.
	Lapsed() <-chan struct{}

	// Done is closed when the session is known to be gone from the
	// service: it expired, was destroyed, or the service was closed. Err
	// then says why.
	Done() <-chan struct{}

	// Err is nil while the session is valid, then ErrSessionLapsed,
	// ErrSessionGone or ErrClosed.
	Err() error

	// Renew renews the lease now. Background sessions need not call it.
	// It fails with ErrSessionLapsed or ErrSessionGone once the session
	// has lapsed or ended (and then never succeeds again), or with a
	// transport error, after which the lease runs on as before.
	Renew(ctx context.Context) error

	// TryLock locks key for this session without waiting, setting its
	// value (the key is created if absent). It fails with ErrLocked if
	// another session holds the key or it is in lock-delay, and with
	// ErrSessionLapsed/ErrSessionGone if this session cannot hold locks.
	// Locking a key this session already holds succeeds and updates the
	// value.
	TryLock(ctx context.Context, key string, value []byte) (Lock, error)

	// TryLockExisting is TryLock that never creates the key: it fails with
	// ErrNotFound if key does not exist. It is how a tablet server whose
	// session lapsed takes its key back with a new session (a key the
	// master deleted means the server was declared dead and must exit),
	// and how the master takes a possibly dead server's key without
	// resurrecting one deleted meanwhile.
	TryLockExisting(ctx context.Context, key string, value []byte) (Lock, error)

	// Lock is TryLock that waits while the key is held or in lock-delay,
	// until it succeeds, the session lapses or ends, or ctx is done.
	Lock(ctx context.Context, key string, value []byte) (Lock, error)

	// Destroy ends the session: its locks are released (keys and values
	// stay) and their keys enter lock-delay. Destroying an ended session
	// is not an error. The holder stops renewing the session whatever the
	// outcome. When the service cannot be told (an error), the
	// implementation keeps trying in the background until the service
	// answers (or it is closed), so the session ends then rather than when
	// the service expires it: Consul, once restarted, waits twice the TTL
	// from its new leader's start.
	Destroy(ctx context.Context) error
}

// Lock is a lock held by a session on one key.
type Lock interface {
	// Key is the locked key, relative to the service's prefix.
	Key() string

	// Lost is closed when the lock is no longer held: the session lapsed
	// or ended, the key was deleted, another session holds it, or the
	// holder released it. Detection of a deleted key is asynchronous (a
	// watch on Consul).
	Lost() <-chan struct{}

	// Release unlocks the key and leaves it and its value in place, with no
	// lock-delay. Releasing a lost lock is not an error.
	Release(ctx context.Context) error
}

// KV is the small-file part of the service: keys relative to the service's
// prefix, values of a few KiB (Consul's limit is 512 KiB).
type KV interface {
	// Get returns the entry for key, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)

	// Put sets key's value, creating the key if absent. A lock on the key
	// is unaffected.
	Put(ctx context.Context, key string, value []byte) error

	// CAS sets key's value only if its ModifyIndex is index; index 0 means
	// only if the key does not exist. Otherwise it fails with ErrConflict.
	CAS(ctx context.Context, key string, value []byte, index uint64) error

	// Delete removes key, locked or not. Deleting an absent key is not an
	// error.
	Delete(ctx context.Context, key string) error

	// DeleteCAS removes key only if its ModifyIndex is index, else it fails
	// with ErrConflict (ErrNotFound if the key is absent).
	DeleteCAS(ctx context.Context, key string, index uint64) error

	// List returns the entries whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Entry, error)

	// Watch delivers the changes to keys under prefix until ctx is done,
	// then closes the channel. It first delivers an EventPut for every key
	// present when the watch starts, then changes as they happen. Events
	// for one key arrive in the order of its changes, but intermediate
	// states may be coalesced (Consul reports states, not every write): the
	// guarantee is that after the last event for a key, the receiver's
	// picture of it matches the service's at that time. Puts of different
	// keys observed together arrive in ModifyIndex order. Transport errors
	// are retried with back-off, never delivered.
	Watch(ctx context.Context, prefix string) (<-chan Event, error)

	// WatchKey is Watch for the single key.
	WatchKey(ctx context.Context, key string) (<-chan Event, error)
}

// Entry is a key's state.
type Entry struct {
	Key   string // relative to the service's prefix
	Value []byte
	// CreateIndex and ModifyIndex are the service's logical clock at the
	// key's creation and last change (a put, or a lock taken or released).
	// ModifyIndex is what CAS and DeleteCAS compare.
	CreateIndex, ModifyIndex uint64
	// Session is the ID of the session holding the key's lock, or empty.
	Session string
}

// EventKind says what happened to a key.
type EventKind int

const (
	// EventPut: the key was created or changed (value or lock holder).
	EventPut EventKind = iota + 1
	// EventDelete: the key was deleted.
	EventDelete
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return "unknown"
}

// Event is one change seen by a watch. For EventPut, Entry is the key's new
// state; for EventDelete only Entry.Key is set.
type Event struct {
	Kind  EventKind
	Entry Entry
}
