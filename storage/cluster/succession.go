package cluster

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// A successionLock is how a tablet server restarted on its address proves
// that the process it replaces has exited, so that the master recovers that
// one's tablets at once instead of waiting out its lease (FenceWait, 4.4 s
// by default) — as HBase's master expires a region server as soon as a new
// one reports from the same host and port.
//
// Each server takes an exclusive flock(2) on a file named after its
// advertised address in a directory of its host (ServerConfig.LockDir)
// and writes its name into it. The kernel releases the lock only when the
// process exits, or when the server closes the file, which it does last
// in its shutdown, after it stopped serving and closed its commit log. So
// a new process that takes the lock and finds a name in the file knows
// that server no longer serves and never will, and says so in its key
// (coord.ServerRecord.Succeeds). A process still alive — paused, cut off,
// shutting down — still holds the lock: the newcomer does not get it and
// claims nothing, and the master waits the lease as before. A file on
// another host, a fresh directory (a private /tmp) or a new address gives
// no name, and no claim.
type successionLock struct {
	f *os.File
}

// errLockHeld: another process holds the lock (lockFile).
var errLockHeld = errors.New("cluster: the lock is held by another process")

// takeSuccessionLock takes the lock of addr in dir for the server name and
// returns the name of the server that held it before (empty if none, or
// if it was written by no server). With errLockHeld, the lock is held by a
// live process, and nothing was changed.
func takeSuccessionLock(dir, addr, name string) (_ *successionLock, predecessor string, err error) {
	path := filepath.Join(dir, "tabula-tabletserver-"+url.PathEscape(addr)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("cluster: succession lock: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := lockFile(f); err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, "", fmt.Errorf("cluster: succession lock %s: %w", path, err)
	}
	predecessor, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "tabletserver ")
	if !ok {
		predecessor = "" // empty, or not a server's record
	}
	if err := f.Truncate(0); err != nil {
		return nil, "", fmt.Errorf("cluster: succession lock %s: %w", path, err)
	}
	if _, err := f.WriteAt([]byte("tabletserver "+name+"\n"), 0); err != nil {
		return nil, "", fmt.Errorf("cluster: succession lock %s: %w", path, err)
	}
	return &successionLock{f: f}, predecessor, nil
}

// release gives the lock up. Only a server that no longer serves — its
// gRPC server stopped, its tablets and commit log closed — may call it.
func (l *successionLock) release() {
	if l != nil {
		l.f.Close()
	}
}
