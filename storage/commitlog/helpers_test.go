package commitlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// logMode is where a test log lives: a local directory or an object store.
type logMode struct {
	name string
	// options returns the options of a fresh, empty log.
	options func(t testing.TB) Options
}

func localMode() logMode {
	return logMode{"local", func(t testing.TB) Options { return Options{Dir: t.TempDir()} }}
}

// localBufferedMode is localMode with direct I/O off, as on a file system
// that refuses it.
func localBufferedMode() logMode {
	return logMode{"local-buffered", func(t testing.TB) Options {
		withBufferedIO(t)
		return Options{Dir: t.TempDir()}
	}}
}

func objectMode(name string, newStore func(t testing.TB) blob.Store) logMode {
	return logMode{name, func(t testing.TB) Options {
		return Options{Store: newStore(t), Prefix: "logs/ts-1"}
	}}
}

func memoryMode() logMode {
	return objectMode("memory", func(testing.TB) blob.Store { return blob.NewMemory() })
}

// unitModes are the modes unit tests run in; the integration tests add S3.
func unitModes() []logMode { return []logMode{localMode(), localBufferedMode(), memoryMode()} }

// forModes runs test as a subtest in every unit mode.
func forModes(t *testing.T, test func(*testing.T, logMode)) {
	for _, m := range unitModes() {
		t.Run(m.name, func(t *testing.T) { test(t, m) })
	}
}

func openLog(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// randomRecord returns a record exercising every mutation kind and field,
// including empty and nil slices, zero bytes and negative timestamps.
func randomRecord(r *rand.Rand, i int) Record {
	rec := Record{
		Tablet:   fmt.Sprintf("table-%d/tablet-%c", r.IntN(3), 'a'+r.IntN(5)),
		FirstSeq: uint64(i)*10 + r.Uint64N(3),
		Mutation: cell.RowMutation{Row: fmt.Appendf(nil, "row\x00%06d", r.IntN(1000))},
	}
	for range 1 + r.IntN(4) {
		var m cell.Mutation
		switch r.IntN(5) {
		case 0, 1:
			m = cell.Set("cf", randBytes(r, 8), r.Int64N(1<<50), randBytes(r, 120))
		case 2:
			m = cell.DeleteColumn("cf2", randBytes(r, 4), r.Int64N(1000)-500, r.Int64N(1<<40))
		case 3:
			m = cell.DeleteFamily(fmt.Sprint("f", r.IntN(3)))
		case 4:
			m = cell.DeleteRow()
		}
		rec.Mutation.Mutations = append(rec.Mutation.Mutations, m)
	}
	return rec
}

// randBytes returns nil, an empty slice or up to max random bytes.
func randBytes(r *rand.Rand, max int) []byte {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, 1+r.IntN(max))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// records returns n random records.
func records(seed uint64, n int) []Record {
	r := rand.New(rand.NewPCG(seed, 99))
	out := make([]Record, n)
	for i := range out {
		out[i] = randomRecord(r, i)
	}
	return out
}

// replayed is one record seen by Replay.
type replayed struct {
	pos tabletdesc.LogPosition
	rec Record
}

// replayAll replays from `from` and collects what fn saw.
func replayAll(t testing.TB, opts Options, from tabletdesc.LogPosition) ([]replayed, ReplayResult, error) {
	t.Helper()
	var got []replayed
	res, err := Replay(context.Background(), opts, from, func(p tabletdesc.LogPosition, rec Record) error {
		got = append(got, replayed{p, rec})
		return nil
	})
	if res.Records != len(got) {
		t.Errorf("ReplayResult.Records = %d, fn saw %d", res.Records, len(got))
	}
	return got, res, err
}

// checkReplayed asserts that got holds exactly want at positions pos, in
// order.
func checkReplayed(t testing.TB, got []replayed, want []Record, pos []tabletdesc.LogPosition) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].pos != pos[i] {
			t.Fatalf("record %d replayed at %v, appended at %v", i, got[i].pos, pos[i])
		}
		if !reflect.DeepEqual(got[i].rec, want[i]) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i].rec, want[i])
		}
	}
}

// writeAll writes recs one at a time and returns their positions.
func writeAll(t testing.TB, l *Log, recs []Record) []tabletdesc.LogPosition {
	t.Helper()
	pos := make([]tabletdesc.LogPosition, len(recs))
	for i, rec := range recs {
		p, err := l.Write(context.Background(), rec)
		if err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
		pos[i] = p
	}
	return pos
}

// faultyStore wraps a Store: Put fails once `fail` returns true, and may be
// held by a gate.
type faultyStore struct {
	blob.Store
	mu   sync.Mutex
	puts int
	fail func(n int) bool // n: number of this Put, from 1
}

var errInjected = errors.New("injected put failure")

func (s *faultyStore) Put(ctx context.Context, name string, data []byte) error {
	s.mu.Lock()
	s.puts++
	n := s.puts
	s.mu.Unlock()
	if s.fail != nil && s.fail(n) {
		return errInjected
	}
	return s.Store.Put(ctx, name, data)
}
