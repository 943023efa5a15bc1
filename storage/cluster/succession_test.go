//go:build unix

package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A server restarted on its address learns its predecessor's name only
// once the predecessor has let the lock go; while it holds it, nothing is
// claimed and nothing changes.
func TestSuccessionLock(t *testing.T) {
	dir := t.TempDir()
	const addr = "127.0.0.1:8086"
	first, prev, err := takeSuccessionLock(dir, addr, addr+"/first")
	if err != nil || prev != "" {
		t.Fatalf("first server: predecessor %q, %v; want none", prev, err)
	}
	if _, prev, err := takeSuccessionLock(dir, addr, addr+"/second"); !errors.Is(err, errLockHeld) || prev != "" {
		t.Fatalf("second server while the first runs: predecessor %q, %v; want errLockHeld", prev, err)
	}
	// Another address on the host has a lock of its own.
	other, prev, err := takeSuccessionLock(dir, "127.0.0.1:8087", "127.0.0.1:8087/x")
	if err != nil || prev != "" {
		t.Fatalf("another address: predecessor %q, %v", prev, err)
	}
	other.release()
	first.release() // the first server stopped serving (or exited)
	second, prev, err := takeSuccessionLock(dir, addr, addr+"/second")
	if err != nil || prev != addr+"/first" {
		t.Fatalf("second server after the first exited: predecessor %q, %v; want %s/first", prev, err, addr)
	}
	second.release()
	third, prev, err := takeSuccessionLock(dir, addr, addr+"/third")
	if err != nil || prev != addr+"/second" {
		t.Fatalf("third server: predecessor %q, %v; want the second, not the first", prev, err)
	}
	third.release()

	// A file no server wrote names no predecessor.
	path := filepath.Join(dir, "tabula-tabletserver-127.0.0.1:9000.lock")
	if err := os.WriteFile(path, []byte("something else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, prev, err := takeSuccessionLock(dir, "127.0.0.1:9000", "127.0.0.1:9000/y")
	if err != nil || prev != "" {
		t.Fatalf("a foreign file: predecessor %q, %v; want none", prev, err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "tabletserver 127.0.0.1:9000/y\n" {
		t.Fatalf("the lock file holds %q (%v), want the new holder's name alone", b, err)
	}
	l.release()
	// A directory that cannot hold the file is an error, not a silent
	// start without the lock.
	if _, _, err := takeSuccessionLock(filepath.Join(dir, "missing"), addr, addr+"/z"); err == nil {
		t.Fatal("a missing lock directory: no error")
	}
}
