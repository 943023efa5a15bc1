package commitlog

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// directSupported reports whether the file system of dir takes O_DIRECT,
// probed on a scratch file.
func directSupported(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return setDirect(f)
}

// withBufferedIO runs the rest of the test with direct I/O off.
func withBufferedIO(t testing.TB) {
	useDirectIO = false
	t.Cleanup(func() { useDirectIO = true })
}

// TestLocalWritesAssembleBlocks drives a segment's writes through sizes
// that end inside a block, exactly on its boundary and across several, in
// both I/O modes: the file always holds exactly the bytes written, then
// (direct) zero padding to the block boundary, and exactly the bytes once
// closed.
func TestLocalWritesAssembleBlocks(t *testing.T) {
	for _, direct := range []bool{true, false} {
		name := map[bool]string{true: "direct", false: "buffered"}[direct]
		t.Run(name, func(t *testing.T) {
			if !direct {
				withBufferedIO(t)
			}
			dir := t.TempDir()
			l, seg, err := openLocal(dir)
			if err != nil {
				t.Fatal(err)
			}
			if want := direct && directSupported(t, dir); l.direct != want {
				t.Fatalf("segment opened with direct = %v, want %v", l.direct, want)
			}
			path := filepath.Join(dir, segmentFileName(seg))
			want := segmentHeaderFrame(seg, segOpened)
			r := rand.New(rand.NewPCG(7, 7))
			sizes := []int{directBlock - len(want), 1, directBlock - 1, directBlock, 3*directBlock + 5, 0, 17, 2*directBlock - 22, 100_000}
			for i, n := range sizes {
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(1 + r.IntN(255)) // never 0: padding must show
				}
				if err := l.write(p); err != nil {
					t.Fatalf("write %d (%d bytes): %v", i, n, err)
				}
				want = append(want, p...)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if l.size != int64(len(want)) {
					t.Fatalf("after write %d: size %d, want %d", i, l.size, len(want))
				}
				if !bytes.Equal(data[:min(len(data), len(want))], want) || len(data) < len(want) {
					t.Fatalf("after write %d: file of %d bytes does not start with the %d written", i, len(data), len(want))
				}
				pad := data[len(want):]
				if l.direct && (len(data)%directBlock != 0 || len(pad) >= directBlock) {
					t.Fatalf("after write %d: direct file of %d bytes for %d written", i, len(data), len(want))
				}
				if !l.direct && len(pad) != 0 {
					t.Fatalf("after write %d: buffered file has %d bytes after the %d written", i, len(pad), len(want))
				}
				if bytes.ContainsFunc(pad, func(c rune) bool { return c != 0 }) {
					t.Fatalf("after write %d: padding is not zero", i)
				}
			}
			if err := l.close(); err != nil {
				t.Fatal(err)
			}
			if data, _ := os.ReadFile(path); !bytes.Equal(data, want) {
				t.Fatalf("closed segment is %d bytes, want exactly the %d written", len(data), len(want))
			}
		})
	}
}

// TestPaddedSegmentReplaysClean: the segment of a log that was never
// closed (as a crash leaves it) ends in padding, which replay reads as the
// end of the log, not as a torn record; so does a rolled-over segment
// whose padding was not cut (a crash before the cut reached the disk).
func TestPaddedSegmentReplaysClean(t *testing.T) {
	dir := t.TempDir()
	if !directSupported(t, dir) {
		t.Fatalf("the file system of %s does not take O_DIRECT: this test needs one that does (ext4, xfs, btrfs)", dir)
	}
	opts := Options{Dir: dir, SegmentBytes: 6000} // records of ~200 bytes: two blocks and more a segment
	l := openLog(t, opts)
	recs := records(31, 150)
	pos := writeAll(t, l, recs)
	if pos[0].Segment == pos[len(pos)-1].Segment {
		t.Fatalf("all %d records in one segment; the test needs a rollover", len(recs))
	}
	last := filepath.Join(dir, segmentFileName(pos[len(pos)-1].Segment))
	if fi, err := os.Stat(last); err != nil || fi.Size()%directBlock != 0 {
		t.Fatalf("open segment: %v, %v; want a size in whole blocks", fi, err)
	}
	// The log is still open: its files are what a crash would leave.
	got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil || res.TornTail || len(res.Torn) != 0 {
		t.Fatalf("replay of a padded segment: %+v, %v; want a clean end", res, err)
	}
	checkReplayed(t, got, recs, pos)

	// A rolled-over segment still padded: pad the first one back.
	first := filepath.Join(dir, segmentFileName(pos[0].Segment))
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%directBlock == 0 {
		t.Fatalf("rolled-over segment of %d bytes: its padding was not cut", len(data))
	}
	padded := append(data, make([]byte, directBlock-len(data)%directBlock)...)
	if err := os.WriteFile(first, padded, 0o644); err != nil {
		t.Fatal(err)
	}
	got, res, err = replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil || res.TornTail {
		t.Fatalf("replay with a padded rolled-over segment: %+v, %v", res, err)
	}
	checkReplayed(t, got, recs, pos)
}

// TestPaddingIsNarrow: only zeros after the last frame, fewer than a block
// and up to a block boundary, are padding; a longer zero run, one that
// does not end on a boundary, or a non-zero byte is a torn tail as before.
func TestPaddingIsNarrow(t *testing.T) {
	withBufferedIO(t) // exact files, padded by hand below
	recs := records(32, 3)
	opts, pos, path := writeLocal(t, recs)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	toBlock := directBlock - len(data)%directBlock
	cases := []struct {
		name string
		tail []byte
		torn bool
	}{
		{"zeros to the block boundary", make([]byte, toBlock), false},
		{"zeros past a whole block", make([]byte, toBlock+directBlock), true},
		{"zeros short of the boundary", make([]byte, toBlock-1), true},
		{"a non-zero byte", append(make([]byte, toBlock-1), 1), true},
	}
	for _, c := range cases {
		if err := os.WriteFile(path, append(bytes.Clone(data), c.tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		end := tabletdesc.LogPosition{Segment: pos[0].Segment, Offset: int64(len(data))}
		if res.TornTail != c.torn || (c.torn && res.TornAt != end) {
			t.Fatalf("%s: %+v, want torn = %v at %v", c.name, res, c.torn, end)
		}
		checkReplayed(t, got, recs, pos)
	}
}

// TestDirectWriteRefusedFallsBack: a file system that takes O_DIRECT but
// refuses a direct write (EINVAL: it wants a larger alignment) does not
// fail the log; the segment goes on with buffered writes from exactly
// where its frames end, even when the refused write left part of its
// bytes behind, and replays whole and clean.
func TestDirectWriteRefusedFallsBack(t *testing.T) {
	dir := t.TempDir()
	if !directSupported(t, dir) {
		t.Fatalf("the file system of %s does not take O_DIRECT: this test needs one that does (ext4, xfs, btrfs)", dir)
	}
	refused, calls := 0, 0
	segmentWriteAt = func(f *os.File, p []byte, off int64) (int, error) {
		calls++
		if calls == 2 { // the first flush after the segment header
			refused++
			// Leave what a write cut short might: the start of
			// its buffer (the tail block's old bytes, then part
			// of the new frames and perhaps padding).
			f.WriteAt(p[:len(p)/2+1], off)
			return 0, syscall.EINVAL
		}
		return f.WriteAt(p, off)
	}
	t.Cleanup(func() { segmentWriteAt = (*os.File).WriteAt })
	opts := Options{Dir: dir}
	l := openLog(t, opts)
	recs := records(33, 30)
	pos := writeAll(t, l, recs)
	if refused != 1 {
		t.Fatalf("%d writes refused, want 1", refused)
	}
	lb := l.backend.(*localLog)
	if lb.direct {
		t.Fatal("the segment still writes with direct I/O after a refused write")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, segmentFileName(pos[0].Segment)))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != lb.size {
		t.Fatalf("segment file of %d bytes, frames end at %d", len(data), lb.size)
	}
	got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil || res.TornTail {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	checkReplayed(t, got, recs, pos)
}
