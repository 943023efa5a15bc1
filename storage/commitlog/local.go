package commitlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// localLog writes segments as files of one directory. Only the flusher
// goroutine calls flush and rollover.
type localLog struct {
	dir  string
	f    *os.File
	seg  uint64
	size int64 // bytes written to f
}

func segmentFileName(seg uint64) string { return segmentName(seg) + ".log" }

// parseSegmentFileName returns the number of a segment file name.
func parseSegmentFileName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, ".log")
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

// listSegmentFiles returns the segment numbers in dir, ascending. A missing
// directory holds no segments. Other files are ignored.
func listSegmentFiles(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("commitlog: listing %s: %w", dir, err)
	}
	var segs []uint64
	for _, e := range entries {
		if n, ok := parseSegmentFileName(e.Name()); ok && e.Type().IsRegular() {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// openLocal creates the directory if needed and starts a new segment after
// every existing one: an old segment may end in a torn record, and appending
// after it would bury the tear in the middle of the log.
func openLocal(dir string) (*localLog, uint64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("commitlog: %w", err)
	}
	segs, err := listSegmentFiles(dir)
	if err != nil {
		return nil, 0, err
	}
	seg := uint64(1)
	if len(segs) > 0 {
		seg = segs[len(segs)-1] + 1
	}
	l := &localLog{dir: dir}
	if err := l.create(seg, segOpened); err != nil {
		return nil, 0, err
	}
	return l, seg, nil
}

func (l *localLog) firstOffset(seg uint64) int64 { return segmentHeaderLen(seg) }

// create starts segment seg: a new file (never an existing one) holding the
// segment header, synced together with the directory entry so that the
// segment survives a crash once a record in it is acknowledged.
func (l *localLog) create(seg uint64, flags byte) error {
	path := filepath.Join(l.dir, segmentFileName(seg))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("commitlog: creating segment: %w", err)
	}
	hdr := segmentHeaderFrame(seg, flags)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return fmt.Errorf("commitlog: writing segment header %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("commitlog: syncing %s: %w", path, err)
	}
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.f, l.seg, l.size = f, seg, int64(len(hdr))
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("commitlog: syncing directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("commitlog: syncing directory %s: %w", dir, err)
	}
	return nil
}

// rollover closes the current segment, complete since every flush to it was
// synced, and starts seg.
func (l *localLog) rollover(seg uint64) error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("commitlog: closing segment %d: %w", l.seg, err)
	}
	l.f = nil
	return l.create(seg, 0)
}

func (l *localLog) flush(b *batch) error {
	if b.seg != l.seg || b.off != l.size {
		// Positions were handed out assuming the file grows exactly
		// by the frames flushed; anything else would make them lie.
		return fmt.Errorf("commitlog: internal error: batch at %d:%d, segment file at %d:%d", b.seg, b.off, l.seg, l.size)
	}
	if _, err := l.f.Write(b.buf); err != nil {
		return fmt.Errorf("commitlog: writing segment %d: %w", l.seg, err)
	}
	l.size += int64(len(b.buf))
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("commitlog: syncing segment %d: %w", l.seg, err)
	}
	return nil
}

func (l *localLog) truncate(ctx context.Context, before uint64) error {
	segs, err := listSegmentFiles(l.dir)
	if err != nil {
		return err
	}
	removed := false
	for _, seg := range segs {
		if seg >= before {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := os.Remove(filepath.Join(l.dir, segmentFileName(seg)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("commitlog: truncating: %w", err)
		}
		removed = true
	}
	if removed {
		// Not needed for safety (a resurrected old segment is only
		// replayed data that tablets already hold) but keeps the
		// directory from growing back after a crash.
		return syncDir(l.dir)
	}
	return nil
}

func (l *localLog) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("commitlog: closing segment %d: %w", l.seg, err)
	}
	return nil
}
