package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

func nextMember(t *testing.T, ch <-chan MemberEvent) MemberEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("member watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no member event after 10s")
	}
	return MemberEvent{}
}

func TestWorkerKeyRoundTrip(t *testing.T) {
	for _, name := range []string{"127.0.0.1:7000/ab12", "host:1/x%y", "a b"} {
		got, ok := WorkerName(WorkerKey(name))
		if !ok || got != name {
			t.Fatalf("WorkerName(WorkerKey(%q)) = %q, %v", name, got, ok)
		}
	}
	for _, key := range []string{"servers/x", "workers/", "workers/%zz"} {
		if _, ok := WorkerName(key); ok {
			t.Fatalf("WorkerName(%q) accepted", key)
		}
	}
}

func TestDecodeRegistrationRejects(t *testing.T) {
	for _, v := range []string{`not json`, `{"addr":"h:1"}`, `{"name":"w"}`} {
		if _, err := DecodeRegistration([]byte(v)); err == nil {
			t.Fatalf("DecodeRegistration(%s) accepted", v)
		}
	}
}

// A worker joins when it registers, leaves when its session ends (the
// released key is then collected) or when it unregisters, and a name
// cannot be registered twice.
func TestRegisterAndWatchMembers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	defer svc.Close()

	// A key released by a worker of an earlier run is not a member, and is
	// collected.
	stale := Registration{Name: "old:1/00", Addr: "old:1", Host: "old"}
	if err := svc.Put(ctx, WorkerKey(stale.Name), []byte(`{"name":"old:1/00","addr":"old:1"}`)); err != nil {
		t.Fatal(err)
	}
	events, err := WatchMembers(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	w1 := Registration{Name: "h1:1/aa", Addr: "h1:1", Host: "h1", Slots: 2}
	w2 := Registration{Name: "h2:1/bb", Addr: "h2:1", Host: "h2", Slots: 3}
	r1, err := Register(ctx, svc, w1, RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextMember(t, events); !ev.Joined || ev.Worker != w1 {
		t.Fatalf("first event %+v, want %+v joined", ev, w1)
	}
	if _, err := svc.Get(ctx, WorkerKey(stale.Name)); !errors.Is(err, coord.ErrNotFound) {
		t.Fatalf("stale key: %v, want it collected", err)
	}
	if _, err := Register(ctx, svc, w1, RegisterOptions{}); !errors.Is(err, coord.ErrLocked) {
		t.Fatalf("second registration of %s: %v, want ErrLocked", w1.Name, err)
	}
	r2, err := Register(ctx, svc, w2, RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextMember(t, events); !ev.Joined || ev.Worker != w2 {
		t.Fatalf("event %+v, want %+v joined", ev, w2)
	}

	// w1's session ends (a crash): it leaves, learns it, and its key goes.
	e, err := svc.Get(ctx, WorkerKey(w1.Name))
	if err != nil {
		t.Fatal(err)
	}
	svc.Expire(e.Session)
	if ev := nextMember(t, events); ev.Joined || ev.Worker != w1 {
		t.Fatalf("event %+v, want %+v left", ev, w1)
	}
	select {
	case <-r1.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("w1 not told its registration is lost")
	}
	waitUntil(t, "w1's released key collected", func() bool {
		_, err := svc.Get(ctx, WorkerKey(w1.Name))
		return errors.Is(err, coord.ErrNotFound)
	})

	// w2 unregisters cleanly: it leaves at once and its key is deleted.
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := nextMember(t, events); ev.Joined || ev.Worker != w2 {
		t.Fatalf("event %+v, want %+v left", ev, w2)
	}
	if _, err := svc.Get(ctx, WorkerKey(w2.Name)); !errors.Is(err, coord.ErrNotFound) {
		t.Fatalf("w2's key after Close: %v, want deleted", err)
	}
	select {
	case <-r2.Lost():
		t.Fatal("a clean Close reported as a lost registration")
	default:
	}
}

func TestRegisterRejectsIncomplete(t *testing.T) {
	svc := coord.NewLocal(coord.LocalConfig{})
	defer svc.Close()
	for _, r := range []Registration{{Addr: "h:1"}, {Name: "w"}} {
		if _, err := Register(context.Background(), svc, r, RegisterOptions{}); err == nil {
			t.Fatalf("Register(%+v) accepted", r)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
