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
	"syscall"
	"unsafe"
)

// localLog writes segments as files of one directory. Only the flusher
// goroutine calls flush and rollover.
//
// Segments are written with direct I/O where the file system allows it:
// a flush then costs the disk write alone, not also a copy into the page
// cache and the kernel's writeback of it, which on a two-core machine was
// most of what a durable write cost beyond the emulator's in-memory one
// (BENCHMARKS.md, "The commit log written with direct I/O"). Direct I/O
// writes whole blocks at block-aligned offsets, so every flush rewrites the
// segment's last, partial block with the new frames after its old bytes
// and zero padding up to the block's end; the padding is overwritten by
// the next flush, cut off when the segment is closed, and read by replay
// as the segment's end (see isPadding).
type localLog struct {
	dir    string
	f      *os.File
	seg    uint64
	size   int64 // bytes of frames written to f; with direct, the file may hold padding after them
	direct bool  // f has O_DIRECT
	// stage is the aligned buffer a direct write is assembled in; its
	// first size%directBlock bytes are those of the segment's last,
	// partial block, which the next write rewrites.
	stage []byte
}

// directBlock is the alignment of a direct write's file offset, length
// and memory: the largest logical block size of common disks.
const directBlock = 4096

// useDirectIO turns direct I/O off for tests of the buffered path.
var useDirectIO = true

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
	l.f, l.seg, l.size = f, seg, 0
	l.direct = useDirectIO && setDirect(f)
	fail := func(err error) error {
		f.Close()
		l.f = nil
		return err
	}
	if err := l.write(segmentHeaderFrame(seg, flags)); err != nil {
		return fail(fmt.Errorf("commitlog: writing segment header %s: %w", path, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("commitlog: syncing %s: %w", path, err))
	}
	if err := syncDir(l.dir); err != nil {
		return fail(err)
	}
	return nil
}

// write appends p to the segment at size, not yet synced.
func (l *localLog) write(p []byte) error {
	if !l.direct {
		if _, err := segmentWriteAt(l.f, p, l.size); err != nil {
			return err
		}
		l.size += int64(len(p))
		return nil
	}
	tail := int(l.size % directBlock)
	n := tail + len(p)
	padded := (n + directBlock - 1) &^ (directBlock - 1)
	if cap(l.stage) < padded {
		grown := alignedBuffer(max(padded, 2*cap(l.stage)))
		copy(grown, l.stage[:tail])
		l.stage = grown
	}
	buf := l.stage[:padded]
	copy(buf[tail:], p)
	clear(buf[n:])
	if _, err := segmentWriteAt(l.f, buf, l.size-int64(tail)); err != nil {
		if !errors.Is(err, syscall.EINVAL) {
			return err
		}
		// The file system took O_DIRECT but refuses the write
		// (it needs an alignment beyond directBlock): go on with
		// buffered writes rather than fail the log. The padding
		// and whatever the refused write left are cut first, so
		// that the file ends exactly at size again.
		if !unsetDirect(l.f) {
			return err
		}
		l.direct = false
		if terr := l.f.Truncate(l.size); terr != nil {
			return terr
		}
		return l.write(p)
	}
	l.size += int64(len(p))
	// The last block is partial unless n is a multiple of the block:
	// keep its bytes at the front for the next write.
	if keep := n % directBlock; keep > 0 {
		copy(l.stage[:keep], buf[n-keep:n])
	}
	return nil
}

// segmentWriteAt writes a segment's bytes; a variable so that tests can
// make the file system refuse a direct write.
var segmentWriteAt = (*os.File).WriteAt

// alignedBuffer returns n bytes (n a multiple of directBlock) starting at
// a directBlock-aligned address.
func alignedBuffer(n int) []byte {
	raw := make([]byte, n+directBlock)
	skip := (directBlock - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%directBlock)) % directBlock
	return raw[skip : skip+n : skip+n]
}

// closeSegment cuts a direct segment's padding off and closes it.
// Unsynced: if the cut is lost in a crash, replay reads the padding as
// the segment's end all the same.
func (l *localLog) closeSegment() error {
	var err error
	if l.direct {
		err = l.f.Truncate(l.size)
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
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
	if err := l.closeSegment(); err != nil {
		return fmt.Errorf("commitlog: closing segment %d: %w", l.seg, err)
	}
	return l.create(seg, 0)
}

func (l *localLog) flush(b *batch) error {
	if b.seg != l.seg || b.off != l.size {
		// Positions were handed out assuming the file grows exactly
		// by the frames flushed; anything else would make them lie.
		return fmt.Errorf("commitlog: internal error: batch at %d:%d, segment file at %d:%d", b.seg, b.off, l.seg, l.size)
	}
	if err := l.write(b.buf); err != nil {
		return fmt.Errorf("commitlog: writing segment %d: %w", l.seg, err)
	}
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
	if err := l.closeSegment(); err != nil {
		return fmt.Errorf("commitlog: closing segment %d: %w", l.seg, err)
	}
	return nil
}
