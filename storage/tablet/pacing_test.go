package tablet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// gatedSleep is a pacing.Config.Sleep that reports each sleep and blocks
// until released.
type gatedSleep struct {
	sleeping chan struct{}
	release  chan struct{}
	once     sync.Once
}

func newGatedSleep() *gatedSleep {
	return &gatedSleep{sleeping: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gatedSleep) sleep(ctx context.Context, d time.Duration) error {
	select {
	case g.sleeping <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedSleep) open() { g.once.Do(func() { close(g.release) }) }

// fillMemtable writes rows of 4 KiB values until the tablet's memtable
// passed limit, which kicks a background flush.
func fillMemtable(t *testing.T, tb *Tablet, limit int) int {
	t.Helper()
	val := make([]byte, 4<<10)
	n := 0
	for written := 0; written <= limit; written += len(val) {
		row := fmt.Appendf(nil, "r%05d", n)
		if err := tb.Apply(context.Background(), cell.RowMutation{Row: row, Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, val)}}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func openPacedTablet(t *testing.T, p *pacing.Pacer) *Tablet {
	t.Helper()
	store := blob.NewMemory()
	tb, err := Open(context.Background(), Options{ID: "p", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
		MemtableBytes: 1 << 20, Pacer: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb
}

// TestBackgroundFlushPacedUntilSomeoneWaits: while its server is busy, the
// flush the tablet starts on its own waits in the Pacer; a caller that
// needs the tablet's maintenance (here an explicit Flush) ends the pacing,
// so the background flush finishes and the caller's own flush runs
// unpaced.
func TestBackgroundFlushPacedUntilSomeoneWaits(t *testing.T) {
	gate := newGatedSleep()
	defer gate.open()
	p := pacing.New(pacing.Config{MinRate: 64 << 10, Quiet: time.Hour, Sleep: gate.sleep})
	p.Begin() // a request in flight for the whole test
	defer p.End()
	tb := openPacedTablet(t, p)
	rows := fillMemtable(t, tb, 1<<20)

	select {
	case <-gate.sleeping:
	case <-time.After(30 * time.Second):
		t.Fatal("the background flush of a full memtable never waited in the busy server's pacer")
	}
	if n := tb.flushes.Load(); n != 0 {
		t.Fatalf("%d flushes finished while the background flush was held by the pacer", n)
	}
	done := make(chan error, 1)
	go func() { done <- tb.Flush(context.Background()) }()
	for tb.maintWaiters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if pr := tb.flushPressure(); pr < 1 {
		t.Fatalf("pressure %v with a caller waiting for maintenance, want >= 1", pr)
	}
	// The held sleep returns; the pacer sees the pressure and lets the
	// flush run to its end without waiting again.
	gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := tb.flushes.Load(); n < 1 {
		t.Fatalf("%d flushes after Flush returned", n)
	}
	// The flush took what the memtable held when it froze it: the 1 MiB
	// that kicked it, less the memtable's own overhead.
	st := p.Stats()
	if st.PacedBytes == 0 || st.Bytes < 900<<10 {
		t.Fatalf("pacer stats %+v: want the background flush's bytes (about 1 MiB) counted and some of them paced", st)
	}
	got := 0
	if err := tb.Scan(context.Background(), ScanOptions{}, func(r cell.Row) error {
		got++
		if len(r.Cells) != 1 || len(r.Cells[0].Value) != 4<<10 {
			return fmt.Errorf("row %q: %d cells", r.Key, len(r.Cells))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != rows {
		t.Fatalf("%d rows after the paced flush, want %d", got, rows)
	}
}

// TestBackgroundFlushUnpacedWhenIdle: with no request in flight the
// background flush never waits.
func TestBackgroundFlushUnpacedWhenIdle(t *testing.T) {
	p := pacing.New(pacing.Config{MinRate: 64 << 10, Sleep: func(context.Context, time.Duration) error {
		panic("an idle server's background flush waited in the pacer")
	}})
	tb := openPacedTablet(t, p)
	fillMemtable(t, tb, 1<<20)
	deadline := time.Now().Add(30 * time.Second)
	for tb.flushes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no background flush of a full memtable")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The flush takes what the memtable holds when it starts: at least
	// the 1 MiB that kicked it, less the memtable's own overhead.
	if st := p.Stats(); st.Bytes < 900<<10 || st.PacedBytes != 0 {
		t.Fatalf("pacer stats %+v: want the flush's bytes (about 1 MiB) reported, none paced", st)
	}
}

// TestPressure: the memtable's fill drives a flush's pressure, the
// SSTable pile-up a merge's (a merge holds no flush up, so the memtable
// does not hurry it); closing makes both unbounded.
func TestPressure(t *testing.T) {
	tb := openPacedTablet(t, nil)
	if pr := tb.flushPressure(); pr > 0 {
		t.Fatalf("empty tablet: flush pressure %v", pr)
	}
	if pr := tb.mergePressure(); pr > 0 {
		t.Fatalf("empty tablet: merge pressure %v", pr)
	}
	val := make([]byte, 256<<10)
	for i, want := range []float64{-0.5, 0} {
		if err := tb.Apply(context.Background(), cell.RowMutation{Row: fmt.Appendf(nil, "a%d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, val)}}); err != nil {
			t.Fatal(err)
		}
		if pr := tb.flushPressure(); pr < want || pr >= want+0.1 {
			t.Fatalf("memtable %d/4 full: flush pressure %v, want about %v", i+1, pr, want)
		}
	}
	if err := tb.Apply(context.Background(), cell.RowMutation{Row: []byte("a2"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, val)}}); err != nil {
		t.Fatal(err)
	}
	if pr := tb.flushPressure(); pr < 0.5 || pr >= 0.6 {
		t.Fatalf("memtable 3/4 full: flush pressure %v, want about 0.5", pr)
	}
	if pr := tb.mergePressure(); pr > 0 {
		t.Fatalf("memtable 3/4 full, one group of no files: merge pressure %v, want <= 0", pr)
	}
	// 12 SSTables in the group: (12 - 8) / 8 = 0.5.
	for i := range 12 {
		if err := tb.Apply(context.Background(), cell.RowMutation{Row: fmt.Appendf(nil, "b%d", i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
			t.Fatal(err)
		}
		tb.lockMaint()
		_, err := tb.flushLocked(context.Background())
		tb.unlockMaint()
		if err != nil {
			t.Fatal(err)
		}
	}
	if pr := tb.mergePressure(); pr != 0.5 {
		t.Fatalf("12 SSTables, MaxSSTables 8, empty memtable: merge pressure %v, want 0.5", pr)
	}
	if pr := tb.flushPressure(); pr > -0.9 {
		t.Fatalf("12 SSTables, empty memtable: flush pressure %v, want about -1", pr)
	}
	_ = tb.Close()
	if pr := tb.flushPressure(); pr < 1 {
		t.Fatalf("closed tablet: flush pressure %v, want >= 1", pr)
	}
	if pr := tb.mergePressure(); pr < 1 {
		t.Fatalf("closed tablet: merge pressure %v, want >= 1", pr)
	}
}

// TestRequestedFlushIsUnpaced: a flush the server asks for (RequestFlush:
// its memtable budget is spent) flushes a memtable far from full, and does
// not wait in the pacer although the server is busy; a request on an empty
// memtable flushes nothing.
func TestRequestedFlushIsUnpaced(t *testing.T) {
	p := pacing.New(pacing.Config{MinRate: 64 << 10, Quiet: time.Hour, Sleep: func(context.Context, time.Duration) error {
		panic("a requested flush waited in the pacer")
	}})
	p.Begin() // a request in flight for the whole test
	defer p.End()
	tb := openPacedTablet(t, p)
	tb.RequestFlush()
	time.Sleep(50 * time.Millisecond)
	if n := tb.flushes.Load(); n != 0 {
		t.Fatalf("a requested flush of an empty memtable flushed (%d flushes)", n)
	}
	rows := fillMemtable(t, tb, 256<<10) // a quarter of MemtableBytes
	if n := tb.flushes.Load(); n != 0 {
		t.Fatalf("%d flushes before the request", n)
	}
	tb.RequestFlush()
	deadline := time.Now().Add(30 * time.Second)
	for tb.flushes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no flush 30 s after RequestFlush")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if active, frozen := tb.MemtableBytes(); frozen != 0 || active >= 256<<10 {
		t.Fatalf("after the requested flush: active memtable %d bytes, frozen %d", active, frozen)
	}
	if st := p.Stats(); st.PacedBytes != 0 {
		t.Fatalf("pacer stats %+v: the requested flush was paced", st)
	}
	for i := range rows {
		row := fmt.Appendf(nil, "r%05d", i)
		if _, found, err := tb.ReadRow(context.Background(), row, ReadOptions{}); err != nil || !found {
			t.Fatalf("row %q after the flush: found %v, %v", row, found, err)
		}
	}
}
