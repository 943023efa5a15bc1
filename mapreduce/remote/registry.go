package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

// PrefixWorkers is where workers register under a cluster's Consul prefix:
// one lock per live worker, WorkerKey(name), held by the worker's session,
// whose value is the worker's Registration encoded as JSON.
const PrefixWorkers = "workers/"

// WorkerKey is the lock key of worker name.
func WorkerKey(name string) string { return PrefixWorkers + url.PathEscape(name) }

// WorkerName is the inverse of WorkerKey; ok is false for any other key.
func WorkerName(key string) (name string, ok bool) {
	rest, ok := strings.CutPrefix(key, PrefixWorkers)
	if !ok || rest == "" {
		return "", false
	}
	name, err := url.PathUnescape(rest)
	if err != nil {
		return "", false
	}
	return name, true
}

// Registration is what a worker publishes about itself.
type Registration struct {
	// Name is unique per worker process (address plus a random suffix),
	// so a restarted worker is a new worker: the old one's map outputs are
	// gone with it.
	Name string `json:"name"`
	// Addr is the gRPC address the worker service is served on.
	Addr string `json:"addr"`
	// Host is the machine's name, matched against the tablet servers'
	// hosts for locality.
	Host string `json:"host"`
	// Slots is how many attempts the worker runs at once.
	Slots int `json:"slots"`
}

func (r Registration) validate() error {
	switch {
	case r.Name == "":
		return errors.New("remote: registration without a name")
	case r.Addr == "":
		return fmt.Errorf("remote: registration of %s without an address", r.Name)
	}
	return nil
}

// DecodeRegistration decodes a workers/ key's value.
func DecodeRegistration(value []byte) (Registration, error) {
	var r Registration
	if err := json.Unmarshal(value, &r); err != nil {
		return Registration{}, fmt.Errorf("remote: worker registration: %w", err)
	}
	return r, r.validate()
}

// Registered is a worker's hold on its key. The worker must stop (kill its
// attempts and exit) once Lost is closed: from then on coordinators count
// it dead and re-run its work elsewhere.
type Registered struct {
	kv   coord.KV
	sess coord.Session
	lock coord.Lock
	lost chan struct{}
	stop chan struct{}
}

// RegisterOptions tune a worker's session; zero fields take the service's
// defaults.
type RegisterOptions struct {
	TTL, LockDelay time.Duration
}

// Register creates a session and locks WorkerKey(r.Name) with r as value.
// It fails if r is incomplete, if the key is held (a name clash), or with
// the service's error.
func Register(ctx context.Context, svc coord.Service, r Registration, opts RegisterOptions) (*Registered, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	value, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	sess, err := svc.NewSession(ctx, coord.SessionOptions{Name: "worker " + r.Name, TTL: opts.TTL, LockDelay: opts.LockDelay})
	if err != nil {
		return nil, fmt.Errorf("remote: worker session: %w", err)
	}
	lock, err := sess.TryLock(ctx, WorkerKey(r.Name), value)
	if err != nil {
		_ = sess.Destroy(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("remote: locking %s: %w", WorkerKey(r.Name), err)
	}
	g := &Registered{kv: svc, sess: sess, lock: lock, lost: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		select {
		case <-sess.Lapsed():
		case <-lock.Lost():
		case <-g.stop:
			return
		}
		close(g.lost)
	}()
	return g, nil
}

// Lost is closed when the worker's session lapsed or its key was taken or
// deleted.
func (g *Registered) Lost() <-chan struct{} { return g.lost }

// Close unregisters: the key is deleted (coordinators see the worker leave
// at once) and the session destroyed.
func (g *Registered) Close(ctx context.Context) error {
	select {
	case <-g.stop:
		return nil
	default:
		close(g.stop)
	}
	// Deleting the key makes coordinators see the worker leave at once;
	// only while it still names this session, so that nothing but our own
	// registration is ever removed.
	var err error
	if e, gerr := g.kv.Get(ctx, g.lock.Key()); gerr == nil && e.Session == g.sess.ID() {
		err = g.kv.DeleteCAS(ctx, e.Key, e.ModifyIndex)
	}
	if e := g.sess.Destroy(ctx); err == nil {
		err = e
	}
	return err
}

// MemberEvent is a change in the set of registered workers.
type MemberEvent struct {
	// Joined is true when the worker registered (or changed its
	// registration), false when it left: its key was deleted or released
	// (its session ended: a crash, a partition, a clean stop).
	Joined bool
	Worker Registration
}

// WatchMembers watches workers/ on kv and delivers who joins and leaves
// until ctx is done, then closes the channel. It first delivers a Joined
// event for every worker registered when it starts. Keys left behind by
// workers whose sessions ended (released, no holder) are deleted, if
// unchanged, so that they do not accumulate.
func WatchMembers(ctx context.Context, kv coord.KV) (<-chan MemberEvent, error) {
	events, err := kv.Watch(ctx, PrefixWorkers)
	if err != nil {
		return nil, fmt.Errorf("remote: watching %s: %w", PrefixWorkers, err)
	}
	out := make(chan MemberEvent, 16)
	go func() {
		defer close(out)
		known := map[string]Registration{}
		send := func(ev MemberEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ev := range events {
			name, ok := WorkerName(ev.Entry.Key)
			if !ok {
				continue
			}
			prev, had := known[name]
			if ev.Kind == coord.EventDelete || ev.Entry.Session == "" {
				if ev.Kind == coord.EventPut {
					// A released key: its worker is gone for good (names
					// are never reused), so collect it.
					_ = kv.DeleteCAS(ctx, ev.Entry.Key, ev.Entry.ModifyIndex)
				}
				if had {
					delete(known, name)
					if !send(MemberEvent{Joined: false, Worker: prev}) {
						return
					}
				}
				continue
			}
			reg, err := DecodeRegistration(ev.Entry.Value)
			if err != nil || reg.Name != name {
				continue // not a worker's registration; nothing to dial
			}
			if had && prev == reg {
				continue
			}
			known[name] = reg
			if !send(MemberEvent{Joined: true, Worker: reg}) {
				return
			}
		}
	}()
	return out, nil
}
