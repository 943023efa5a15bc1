package commitlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestEncodingRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	recs := []Record{
		{}, // every field zero
		{Tablet: "t", FirstSeq: 1<<64 - 1, Mutation: cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{
			{Kind: cell.SetCell, Family: "f", Qualifier: []byte{}, Timestamp: -1, Value: []byte{}},
			{Kind: cell.DeleteFromColumn, Family: "f", Qualifier: []byte{0}, StartTimestamp: -1 << 63, EndTimestamp: 1<<63 - 1},
			// Fields that do not belong to the kind survive too.
			{Kind: cell.DeleteFromRow, Family: "x", Qualifier: []byte("q"), Timestamp: 5, Value: []byte("v"), StartTimestamp: 1, EndTimestamp: 2},
			{Kind: 200},
		}}},
	}
	for i := range 200 {
		recs = append(recs, randomRecord(r, i))
	}
	for i, rec := range recs {
		frame := appendRecordFrame(nil, &rec)
		s := &segReader{mem: frame, size: int64(len(frame))}
		payload, next, reason, err := s.frame(0)
		if err != nil || reason != "" || next != int64(len(frame)) {
			t.Fatalf("record %d: frame: %q %v, next %d of %d", i, reason, err, next, len(frame))
		}
		got, err := decodeRecord(payload)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got, rec)
		}
		// Every strict prefix of the payload is malformed: a record
		// can never be mistaken for a shorter one.
		for n := range len(payload) {
			if _, err := decodeRecord(payload[:n]); err == nil {
				t.Fatalf("record %d: %d-byte prefix of %d decoded", i, n, len(payload))
			}
		}
	}
}

func TestDecodeRejectsLyingCounts(t *testing.T) {
	// A mutation count far beyond what the payload can hold must fail
	// before it sizes an allocation.
	p := []byte{typeRecord, 0, 0, 0}
	p = append(p, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := decodeRecord(p); err == nil {
			t.Fatal("decoded a record claiming 2^63 mutations")
		}
	})
	if allocs > 1 {
		t.Fatalf("%v allocations decoding a lying count", allocs)
	}
	for _, bad := range [][]byte{
		nil,
		{typeSegment, formatVersion, 0, 1},
		{typeRecord, 5, 'a'},              // tablet name longer than the payload
		{typeRecord, 0, 0, 0, 1, 4, 0x80}, // unknown mutation field flag
		{typeRecord, 0, 0, 0, 0, 0},       // trailing byte
	} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%x) succeeded", bad)
		}
	}
}

// writeLocal writes recs to a fresh local log in one segment and returns the
// options, positions and the segment file's path.
func writeLocal(t *testing.T, recs []Record) (Options, []tabletdesc.LogPosition, string) {
	t.Helper()
	opts := Options{Dir: t.TempDir()}
	l := openLog(t, opts)
	pos := writeAll(t, l, recs)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return opts, pos, filepath.Join(opts.Dir, segmentFileName(pos[0].Segment))
}

// TestTornTail cuts the last segment at every byte inside its last record:
// the earlier records replay, and the torn one is dropped and reported.
func TestTornTail(t *testing.T) {
	recs := records(20, 5)
	opts, pos, path := writeLocal(t, recs)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := pos[len(pos)-1]
	for cut := last.Offset + 1; cut < int64(len(data)); cut++ {
		if err := os.WriteFile(path, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if !res.TornTail || res.TornAt != last || len(res.Torn) != 1 {
			t.Fatalf("cut at %d: result %+v, want a torn tail at %v", cut, res, last)
		}
		checkReplayed(t, got, recs[:len(recs)-1], pos[:len(pos)-1])
	}
	// Cut exactly at the record boundary: a clean end, nothing torn.
	os.WriteFile(path, data[:last.Offset], 0o644)
	if got, res, err := replayAll(t, opts, tabletdesc.LogPosition{}); err != nil || res.TornTail || len(got) != len(recs)-1 {
		t.Fatalf("cut at a boundary: %d records, %+v, %v", len(got), res, err)
	}
	// Cut inside the segment header: torn at offset 0, no records.
	for cut := int64(1); cut < pos[0].Offset; cut++ {
		os.WriteFile(path, data[:cut], 0o644)
		got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil || !res.TornTail || res.TornAt != (tabletdesc.LogPosition{Segment: last.Segment, Offset: 0}) || len(got) != 0 {
			t.Fatalf("cut at %d in the header: %d records, %+v, %v", cut, len(got), res, err)
		}
	}
}

// TestTornTailGarbage: the unsynced end of a flush may hold garbage rather
// than a clean cut (zeroed or stale blocks); it is torn as long as no valid
// record follows.
func TestTornTailGarbage(t *testing.T) {
	recs := records(21, 4)
	opts, pos, path := writeLocal(t, recs)
	data, _ := os.ReadFile(path)
	last := pos[len(pos)-1]
	for name, tail := range map[string][]byte{
		"zeros":       make([]byte, 300),
		"checksum":    append([]byte(nil), data[last.Offset:]...),
		"huge-length": {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6},
	} {
		if name == "checksum" {
			tail[len(tail)-1] ^= 1
		}
		os.WriteFile(path, append(append([]byte(nil), data[:last.Offset]...), tail...), 0o644)
		got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil || !res.TornTail || res.TornAt != last {
			t.Fatalf("%s: %+v, %v; want a torn tail at %v", name, res, err, last)
		}
		checkReplayed(t, got, recs[:len(recs)-1], pos[:len(pos)-1])
	}
}

// TestCorruptMiddle damages a record that valid records follow: Replay
// fails with ErrCorrupt naming the segment and offset, after delivering the
// records before it.
func TestCorruptMiddle(t *testing.T) {
	recs := records(22, 6)
	_, pos, _ := writeLocal(t, recs) // for the layout
	bad := pos[2]
	for name, damage := range map[string]func([]byte){
		"payload": func(d []byte) { d[bad.Offset+frameHeaderLen+3] ^= 0x40 },
		"crc":     func(d []byte) { d[bad.Offset+5] ^= 1 },
		"length":  func(d []byte) { d[bad.Offset+3] = 0x70 }, // now runs past the end
		"short":   func(d []byte) { d[bad.Offset] -= 1 },
	} {
		t.Run(name, func(t *testing.T) {
			opts, pos, path := writeLocal(t, recs)
			data, _ := os.ReadFile(path)
			damage(data)
			os.WriteFile(path, data, 0o644)
			got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Replay = %v, want ErrCorrupt", err)
			}
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Pos != bad || ce.Name != path {
				t.Fatalf("error %v does not name %s at %v", err, path, bad)
			}
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprint("segment ", bad.Segment)) || !strings.Contains(msg, fmt.Sprint("offset ", bad.Offset)) {
				t.Fatalf("message %q does not name the segment and offset", msg)
			}
			checkReplayed(t, got, recs[:2], pos[:2])
		})
	}
}

// TestTornTailAcrossRestart: a server that crashed mid-flush and was
// restarted leaves a torn tail in a segment that is no longer the last. It
// is still a torn tail (Open started the next segment), while the same
// damage in a segment the log rolled over from is corruption.
func TestTornTailAcrossRestart(t *testing.T) {
	opts := Options{Dir: t.TempDir()}
	recs := records(23, 8)
	l := openLog(t, opts)
	pos := writeAll(t, l, recs[:4])
	l.Close()
	path := filepath.Join(opts.Dir, segmentFileName(pos[0].Segment))
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-3], 0o644) // tear record 3
	l = openLog(t, opts)                          // the restart
	pos = append(pos[:3], writeAll(t, l, recs[4:])...)
	l.Close()
	got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]Record(nil), recs[:3]...), recs[4:]...)
	checkReplayed(t, got, want, pos)
	if !res.TornTail || res.TornAt.Segment != pos[0].Segment {
		t.Fatalf("result %+v, want the torn tail of segment %d", res, pos[0].Segment)
	}

	// Roll over instead of restarting: the tear is now corruption.
	opts = Options{Dir: t.TempDir(), SegmentBytes: 600}
	l = openLog(t, opts)
	pos = writeAll(t, l, recs)
	l.Close()
	if pos[0].Segment == pos[len(pos)-1].Segment {
		t.Fatal("no rollover")
	}
	path = filepath.Join(opts.Dir, segmentFileName(pos[0].Segment))
	data, _ = os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-3], 0o644)
	if _, _, err := replayAll(t, opts, tabletdesc.LogPosition{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("torn record in a rolled-over segment: %v, want ErrCorrupt", err)
	}
}

func TestSegmentHeaderMismatch(t *testing.T) {
	_, pos, path := writeLocal(t, records(24, 2))
	// The same file under another segment number.
	dir := t.TempDir()
	data, _ := os.ReadFile(path)
	os.WriteFile(filepath.Join(dir, segmentFileName(pos[0].Segment+7)), data, 0o644)
	if _, _, err := replayAll(t, Options{Dir: dir}, tabletdesc.LogPosition{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("renamed segment: %v, want ErrCorrupt", err)
	}
}

// TestObjectDamageIsCorruption: objects are atomic, so a damaged, truncated
// or missing object is corruption, never a torn tail.
func TestObjectDamageIsCorruption(t *testing.T) {
	ctx := context.Background()
	for name, damage := range map[string]func(s blob.Store, objs []blob.Attrs){
		"flipped": func(s blob.Store, objs []blob.Attrs) {
			d, _ := s.Get(ctx, objs[2].Name)
			d[len(d)/2] ^= 1
			s.Put(ctx, objs[2].Name, d)
		},
		"truncated-last": func(s blob.Store, objs []blob.Attrs) {
			n := objs[len(objs)-1].Name
			d, _ := s.Get(ctx, n)
			s.Put(ctx, n, d[:len(d)-2])
		},
		"missing": func(s blob.Store, objs []blob.Attrs) { s.Delete(ctx, objs[2].Name) },
		"empty":   func(s blob.Store, objs []blob.Attrs) { s.Put(ctx, objs[4].Name, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			opts := Options{Store: blob.NewMemory(), Prefix: "l"}
			l := openLog(t, opts)
			writeAll(t, l, records(25, 5))
			l.Close()
			objs, _ := opts.Store.List(ctx, "l/")
			damage(opts.Store, objs)
			_, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
			if !errors.Is(err, ErrCorrupt) || res.TornTail {
				t.Fatalf("Replay = %+v, %v; want ErrCorrupt", res, err)
			}
			if !strings.Contains(err.Error(), "l/") {
				t.Fatalf("error %q does not name the object", err)
			}
		})
	}
}
