package commitlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// sortModes are the object stores sort tests run on; the integration tests
// add S3.
func sortModes() []logMode {
	return []logMode{
		memoryMode(),
		objectMode("localblob", func(t testing.TB) blob.Store {
			s, err := blob.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}),
	}
}

func forSortModes(t *testing.T, test func(*testing.T, logMode)) {
	for _, m := range sortModes() {
		t.Run(m.name, func(t *testing.T) { test(t, m) })
	}
}

// sortedOf is where tests put the sorted copy of a log.
func sortedOf(opts Options) SortedLog {
	return SortedLog{Store: opts.Store, Prefix: "sortedlogs/ts-1"}
}

// writeShared writes recs (records of several tablets) to a fresh log with
// small segments, appending them all before waiting so that flushes carry
// several records each, and returns the log's options and the records'
// positions.
func writeShared(t testing.TB, m logMode, recs []Record, segmentBytes int64) (Options, []tabletdesc.LogPosition) {
	t.Helper()
	opts := m.options(t)
	opts.SegmentBytes = segmentBytes
	opts.MaxBatchBytes = int(segmentBytes / 3)
	l := openLog(t, opts)
	commits := make([]*Commit, len(recs))
	for i, rec := range recs {
		commits[i] = l.Append(rec)
		if i%7 == 6 {
			// Let a flush go now and then, so batches vary in size.
			if err := commits[i].Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	pos := make([]tabletdesc.LogPosition, len(recs))
	for i, c := range commits {
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		pos[i] = c.Pos
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return opts, pos
}

// rawTablet replays the log itself from `from`, keeping tablet's records:
// what a recovering tablet read before sorting existed.
func rawTablet(t testing.TB, opts Options, tablet string, from tabletdesc.LogPosition) []replayed {
	t.Helper()
	var got []replayed
	_, err := Replay(context.Background(), opts, from, func(p tabletdesc.LogPosition, rec Record) error {
		if rec.Tablet == tablet {
			got = append(got, replayed{p, rec})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Replay from %v: %v", from, err)
	}
	return got
}

// sortedTablet replays tablet from the sorted copy.
func sortedTablet(opts Options, tablet string, from tabletdesc.LogPosition) ([]replayed, error) {
	var got []replayed
	res, err := ReplaySorted(context.Background(), opts, sortedOf(opts), tablet, from, func(p tabletdesc.LogPosition, rec Record) error {
		got = append(got, replayed{p, rec})
		return nil
	})
	if err == nil && res.Records != len(got) {
		return got, fmt.Errorf("ReplayResult.Records = %d, fn saw %d", res.Records, len(got))
	}
	return got, err
}

func tabletsOf(recs []Record) []string {
	var ts []string
	for _, r := range recs {
		ts = append(ts, r.Tablet)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

func TestSortedReplayMatchesLog(t *testing.T) { forSortModes(t, testSortedReplayMatchesLog) }

// testSortedReplayMatchesLog writes a log of 15 tablets over many segments,
// sorts it, and replays every tablet from the sorted copy from many redo
// points: exactly the records, positions and order of the log replayed and
// filtered to the tablet.
func testSortedReplayMatchesLog(t *testing.T, m logMode) {
	ctx := context.Background()
	recs := records(7, 400)
	opts, pos := writeShared(t, m, recs, 8<<10)
	stats, err := Sort(ctx, opts, sortedOf(opts))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) < 5 {
		t.Fatalf("%d segments; the test wants several", len(stats))
	}
	total := 0
	for _, st := range stats {
		total += st.Records
	}
	if total != len(recs) {
		t.Fatalf("sorted %d records, wrote %d", total, len(recs))
	}

	// Redo points: the start, every segment's start, record positions
	// (of this tablet and of others), the tail and beyond.
	froms := []tabletdesc.LogPosition{{}}
	for _, st := range stats {
		froms = append(froms, tabletdesc.LogPosition{Segment: st.Segment, Offset: 0}, tabletdesc.LogPosition{Segment: st.Segment, Offset: st.SourceBytes})
	}
	for i := 0; i < len(pos); i += 13 {
		froms = append(froms, pos[i])
	}
	last := stats[len(stats)-1].Segment
	froms = append(froms, tabletdesc.LogPosition{Segment: last + 1, Offset: 0})

	for _, tablet := range tabletsOf(recs) {
		for _, from := range froms {
			want := rawTablet(t, opts, tablet, from)
			got, err := sortedTablet(opts, tablet, from)
			if err != nil {
				t.Fatalf("tablet %s from %v: %v", tablet, from, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("tablet %s from %v: sorted replay gave %d records, the log %d (or they differ)", tablet, from, len(got), len(want))
			}
		}
	}
	// A tablet the log does not know has nothing to replay.
	if got, err := sortedTablet(opts, "no-such-tablet", tabletdesc.LogPosition{}); err != nil || len(got) != 0 {
		t.Fatalf("unknown tablet: %d records, %v", len(got), err)
	}
}

func TestSortIsDeterministic(t *testing.T) {
	ctx := context.Background()
	recs := records(3, 120)
	opts, _ := writeShared(t, memoryMode(), recs, 4<<10)
	name := sortedObjectName(logPrefix(sortedOf(opts).Prefix), 1)
	if _, err := SortSegment(ctx, opts, 1, sortedOf(opts)); err != nil {
		t.Fatal(err)
	}
	first, err := opts.Store.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SortSegment(ctx, opts, 1, sortedOf(opts)); err != nil {
		t.Fatal(err)
	}
	again, err := opts.Store.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Fatal("sorting a segment twice wrote different objects")
	}
}

func TestSortedFormat(t *testing.T) {
	// Two tablets, interleaved: the sorted object holds b's section
	// after a's, each in log order, then the index and the trailer.
	ctx := context.Background()
	recs := []Record{
		{Tablet: "b", FirstSeq: 1}, {Tablet: "a", FirstSeq: 5}, {Tablet: "b", FirstSeq: 2}, {Tablet: "a", FirstSeq: 6},
	}
	opts, pos := writeShared(t, memoryMode(), recs, 1<<20)
	st, err := SortSegment(ctx, opts, 1, sortedOf(opts))
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 4 || st.Tablets != 2 {
		t.Fatalf("stats %+v", st)
	}
	data, err := opts.Store.Get(ctx, "sortedlogs/ts-1/00000000000000000001.sorted")
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != st.SortedBytes || string(data[len(data)-8:]) != "tblsort1" {
		t.Fatalf("object of %d bytes ends in %q", len(data), data[len(data)-8:])
	}
	idx, _, _, err := readSortedIndex(&memObject{data}, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []sortedSection{
		{tablet: "a", records: 2, lastOff: pos[3].Offset},
		{tablet: "b", records: 2, lastOff: pos[2].Offset},
	}
	for i := range idx.sections {
		idx.sections[i].off, idx.sections[i].length = 0, 0
	}
	if !reflect.DeepEqual(idx.sections, want) || idx.source != st.SourceBytes || idx.records != 4 {
		t.Fatalf("index %+v", idx)
	}
}

func TestSortFailsOnCorruption(t *testing.T) { forSortModes(t, testSortFailsOnCorruption) }

func testSortFailsOnCorruption(t *testing.T, m logMode) {
	ctx := context.Background()
	for _, damage := range []struct {
		name string
		do   func(t *testing.T, store blob.Store, obj logObject)
	}{
		{"flipped byte", func(t *testing.T, store blob.Store, obj logObject) {
			data, err := store.Get(ctx, obj.name)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0x40
			if err := store.Put(ctx, obj.name, data); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing object", func(t *testing.T, store blob.Store, obj logObject) {
			if err := store.Delete(ctx, obj.name); err != nil {
				t.Fatal(err)
			}
		}},
		{"undecodable record", func(t *testing.T, store blob.Store, obj logObject) {
			// A well-framed, checksummed payload that is no record.
			frame := appendFrame(nil, func(b []byte) []byte { return append(b, typeRecord, 0xFF) })
			data, err := store.Get(ctx, obj.name)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Put(ctx, obj.name, append(data, frame...)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			opts, _ := writeShared(t, m, records(11, 100), 1<<20)
			objs, err := listSegmentObjects(ctx, opts.Store, logPrefix(opts.Prefix), 1)
			if err != nil || len(objs) < 3 {
				t.Fatalf("%d objects, %v; want several", len(objs), err)
			}
			damage.do(t, opts.Store, objs[1])
			_, err = SortSegment(ctx, opts, 1, sortedOf(opts))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("SortSegment of a damaged segment: %v, want ErrCorrupt", err)
			}
			if _, err := opts.Store.Get(ctx, sortedObjectName(logPrefix(sortedOf(opts).Prefix), 1)); !blob.IsNotExist(err) {
				t.Fatalf("a failed sort left a sorted object (%v)", err)
			}
		})
	}
}

func TestSortSegmentErrors(t *testing.T) {
	ctx := context.Background()
	opts, _ := writeShared(t, memoryMode(), records(1, 10), 1<<20)
	if _, err := SortSegment(ctx, opts, 9, sortedOf(opts)); !blob.IsNotExist(err) {
		t.Fatalf("sorting an absent segment: %v, want ErrNotExist", err)
	}
	if _, err := SortSegment(ctx, Options{Dir: t.TempDir()}, 1, sortedOf(opts)); err == nil {
		t.Fatal("sorted a local-directory log")
	}
	if _, err := SortSegment(ctx, opts, 1, SortedLog{}); err == nil {
		t.Fatal("sorted into no store")
	}
	if _, err := ReplaySorted(ctx, opts, SortedLog{}, "t", tabletdesc.LogPosition{}, nil); err == nil {
		t.Fatal("replayed from no store")
	}
	segs, err := Segments(ctx, opts)
	if err != nil || !slices.Equal(segs, []uint64{1}) {
		t.Fatalf("Segments = %v, %v", segs, err)
	}
	if segs, err := Segments(ctx, Options{Store: blob.NewMemory(), Prefix: "none"}); err != nil || len(segs) != 0 {
		t.Fatalf("Segments of an empty log = %v, %v", segs, err)
	}
}

func TestReplaySortedMissingSegment(t *testing.T) { forSortModes(t, testReplaySortedMissingSegment) }

// testReplaySortedMissingSegment deletes one segment's sorted object: a
// replay that needs the segment fails with ErrNotSorted; one that starts
// after it does not need it.
func testReplaySortedMissingSegment(t *testing.T, m logMode) {
	ctx := context.Background()
	recs := records(5, 200)
	opts, _ := writeShared(t, m, recs, 4<<10)
	stats, err := Sort(ctx, opts, sortedOf(opts))
	if err != nil || len(stats) < 3 {
		t.Fatalf("%d segments, %v", len(stats), err)
	}
	gone := stats[1].Segment
	if err := opts.Store.Delete(ctx, sortedObjectName(logPrefix(sortedOf(opts).Prefix), gone)); err != nil {
		t.Fatal(err)
	}
	tablet := recs[0].Tablet
	if _, err := sortedTablet(opts, tablet, tabletdesc.LogPosition{}); !errors.Is(err, ErrNotSorted) {
		t.Fatalf("replay over a segment without sorted object: %v, want ErrNotSorted", err)
	}
	from := tabletdesc.LogPosition{Segment: gone + 1, Offset: 0}
	got, err := sortedTablet(opts, tablet, from)
	if err != nil {
		t.Fatal(err)
	}
	if want := rawTablet(t, opts, tablet, from); !reflect.DeepEqual(got, want) {
		t.Fatalf("replay after the missing segment: %d records, want %d", len(got), len(want))
	}
}

// TestReplaySortedStaleCopy appends to a segment after it was sorted (a
// server that was not dead after all): the copy no longer covers the log,
// and a replay says so rather than lose the new record.
func TestReplaySortedStaleCopy(t *testing.T) {
	ctx := context.Background()
	recs := records(6, 50)
	opts, _ := writeShared(t, memoryMode(), recs, 1<<20)
	if _, err := Sort(ctx, opts, sortedOf(opts)); err != nil {
		t.Fatal(err)
	}
	objs, err := listSegmentObjects(ctx, opts.Store, logPrefix(opts.Prefix), 1)
	if err != nil {
		t.Fatal(err)
	}
	end := objs[len(objs)-1].off + objs[len(objs)-1].size
	late := appendRecordFrame(nil, &recs[0])
	if err := opts.Store.Put(ctx, objectName(logPrefix(opts.Prefix), 1, end), late); err != nil {
		t.Fatal(err)
	}
	if _, err := sortedTablet(opts, recs[0].Tablet, tabletdesc.LogPosition{}); !errors.Is(err, ErrNotSorted) {
		t.Fatalf("replay of a stale copy: %v, want ErrNotSorted", err)
	}
	// Sorting again repairs it.
	if _, err := Sort(ctx, opts, sortedOf(opts)); err != nil {
		t.Fatal(err)
	}
	got, err := sortedTablet(opts, recs[0].Tablet, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	if want := rawTablet(t, opts, recs[0].Tablet, tabletdesc.LogPosition{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("after sorting again: %d records, want %d", len(got), len(want))
	}
}

// TestReplaySortedDamage flips every byte of a sorted object in turn: each
// tablet's replay either gives exactly the right records or fails with
// ErrCorrupt, and every flip is caught by some tablet's replay.
func TestReplaySortedDamage(t *testing.T) {
	ctx := context.Background()
	recs := records(8, 40)
	opts, _ := writeShared(t, memoryMode(), recs, 1<<20)
	if _, err := Sort(ctx, opts, sortedOf(opts)); err != nil {
		t.Fatal(err)
	}
	name := sortedObjectName(logPrefix(sortedOf(opts).Prefix), 1)
	good, err := opts.Store.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tablets := tabletsOf(recs)
	want := make(map[string][]replayed)
	for _, tb := range tablets {
		want[tb] = rawTablet(t, opts, tb, tabletdesc.LogPosition{})
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x01
		if err := opts.Store.Put(ctx, name, bad); err != nil {
			t.Fatal(err)
		}
		caught := false
		for _, tb := range tablets {
			got, err := sortedTablet(opts, tb, tabletdesc.LogPosition{})
			switch {
			case errors.Is(err, ErrCorrupt):
				caught = true
			case err != nil:
				t.Fatalf("byte %d flipped, tablet %s: %v, want ErrCorrupt", i, tb, err)
			case !reflect.DeepEqual(got, want[tb]):
				t.Fatalf("byte %d flipped: tablet %s replayed wrong records", i, tb)
			}
		}
		if !caught {
			t.Fatalf("byte %d of %d flipped and no replay noticed", i, len(good))
		}
	}
}

// memObject is a blob.Object over bytes in memory.
type memObject struct{ b []byte }

func (m *memObject) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (m *memObject) Size() int64  { return int64(len(m.b)) }
func (m *memObject) Close() error { return nil }

// FuzzSortedSegment reads arbitrary bytes as the sorted object of segment
// 1: reading the index and decoding every section must not panic, and
// what decodes must be self-consistent. Seeds are valid sorted objects.
func FuzzSortedSegment(f *testing.F) {
	ctx := context.Background()
	for _, n := range []int{1, 5, 30} {
		opts, _ := writeShared(f, memoryMode(), records(uint64(n), n), 1<<20)
		if _, err := SortSegment(ctx, opts, 1, sortedOf(opts)); err != nil {
			f.Fatal(err)
		}
		data, err := opts.Store.Get(ctx, sortedObjectName(logPrefix(sortedOf(opts).Prefix), 1))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, _, _, err := readSortedIndex(&memObject{data}, "fuzz", 1)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("index error %v is not ErrCorrupt", err)
			}
			return
		}
		seg := segExtent{seg: 1, size: idx.source}
		total := 0
		for _, sec := range idx.sections {
			recs, err := decodeSection("fuzz", seg, sec, data[sec.off:sec.off+sec.length], tabletdesc.LogPosition{})
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("section error %v is not ErrCorrupt", err)
				}
				continue
			}
			if len(recs) != sec.records {
				t.Fatalf("section of %q: %d records, index says %d", sec.tablet, len(recs), sec.records)
			}
			for i, r := range recs {
				if r.rec.Tablet != sec.tablet || r.pos.Segment != 1 || r.pos.Offset >= idx.source ||
					(i > 0 && r.pos.Offset <= recs[i-1].pos.Offset) {
					t.Fatalf("section of %q: record %d (%q at %v) inconsistent", sec.tablet, i, r.rec.Tablet, r.pos)
				}
			}
			total += len(recs)
		}
		if total > idx.records {
			t.Fatalf("%d records decoded, index says %d", total, idx.records)
		}
	})
}
