package tablet

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// firstSSTGate holds the Close of the first SSTable writer created
// through it until open is called, telling held when it waits: a flush
// slow enough that writes pile up in the memtable behind it.
type firstSSTGate struct {
	blob.Store
	mu      sync.Mutex
	taken   bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func newFirstSSTGate(store blob.Store) *firstSSTGate {
	return &firstSSTGate{Store: store, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *firstSSTGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *firstSSTGate) Create(ctx context.Context, name string) (blob.Writer, error) {
	w, err := g.Store.Create(ctx, name)
	if err != nil || !strings.HasSuffix(name, sstSuffix) {
		return w, err
	}
	g.mu.Lock()
	first := !g.taken
	g.taken = true
	g.mu.Unlock()
	if !first {
		return w, nil
	}
	return gatedWriter{Writer: w, g: g}, nil
}

type gatedWriter struct {
	blob.Writer
	g *firstSSTGate
}

func (w gatedWriter) Close() error {
	close(w.g.held)
	<-w.g.release
	return w.Writer.Close()
}

// openHandoffTablet opens a tablet of family f on gate, for the handoff
// tests, with a memtable budget above what they write (no flush of its
// own).
func openHandoffTablet(t *testing.T, gate *firstSSTGate) *Tablet {
	t.Helper()
	tb, err := Open(context.Background(), Options{ID: "handoff", Store: gate, Dir: "sst",
		StateStore:    NewBlobStateStore(gate, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
		MemtableBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// writeRows writes n rows named prefix-NNNNN of one 4 KiB value each.
func writeRows(t *testing.T, tb *Tablet, prefix string, n int) {
	t.Helper()
	val := make([]byte, 4<<10)
	for i := range n {
		rm := cell.RowMutation{Row: fmt.Appendf(nil, "%s-%05d", prefix, i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, val)}}
		if err := tb.Apply(context.Background(), rm); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSplitFlushesWhatArrivedDuringItsFlushBeforeStopping: writes that
// arrive while a split's first flush is under way (here 2 MB, held
// behind a slow SSTable write) are flushed while the tablet still
// serves, not after it stopped — the flush made unserved holds nothing.
// Before, the split flushed once, stopped, and flushed those 2 MB with
// its rows unserved (in a cluster, 21 MB and 150 ms under a bulk load).
func TestSplitFlushesWhatArrivedDuringItsFlushBeforeStopping(t *testing.T) {
	ctx := context.Background()
	gate := newFirstSSTGate(blob.NewMemory())
	defer gate.open()
	tb := openHandoffTablet(t, gate)
	defer tb.Close()
	writeRows(t, tb, "a", 200) // 800 KB: the first flush's

	type result struct {
		res SplitResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := tb.SplitAt(ctx, []byte("b"))
		done <- result{res, err}
	}()
	<-gate.held
	writeRows(t, tb, "c", 512) // 2 MB while the first flush is held: the tablet still serves
	gate.open()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.res.Files.Release()
	if r.res.UnservedFlushBytes >= handoffSmallBytes {
		t.Fatalf("the split flushed %d bytes after it stopped serving; want under %d (what arrived during its flush flushed while it served)",
			r.res.UnservedFlushBytes, handoffSmallBytes)
	}
	// Every row is in the children's files: nothing was left behind.
	for _, c := range []tabletdesc.State{r.res.Left, r.res.Right} {
		var files int
		for _, fs := range c.Groups {
			files += len(fs)
		}
		if files == 0 {
			t.Fatalf("child %s has no files", c.ID)
		}
	}
	child, err := Open(ctx, Options{ID: r.res.Right.ID, Store: gate, Dir: "sst", StateStore: NewBlobStateStore(gate, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	var rows int
	if err := child.Scan(ctx, ScanOptions{}, func(cell.Row) error { rows++; return nil }); err != nil {
		t.Fatal(err)
	}
	if rows != 512 {
		t.Fatalf("right child holds %d rows, want the 512 written during the flush", rows)
	}
}

// TestFlushForHandoffCatchesUp: FlushForHandoff, as an unload calls it
// before closing, flushes again what arrived during its first flush, so
// that the flush at Close — made once the tablet no longer serves —
// finds the memtable nearly empty. Flush alone leaves those writes.
func TestFlushForHandoffCatchesUp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handoff bool
	}{{"Flush", false}, {"FlushForHandoff", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			gate := newFirstSSTGate(blob.NewMemory())
			defer gate.open()
			tb := openHandoffTablet(t, gate)
			defer tb.Close()
			writeRows(t, tb, "a", 200)
			done := make(chan error, 1)
			go func() {
				if tc.handoff {
					done <- tb.FlushForHandoff(ctx)
				} else {
					done <- tb.Flush(ctx)
				}
			}()
			<-gate.held
			writeRows(t, tb, "c", 512)
			gate.open()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			active, frozen := tb.MemtableBytes()
			left := active + frozen
			switch {
			case tc.handoff && left >= handoffSmallBytes:
				t.Fatalf("FlushForHandoff left %d bytes in memory; want under %d", left, handoffSmallBytes)
			case !tc.handoff && left < 2<<20:
				t.Fatalf("Flush left %d bytes in memory; the 2 MB written during it expected (the test's premise)", left)
			}
		})
	}
}

// TestHandoffDone: FlushForHandoff flushes again while the memtable is
// 1 MiB or more and each flush leaves at most three quarters of what it
// wrote, and stops as soon as either fails.
func TestHandoffDone(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		active, flushed int64
		done            bool
	}{
		{active: mb - 1, flushed: math.MaxInt64, done: true},   // small after the first flush
		{active: 64 * mb, flushed: math.MaxInt64, done: false}, // large after the first: always a second
		{active: 13 * mb, flushed: 21 * mb, done: false},       // catching up (0.62)
		{active: 15 * mb, flushed: 20 * mb, done: false},       // exactly three quarters
		{active: 15*mb + 1, flushed: 20 * mb, done: true},      // not catching up
		{active: 30 * mb, flushed: 20 * mb, done: true},        // falling behind
		{active: mb / 2, flushed: mb / 2, done: true},          // small, whatever the trend
		{active: 2 * mb, flushed: 3 * mb, done: false},         // catching up
	} {
		if got := handoffDone(tc.active, tc.flushed); got != tc.done {
			t.Errorf("handoffDone(%d, %d) = %v, want %v", tc.active, tc.flushed, got, tc.done)
		}
	}
}

// heldSaves holds every state save while held is open, telling saving
// when one waits: an object store that stopped answering.
type heldSaves struct {
	StateStore
	mu      sync.Mutex
	hold    chan struct{} // nil: saves go through
	waiting chan struct{}
}

func (h *heldSaves) Save(ctx context.Context, st tabletdesc.State) error {
	h.mu.Lock()
	hold := h.hold
	h.mu.Unlock()
	if hold != nil {
		select {
		case h.waiting <- struct{}{}:
		default:
		}
		<-hold
	}
	return h.StateStore.Save(ctx, st)
}

// TestStateDoesNotWaitForASave: State answers while a flush's state save
// hangs (the object store paused). It waited for the save — the
// master's List of the server, which reads every tablet's State, timed
// out, and the master ended the sessions of servers that were only
// flushing: a fault campaign's MinIO pause of 7 s stopped two of three.
func TestStateDoesNotWaitForASave(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	saves := &heldSaves{StateStore: NewBlobStateStore(store, "state"), waiting: make(chan struct{}, 1)}
	tb, err := Open(ctx, Options{ID: "held", Store: store, Dir: "sst", StateStore: saves,
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	writeRows(t, tb, "a", 10)
	before := tb.State()
	release := make(chan struct{})
	saves.mu.Lock()
	saves.hold = release
	saves.mu.Unlock()
	flushed := make(chan error, 1)
	go func() { flushed <- tb.Flush(ctx) }()
	<-saves.waiting // the flush's save hangs
	got := make(chan tabletdesc.State, 1)
	go func() { got <- tb.State() }()
	select {
	case st := <-got:
		if st.FlushedSeq != before.FlushedSeq {
			t.Fatalf("State during the save: flushed seq %d, want the last saved state's %d", st.FlushedSeq, before.FlushedSeq)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("State waited for a flush's state save")
	}
	saves.mu.Lock()
	saves.hold = nil
	saves.mu.Unlock()
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if st := tb.State(); st.FlushedSeq == before.FlushedSeq {
		t.Fatalf("State after the flush: flushed seq %d unchanged", st.FlushedSeq)
	}
}
