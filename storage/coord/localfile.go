package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// localSnapshot is what a Local with a Path keeps in its file: every key,
// and the counters that must keep growing across restarts (the modify
// index that CAS compares, the session numbers).
type localSnapshot struct {
	Index       uint64  `json:"index"`
	NextSession int     `json:"next_session"`
	Entries     []Entry `json:"entries"`
}

// OpenLocal returns an in-process service whose keys survive the process:
// they are kept in cfg.Path (required), rewritten whole — to a temporary
// file, synced, renamed over the old one — after every change and before
// the change is acknowledged, and loaded from it when it exists. That is
// the lock service of a `tabula dev` whose roles run in one process and
// restart together.
//
// Sessions do not survive: a key whose lock was held when the file was
// last written is loaded released, with a fresh ModifyIndex, and in
// lock-delay (cfg.LockDelay) as if its session had expired at the load —
// what Consul does when the holder's session ends. Modify indexes keep
// growing across restarts, so a CAS with an index read before the restart
// succeeds only if the key did not change since.
//
// A change that cannot be written fails with the write's error and closes
// the service (every session ends, later calls get ErrClosed): its holders
// must not go on from a state the file does not have. A file that cannot
// be read or parsed fails OpenLocal.
func OpenLocal(cfg LocalConfig) (*Local, error) {
	if cfg.Path == "" {
		return nil, errors.New("coord: OpenLocal: LocalConfig.Path is required")
	}
	l := NewLocal(cfg)
	l.path = cfg.Path
	b, err := os.ReadFile(cfg.Path)
	if errors.Is(err, fs.ErrNotExist) {
		l.dirty = true
		if err := l.commitLocked(); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coord: reading %s: %w", cfg.Path, err)
	}
	var snap localSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("coord: %s is not a lock service snapshot: %w", cfg.Path, err)
	}
	l.index, l.nextID = snap.Index, snap.NextSession
	now := l.clock.Now()
	for i := range snap.Entries {
		e := snap.Entries[i]
		if e.Key == "" || e.ModifyIndex > snap.Index || e.CreateIndex > e.ModifyIndex {
			return nil, fmt.Errorf("coord: %s: entry %q has indexes %d/%d beyond the snapshot's %d", cfg.Path, e.Key, e.CreateIndex, e.ModifyIndex, snap.Index)
		}
		if n, ok := localSessionNumber(e.Session); ok && n > l.nextID {
			l.nextID = n
		}
		l.kv[e.Key] = &e
	}
	// Release the locks of the sessions that ended with the process, in
	// key order (deterministic indexes).
	keys := make([]string, 0, len(l.kv))
	for k, e := range l.kv {
		if e.Session != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		l.releaseLocked(k, max(l.delay, 0), now)
		l.dirty = true
	}
	if err := l.commitLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

// localSessionNumber parses the number of a Local session ID ("local-7").
func localSessionNumber(id string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "local-"))
	return n, err == nil && strings.HasPrefix(id, "local-")
}

// commitLocked writes the keys to the file if they changed since the last
// write. On failure it closes the service and returns the error.
func (l *Local) commitLocked() error {
	if l.path == "" || !l.dirty {
		return nil
	}
	if l.closed {
		return ErrClosed
	}
	snap := localSnapshot{Index: l.index, NextSession: l.nextID, Entries: make([]Entry, 0, len(l.kv))}
	for _, e := range l.kv {
		snap.Entries = append(snap.Entries, *e)
	}
	sort.Slice(snap.Entries, func(i, j int) bool { return snap.Entries[i].Key < snap.Entries[j].Key })
	if err := writeFileAtomic(l.path, snap); err != nil {
		l.closeLocked()
		return fmt.Errorf("coord: writing %s (the service is closed): %w", l.path, err)
	}
	l.dirty = false
	return nil
}

// writeFileAtomic replaces path with v as JSON: a crash leaves the old
// file or the new one, whole.
func writeFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
