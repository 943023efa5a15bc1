package commitlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestOptionsNeedExactlyOneTarget(t *testing.T) {
	for _, opts := range []Options{{}, {Dir: t.TempDir(), Store: blob.NewMemory()}} {
		if _, err := Open(context.Background(), opts); err == nil {
			t.Errorf("Open(%+v) succeeded", opts)
		}
		if _, err := Replay(context.Background(), opts, tabletdesc.LogPosition{}, nil); err == nil {
			t.Errorf("Replay(%+v) succeeded", opts)
		}
	}
}

func TestRoundTrip(t *testing.T) { forModes(t, testRoundTrip) }

// testRoundTrip: what is written is replayed, in order, at the positions
// Append gave, across a close and reopen.
func testRoundTrip(t *testing.T, m logMode) {
	opts := m.options(t)
	recs := records(1, 60)
	l := openLog(t, opts)
	pos := writeAll(t, l, recs[:30])
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, opts)
	if l.Tail().Segment <= pos[29].Segment {
		t.Fatalf("reopened log's tail %v is not in a segment after %v", l.Tail(), pos[29])
	}
	pos = append(pos, writeAll(t, l, recs[30:])...)
	for i := 1; i < len(pos); i++ {
		if pos[i].Compare(pos[i-1]) <= 0 {
			t.Fatalf("position %d = %v, not after %v", i, pos[i], pos[i-1])
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	if res.TornTail {
		t.Fatalf("clean log reported a torn tail at %v", res.TornAt)
	}
	checkReplayed(t, got, recs, pos)
}

func TestReplayFromMiddle(t *testing.T) { forModes(t, testReplayFromMiddle) }

// testReplayFromMiddle replays from every position of a log spread over
// several segments and several flushes per segment.
func testReplayFromMiddle(t *testing.T, m logMode) {
	opts := m.options(t)
	opts.SegmentBytes = 2000
	recs := records(2, 40)
	l := openLog(t, opts)
	pos := writeAll(t, l, recs)
	tail := l.Tail()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if pos[0].Segment == pos[len(pos)-1].Segment {
		t.Fatalf("log did not roll over: all records in segment %d", pos[0].Segment)
	}
	for i := range recs {
		got, _, err := replayAll(t, opts, pos[i])
		if err != nil {
			t.Fatalf("from %v: %v", pos[i], err)
		}
		checkReplayed(t, got, recs[i:], pos[i:])
	}
	got, _, err := replayAll(t, opts, tail)
	if err != nil || len(got) != 0 {
		t.Fatalf("replay from the tail: %d records, %v", len(got), err)
	}
}

func TestSegmentRollover(t *testing.T) { forModes(t, testSegmentRollover) }

func testSegmentRollover(t *testing.T, m logMode) {
	opts := m.options(t)
	opts.SegmentBytes = 1000
	recs := records(3, 50)
	l := openLog(t, opts)
	pos := writeAll(t, l, recs)
	segs := map[uint64]int64{} // segment → offset of its last record
	for i, p := range pos {
		if i > 0 && p.Segment != pos[i-1].Segment {
			if p.Segment != pos[i-1].Segment+1 {
				t.Fatalf("segment jumped from %d to %d", pos[i-1].Segment, p.Segment)
			}
			// A segment closes only once its records carry it
			// past SegmentBytes.
			end := pos[i-1].Offset + int64(len(appendRecordFrame(nil, &recs[i-1])))
			if end < opts.SegmentBytes {
				t.Fatalf("segment %d rolled over at %d bytes, before SegmentBytes", pos[i-1].Segment, end)
			}
		}
		segs[p.Segment] = p.Offset
	}
	if len(segs) < 5 {
		t.Fatalf("%d records of ~200 bytes in segments of 1000 bytes used only %d segments", len(recs), len(segs))
	}
	for seg, lastOff := range segs {
		if lastOff >= opts.SegmentBytes {
			t.Fatalf("segment %d has a record starting at %d, past SegmentBytes", seg, lastOff)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, got, recs, pos)
	if opts.Dir != "" {
		files, _ := filepath.Glob(filepath.Join(opts.Dir, "*.log"))
		if len(files) != len(segs) {
			t.Fatalf("%d segment files for %d segments: %v", len(files), len(segs), files)
		}
	}
}

func TestTruncate(t *testing.T) { forModes(t, testTruncate) }

func testTruncate(t *testing.T, m logMode) {
	ctx := context.Background()
	opts := m.options(t)
	opts.SegmentBytes = 1000
	recs := records(4, 40)
	l := openLog(t, opts)
	pos := writeAll(t, l, recs)
	// Truncate at a record in the middle of a middle segment: the
	// segments before it go, its own segment stays whole.
	k := 0
	for pos[k].Segment < pos[0].Segment+3 {
		k++
	}
	k++ // second record of that segment
	if err := l.Truncate(ctx, pos[k]); err != nil {
		t.Fatal(err)
	}
	got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	first := k - 1 // the first record of pos[k]'s segment
	checkReplayed(t, got, recs[first:], pos[first:])

	// Truncating far beyond the tail keeps the segment being written:
	// the log goes on working and the records in it stay.
	tail := l.Tail()
	if err := l.Truncate(ctx, tabletdesc.LogPosition{Segment: tail.Segment + 10}); err != nil {
		t.Fatal(err)
	}
	more := records(5, 3)
	morePos := writeAll(t, l, more)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _, err = replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	var wantRecs []Record
	var wantPos []tabletdesc.LogPosition
	for i, p := range pos {
		if p.Segment >= tail.Segment {
			wantRecs, wantPos = append(wantRecs, recs[i]), append(wantPos, p)
		}
	}
	wantRecs, wantPos = append(wantRecs, more...), append(wantPos, morePos...)
	checkReplayed(t, got, wantRecs, wantPos)
}

// TestTruncateObjectsLastToFirst checks that a truncated segment's objects
// are deleted from the last, so an interrupted Truncate leaves a prefix.
func TestTruncateObjectsLastToFirst(t *testing.T) {
	ctx := context.Background()
	rec := &recordingStore{Store: blob.NewMemory()}
	opts := Options{Store: rec, Prefix: "p", SegmentBytes: 1 << 20}
	l := openLog(t, opts)
	writeAll(t, l, records(6, 5)) // five flushes, one segment
	l.Close()
	l = openLog(t, opts)
	if err := l.Truncate(ctx, l.Tail()); err != nil {
		t.Fatal(err)
	}
	if len(rec.deleted) != 5 {
		t.Fatalf("deleted %v, want the 5 objects of the old segment", rec.deleted)
	}
	for i := 1; i < len(rec.deleted); i++ {
		if rec.deleted[i] >= rec.deleted[i-1] {
			t.Fatalf("objects deleted in order %v, want last to first", rec.deleted)
		}
	}
}

type recordingStore struct {
	blob.Store
	deleted []string
}

func (s *recordingStore) Delete(ctx context.Context, name string) error {
	s.deleted = append(s.deleted, name)
	return s.Store.Delete(ctx, name)
}

func TestGroupCommit(t *testing.T) { forModes(t, testGroupCommit) }

// testGroupCommit holds the first flush until every writer has appended:
// all their records must then go out in few flushes, each writer's in its
// own append order, and every Wait must succeed.
func testGroupCommit(t *testing.T, m logMode) {
	const writers, perWriter = 16, 8
	opts := m.options(t)
	l := openLog(t, opts)
	var appended sync.WaitGroup
	appended.Add(writers)
	release := make(chan struct{})
	var once sync.Once
	l.beforeFlush = func() { once.Do(func() { <-release }) }

	var done sync.WaitGroup
	posOf := make([][]tabletdesc.LogPosition, writers)
	recOf := make([][]Record, writers)
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		done.Add(1)
		recOf[w] = records(uint64(100+w), perWriter)
		go func() {
			defer done.Done()
			commits := make([]*Commit, perWriter)
			for i, rec := range recOf[w] {
				commits[i] = l.Append(rec)
			}
			appended.Done()
			for i, c := range commits {
				if err := c.Wait(context.Background()); err != nil {
					errs <- err
				}
				posOf[w] = append(posOf[w], c.Pos)
				if i > 0 && c.Pos.Compare(commits[i-1].Pos) <= 0 {
					errs <- fmt.Errorf("writer %d: record %d at %v, not after %v", w, i, c.Pos, commits[i-1].Pos)
				}
			}
		}()
	}
	appended.Wait()
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	const total = writers * perWriter
	if st.Appends != total || st.FlushedRecords != total {
		t.Fatalf("stats %+v, want %d appended and flushed", st, total)
	}
	// The first flush took what was queued when the flusher woke (at
	// least one record); everything else was appended while it was held
	// and fits one batch.
	if st.Flushes > 2 {
		t.Fatalf("%d records took %d flushes, want at most 2", total, st.Flushes)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	byPos := map[tabletdesc.LogPosition]replayed{}
	for _, g := range got {
		byPos[g.pos] = g
	}
	for w := range writers {
		for i := range perWriter {
			g, ok := byPos[posOf[w][i]]
			if !ok {
				t.Fatalf("writer %d record %d not replayed at %v", w, i, posOf[w][i])
			}
			checkReplayed(t, []replayed{g}, recOf[w][i:i+1], posOf[w][i:i+1])
		}
	}
	if len(got) != total {
		t.Fatalf("replayed %d records, want %d", len(got), total)
	}
}

// TestGroupCommitConcurrentWriters runs real concurrent writers against a
// local directory with nothing held: they must share fsyncs.
func TestGroupCommitConcurrentWriters(t *testing.T) {
	const writers, perWriter = 32, 20
	opts := Options{Dir: t.TempDir()}
	l := openLog(t, opts)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, rec := range records(uint64(w), perWriter) {
				if _, err := l.Write(context.Background(), rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := l.Stats()
	t.Logf("%d records in %d flushes: %.1f records per flush", st.FlushedRecords, st.Flushes, float64(st.FlushedRecords)/float64(st.Flushes))
	if st.FlushedRecords != writers*perWriter {
		t.Fatalf("flushed %d records, want %d", st.FlushedRecords, writers*perWriter)
	}
	// Each writer waits for its record before appending the next, so a
	// flush per record would mean writers never overlap: with 32 of them
	// and a sync per flush, some always queue behind a running flush.
	if st.Flushes >= st.FlushedRecords {
		t.Fatalf("%d records took %d flushes: no grouping", st.FlushedRecords, st.Flushes)
	}
}

func TestMaxBatchBytes(t *testing.T) {
	opts := Options{Store: blob.NewMemory(), MaxBatchBytes: 1000}
	l := openLog(t, opts)
	release := make(chan struct{})
	var once sync.Once
	l.beforeFlush = func() { once.Do(func() { <-release }) }
	recs := records(7, 40)
	var commits []*Commit
	for _, rec := range recs {
		commits = append(commits, l.Append(rec))
	}
	close(release)
	for _, c := range commits {
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := opts.Store.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 5 {
		t.Fatalf("40 records of ~200 bytes in batches of ≤1000 bytes made %d objects", len(objs))
	}
	for _, o := range objs {
		if o.Size > 1000 {
			t.Fatalf("object %s of %d bytes exceeds MaxBatchBytes", o.Name, o.Size)
		}
	}
}

func TestOrderingSequentialAppends(t *testing.T) {
	forModes(t, func(t *testing.T, m logMode) {
		l := openLog(t, m.options(t))
		var commits []*Commit
		for _, rec := range records(8, 100) {
			commits = append(commits, l.Append(rec))
		}
		// Waiting on the last commit alone means the earlier ones are
		// durable too: they are flushed no later.
		if err := commits[len(commits)-1].Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, c := range commits {
			select {
			case <-c.b.done:
			default:
				t.Fatalf("record %d not flushed although a later one is", i)
			}
			if i > 0 && c.Pos.Compare(commits[i-1].Pos) <= 0 {
				t.Fatalf("position %d = %v, not after %v", i, c.Pos, commits[i-1].Pos)
			}
		}
		if got := l.Tail(); got.Compare(commits[len(commits)-1].Pos) <= 0 {
			t.Fatalf("Tail %v is not after the last record %v", got, commits[len(commits)-1].Pos)
		}
	})
}

func TestCloseFlushesPendingAndRefusesAppends(t *testing.T) {
	forModes(t, func(t *testing.T, m logMode) {
		opts := m.options(t)
		l := openLog(t, opts)
		recs := records(9, 30)
		var commits []*Commit
		for _, rec := range recs {
			commits = append(commits, l.Append(rec))
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		pos := make([]tabletdesc.LogPosition, len(commits))
		for i, c := range commits {
			if err := c.Wait(context.Background()); err != nil {
				t.Fatalf("record %d appended before Close: %v", i, err)
			}
			pos[i] = c.Pos
		}
		if err := l.Append(recs[0]).Wait(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Close: %v, want ErrClosed", err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil {
			t.Fatal(err)
		}
		checkReplayed(t, got, recs, pos)
	})
}

func TestWaitHonoursContext(t *testing.T) {
	l := openLog(t, Options{Store: blob.NewMemory()})
	release := make(chan struct{})
	l.beforeFlush = func() { <-release }
	defer close(release)
	c := l.Append(records(10, 1)[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an expired context: %v", err)
	}
}

// TestFailedPut: a failed PUT fails its batch and every later append, and
// leaves no object after the hole.
func TestFailedPut(t *testing.T) {
	ctx := context.Background()
	store := &faultyStore{Store: blob.NewMemory(), fail: func(n int) bool { return n == 4 }}
	opts := Options{Store: store, Prefix: "logs"}
	l := openLog(t, opts)
	recs := records(11, 10)
	pos := writeAll(t, l, recs[:3])

	// Hold the failing flush so that more records queue behind it.
	release := make(chan struct{})
	var once sync.Once
	l.beforeFlush = func() { once.Do(func() { <-release }) }
	var commits []*Commit
	for _, rec := range recs[3:6] {
		commits = append(commits, l.Append(rec))
	}
	close(release)
	for i, c := range commits {
		if err := c.Wait(ctx); !errors.Is(err, errInjected) {
			t.Fatalf("record %d of the failed batch: Wait = %v, want the PUT error", i, err)
		}
	}
	for i := range 3 {
		err := l.Append(recs[6+i]).Wait(ctx)
		if !errors.Is(err, ErrFailed) || !errors.Is(err, errInjected) {
			t.Fatalf("append after the failure: Wait = %v, want ErrFailed wrapping the PUT error", err)
		}
	}
	if err := l.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close = %v, want the flush error", err)
	}
	got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, got, recs[:3], pos)
	if store.puts != 4 {
		t.Fatalf("%d PUTs, want 4: nothing may be written after a failed flush", store.puts)
	}
}

// TestFailedPutQueuedBatches: batches queued behind a failing one fail too,
// even though they were appended before the failure was known.
func TestFailedPutQueuedBatches(t *testing.T) {
	store := &faultyStore{Store: blob.NewMemory(), fail: func(n int) bool { return n == 1 }}
	l := openLog(t, Options{Store: store, MaxBatchBytes: 300})
	release := make(chan struct{})
	var once sync.Once
	l.beforeFlush = func() { once.Do(func() { <-release }) }
	var commits []*Commit
	for _, rec := range records(12, 10) {
		commits = append(commits, l.Append(rec))
	}
	close(release)
	for i, c := range commits {
		if err := c.Wait(context.Background()); err == nil {
			t.Fatalf("record %d acknowledged after a failed flush before it", i)
		}
	}
	if store.puts != 1 {
		t.Fatalf("%d PUTs after the first failed", store.puts-1)
	}
}

func TestLocalSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	// A file that is not a segment is left alone and ignored.
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, Options{Dir: dir})
	pos := writeAll(t, l, records(13, 3))
	l.Close()
	want := filepath.Join(dir, fmt.Sprintf("%020d.log", pos[0].Segment))
	fi, err := os.Stat(want)
	if err != nil {
		t.Fatal(err)
	}
	if pos[0].Offset != segmentHeaderLen(pos[0].Segment) {
		t.Fatalf("first record at offset %d, want just after the %d-byte header", pos[0].Offset, segmentHeaderLen(pos[0].Segment))
	}
	data, _ := os.ReadFile(want)
	if int64(len(data)) != fi.Size() || !strings.HasPrefix(string(data[pos[1].Offset+8:]), "\x01") {
		t.Fatalf("record 1's frame does not start at its position %v", pos[1])
	}
}

func TestObjectNames(t *testing.T) {
	store := blob.NewMemory()
	l := openLog(t, Options{Store: store, Prefix: "/logs/ts-1/"})
	pos := writeAll(t, l, records(14, 3))
	l.Close()
	objs, err := store.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("objects %v, want one per flush", objs)
	}
	for i, o := range objs {
		want := fmt.Sprintf("logs/ts-1/%020d/%020d.log", pos[i].Segment, pos[i].Offset)
		if o.Name != want {
			t.Fatalf("object %d named %q, want %q", i, o.Name, want)
		}
	}
}

func TestReplayMissingDirIsEmpty(t *testing.T) {
	got, res, err := replayAll(t, Options{Dir: filepath.Join(t.TempDir(), "absent")}, tabletdesc.LogPosition{})
	if err != nil || len(got) != 0 || res.TornTail {
		t.Fatalf("replay of a missing directory: %d records, %+v, %v", len(got), res, err)
	}
}

func TestReplayStopsAtCallbackError(t *testing.T) {
	forModes(t, func(t *testing.T, m logMode) {
		opts := m.options(t)
		l := openLog(t, opts)
		writeAll(t, l, records(15, 10))
		l.Close()
		stop := errors.New("stop")
		n := 0
		_, err := Replay(context.Background(), opts, tabletdesc.LogPosition{}, func(tabletdesc.LogPosition, Record) error {
			n++
			if n == 4 {
				return stop
			}
			return nil
		})
		if err != stop || n != 4 {
			t.Fatalf("Replay = %v after %d records, want the callback's error after 4", err, n)
		}
	})
}

// An object-store log starts a new segment once SegmentObjects flushes went
// to the current one, whatever their bytes: replay reads every record
// across the segments, and truncation deletes the segments behind a
// position, so the objects a recovery reads stay bounded.
func TestObjectLogSegmentEndsAfterSegmentObjects(t *testing.T) {
	for _, concurrency := range []int{1, 4} {
		t.Run(fmt.Sprintf("flushes in flight %d", concurrency), func(t *testing.T) {
			ctx := context.Background()
			store := blob.NewMemory()
			opts := Options{Store: store, Prefix: "p", SegmentObjects: 4, FlushConcurrency: concurrency}
			l := openLog(t, opts)
			recs := records(7, 10)
			pos := writeAll(t, l, recs) // one flush each: written one at a time
			first := pos[0].Segment
			for i, p := range pos {
				if want := first + uint64(i/4); p.Segment != want {
					t.Fatalf("record %d in segment %d, want %d (4 objects a segment): %v", i, p.Segment, want, pos)
				}
			}
			got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
			if err != nil {
				t.Fatal(err)
			}
			checkReplayed(t, got, recs, pos)
			if err := l.Truncate(ctx, pos[8]); err != nil {
				t.Fatal(err)
			}
			objs, err := store.List(ctx, "p/")
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 2 {
				t.Fatalf("after truncating to the third segment %d objects left, want its 2: %v", len(objs), objs)
			}
			got, _, err = replayAll(t, opts, pos[8])
			if err != nil {
				t.Fatal(err)
			}
			checkReplayed(t, got, recs[8:], pos[8:])
			l.Close()
		})
	}
}
