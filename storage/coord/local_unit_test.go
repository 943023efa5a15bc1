package coord_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

func TestKeys(t *testing.T) {
	if got := coord.ClusterPrefix(""); got != "tabula/default/" {
		t.Fatalf("ClusterPrefix(\"\") = %q", got)
	}
	if got := coord.ClusterPrefix("prod"); got != "tabula/prod/" {
		t.Fatalf("ClusterPrefix(prod) = %q", got)
	}
	// A table name has slashes; its key must stay one segment.
	table := "projects/p/instances/i/tables/t"
	if got := coord.SchemaKey(table); got != "schema/projects%2Fp%2Finstances%2Fi%2Ftables%2Ft" {
		t.Fatalf("SchemaKey = %q", got)
	}
	if got := coord.ACLKey("t"); got != "acl/t" {
		t.Fatalf("ACLKey = %q", got)
	}
	for _, id := range []string{"10.0.0.1:7000", "a/b", "x y"} {
		key := coord.ServerKey(id)
		got, ok := coord.ServerID(key)
		if !ok || got != id {
			t.Fatalf("ServerID(ServerKey(%q)) = %q, %v", id, got, ok)
		}
	}
	for _, key := range []string{"master", "servers/", "schema/x", "servers/%zz"} {
		if id, ok := coord.ServerID(key); ok {
			t.Fatalf("ServerID(%q) = %q, true; want false", key, id)
		}
	}
}

func TestFakeClockRunsTimersInOrder(t *testing.T) {
	c := coord.NewFakeClock()
	start := c.Now()
	var got []time.Duration
	c.AfterFunc(3*time.Second, func() { got = append(got, c.Now().Sub(start)) })
	c.AfterFunc(time.Second, func() {
		got = append(got, c.Now().Sub(start))
		// A timer set by a timer still runs within the same Advance.
		c.AfterFunc(time.Second, func() { got = append(got, c.Now().Sub(start)) })
	})
	stop := c.AfterFunc(2500*time.Millisecond, func() { t.Error("stopped timer ran") })
	if !stop() {
		t.Fatal("stop of a pending timer reported false")
	}
	c.Advance(5 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("timers ran at %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("timers ran at %v, want %v", got, want)
		}
	}
	if d := c.Now().Sub(start); d != 5*time.Second {
		t.Fatalf("clock at %v after Advance(5s)", d)
	}
}

// TestLocalExpire is the hook the master's tests use to kill a server.
func TestLocalExpire(t *testing.T) {
	ctx := context.Background()
	clock := coord.NewFakeClock()
	l := coord.NewLocal(coord.LocalConfig{Clock: clock, LockDelay: 2 * time.Second})
	defer l.Close()
	s, err := l.NewSession(ctx, coord.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.TTL() != 10*time.Second || s.LockDelay() != 2*time.Second {
		t.Fatalf("defaults: TTL %v, lock-delay %v", s.TTL(), s.LockDelay())
	}
	lk, err := s.TryLock(ctx, coord.ServerKey("a"), []byte("a:1"))
	if err != nil {
		t.Fatal(err)
	}
	// A background session never lapses in-process.
	clock.Advance(time.Hour)
	if !s.Valid() {
		t.Fatal("background session lapsed in-process")
	}
	l.Expire(s.ID())
	select {
	case <-lk.Lost():
	default:
		t.Fatal("lock not lost on Expire")
	}
	if !errors.Is(s.Err(), coord.ErrSessionGone) {
		t.Fatalf("Err after Expire = %v, want ErrSessionGone", s.Err())
	}
	m, err := l.NewSession(ctx, coord.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx, coord.ServerKey("a"), nil); !errors.Is(err, coord.ErrLocked) {
		t.Fatalf("TryLock in lock-delay = %v, want ErrLocked", err)
	}
	clock.Advance(2 * time.Second)
	if _, err := m.TryLock(ctx, coord.ServerKey("a"), nil); err != nil {
		t.Fatalf("TryLock after lock-delay: %v", err)
	}
}
