package coord_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/coord/coordtest"
)

// TestLocalFileConformance runs the lock service suite against the
// file-backed Local: keeping the keys in a file changes none of the
// semantics.
func TestLocalFileConformance(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coord.Service {
		clock := coord.NewFakeClock()
		l, err := coord.OpenLocal(coord.LocalConfig{Clock: clock, Path: filepath.Join(t.TempDir(), "coord.json")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return fakeLocal{l, clock}
	})
}

// TestLocalFileSurvivesRestart: keys, values and modify indexes come back
// after the service is closed (or its process dies: the file is written
// before each change is acknowledged) and opened again; a lock held then
// comes back released and in lock-delay; sessions are new.
func TestLocalFileSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coord.json")
	clock := coord.NewFakeClock()
	cfg := coord.LocalConfig{Clock: clock, Path: path, LockDelay: 5 * time.Second}
	l, err := coord.OpenLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "root", []byte("server-a")); err != nil {
		t.Fatal(err)
	}
	if err := l.CAS(ctx, "epoch", []byte{0, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	sess, err := l.NewSession(ctx, coord.SessionOptions{Name: "master"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryLock(ctx, "master", []byte("addr-1")); err != nil {
		t.Fatal(err)
	}
	before, err := l.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	epoch, _ := l.Get(ctx, "epoch")
	// No Close: the process dies with the lock held.

	l2, err := coord.OpenLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	after, err := l2.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || len(after) != 3 {
		t.Fatalf("keys after restart %v, before %v", after, before)
	}
	for i, e := range after {
		b := before[i]
		if e.Key != b.Key || string(e.Value) != string(b.Value) || e.CreateIndex != b.CreateIndex {
			t.Errorf("key %q after restart: %+v, before %+v", b.Key, e, b)
		}
		switch e.Key {
		case "master":
			if e.Session != "" || e.ModifyIndex <= b.ModifyIndex {
				t.Errorf("master after restart: %+v, want released with a newer index than %d", e, b.ModifyIndex)
			}
		default:
			if e.ModifyIndex != b.ModifyIndex {
				t.Errorf("key %q: modify index %d after restart, %d before", e.Key, e.ModifyIndex, b.ModifyIndex)
			}
		}
	}
	if _, err := l2.Get(ctx, "gone"); !errors.Is(err, coord.ErrNotFound) {
		t.Errorf("deleted key after restart: %v", err)
	}
	// A CAS with the index read before the restart still holds; one
	// with an index from before the last change does not.
	if err := l2.CAS(ctx, "epoch", []byte{0, 2}, epoch.ModifyIndex-1); !errors.Is(err, coord.ErrConflict) {
		t.Errorf("CAS with a stale index: %v, want ErrConflict", err)
	}
	if err := l2.CAS(ctx, "epoch", []byte{0, 2}, epoch.ModifyIndex); err != nil {
		t.Errorf("CAS with the index read before the restart: %v", err)
	}
	// The released lock is in lock-delay, then free; the new session's
	// ID is not the old one's.
	s2, err := l2.NewSession(ctx, coord.SessionOptions{Name: "master"})
	if err != nil {
		t.Fatal(err)
	}
	if s2.ID() == sess.ID() {
		t.Errorf("session ID %q reused after restart", s2.ID())
	}
	if _, err := s2.TryLock(ctx, "master", []byte("addr-2")); !errors.Is(err, coord.ErrLocked) {
		t.Errorf("TryLock during the lock-delay: %v, want ErrLocked", err)
	}
	clock.Advance(6 * time.Second)
	if _, err := s2.TryLock(ctx, "master", []byte("addr-2")); err != nil {
		t.Errorf("TryLock after the lock-delay: %v", err)
	}
	if e, _ := l2.Get(ctx, "master"); e.Session != s2.ID() || string(e.Value) != "addr-2" {
		t.Errorf("master = %+v, want held by %s", e, s2.ID())
	}
}

// TestLocalFileWriteFailureCloses: a change that cannot be written is
// refused with the error and the service closes, ending its sessions.
func TestLocalFileWriteFailureCloses(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := coord.OpenLocal(coord.LocalConfig{Path: filepath.Join(dir, "coord.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sess, err := l.NewSession(ctx, coord.SessionOptions{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // nowhere to write any more
		t.Fatal(err)
	}
	if err := l.Put(ctx, "b", []byte("2")); err == nil || errors.Is(err, coord.ErrClosed) {
		t.Fatalf("Put with the file's directory gone: %v, want the write's error", err)
	}
	select {
	case <-sess.Done(): // ended with the failed write, not later
	default:
		t.Fatal("the session outlived the failed write")
	}
	if err := l.Put(ctx, "c", []byte("3")); !errors.Is(err, coord.ErrClosed) {
		t.Errorf("Put after the failure: %v, want ErrClosed", err)
	}
}

// TestOpenLocalRefusesBadFile: a file that is not a snapshot fails the
// open rather than starting empty.
func TestOpenLocalRefusesBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coord.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.OpenLocal(coord.LocalConfig{Path: path}); err == nil {
		t.Fatal("OpenLocal accepted a corrupt file")
	}
	if _, err := coord.OpenLocal(coord.LocalConfig{}); err == nil {
		t.Fatal("OpenLocal accepted no path")
	}
}
