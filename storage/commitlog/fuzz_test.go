package commitlog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// FuzzReplay replays arbitrary bytes as the only segment file of a local
// log. Replay must not panic, and must end in one of three ways: every
// record read, a torn tail after the records read, or ErrCorrupt. What it
// does return must be self-consistent. The seed corpus is in
// testdata/fuzz/FuzzReplay (valid, torn, corrupt and garbage segments).
func FuzzReplay(f *testing.F) {
	// One directory per fuzzing process, the file rewritten for each
	// input: creating and removing a directory per input would cost more
	// than the replay being fuzzed.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, segmentFileName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var got []replayed
		res, err := Replay(context.Background(), Options{Dir: dir}, tabletdesc.LogPosition{}, func(p tabletdesc.LogPosition, rec Record) error {
			got = append(got, replayed{p, rec})
			return nil
		})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Replay error %v is not ErrCorrupt", err)
		}
		if err != nil && res.TornTail {
			t.Fatalf("both a torn tail and an error: %+v, %v", res, err)
		}
		if res.Records != len(got) {
			t.Fatalf("Records = %d, fn saw %d", res.Records, len(got))
		}
		end := tabletdesc.LogPosition{Segment: 1, Offset: int64(len(data))}
		if res.TornTail && (res.TornAt.Compare(end) >= 0 || res.TornAt.Segment != 1) {
			t.Fatalf("torn tail at %v, outside the %d-byte segment", res.TornAt, len(data))
		}
		for i, g := range got {
			if g.pos.Compare(end) >= 0 || (i > 0 && g.pos.Compare(got[i-1].pos) <= 0) {
				t.Fatalf("record %d at %v: out of order or out of the segment", i, g.pos)
			}
			if res.TornTail && g.pos.Compare(res.TornAt) >= 0 {
				t.Fatalf("record %d at %v is after the torn tail at %v", i, g.pos, res.TornAt)
			}
			// What was decoded encodes and decodes to itself.
			frame := appendRecordFrame(nil, &g.rec)
			again, err := decodeRecord(frame[frameHeaderLen:])
			if err != nil || !reflect.DeepEqual(again, g.rec) {
				t.Fatalf("record %d does not round-trip: %+v, %v", i, g.rec, err)
			}
		}
	})
}
