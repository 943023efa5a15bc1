package tablet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// firstSleeperGate is a pacing.Config.Sleep that holds the first caller
// to sleep until released and lets every other through at once.
type firstSleeperGate struct {
	mu       sync.Mutex
	taken    bool
	sleeping chan struct{}
	release  chan struct{}
	once     sync.Once
}

func (g *firstSleeperGate) sleep(ctx context.Context, d time.Duration) error {
	g.mu.Lock()
	first := !g.taken
	g.taken = true
	g.mu.Unlock()
	if !first {
		return nil
	}
	close(g.sleeping)
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *firstSleeperGate) open() { g.once.Do(func() { close(g.release) }) }

// TestFlushRunsBesideAMerge: while a background merge is held in the
// pacer (its server busy), State answers at once and the memtable that
// fills meanwhile is flushed all the same, and the merge, let go, installs its output where its
// inputs are — after the flush's newer file — in the saved state and the
// version both. Before flushes had a lock of their own, the flush waited
// for the merge (and hurried it, unpaced, into the foreground's time).
func TestFlushRunsBesideAMerge(t *testing.T) {
	ctx := context.Background()
	gate := &firstSleeperGate{sleeping: make(chan struct{}), release: make(chan struct{})}
	defer gate.open()
	p := pacing.New(pacing.Config{MinRate: 1 << 30, Quiet: time.Hour, Sleep: gate.sleep})
	p.Begin() // a request in flight for the whole test
	defer p.End()
	store := blob.NewMemory()
	opts := Options{ID: "beside", Store: store, Dir: "sst", StateStore: NewBlobStateStore(store, "state"),
		Schema:        tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
		MemtableBytes: 1 << 20, MaxSSTables: 2, Pacer: p}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Let a held merge go before closing: Close waits for it.
	defer func() { gate.open(); _ = tb.Close() }()

	// Three files of 400 KB, flushed by hand (unpaced): one over
	// MaxSSTables.
	val := make([]byte, 4<<10)
	for f := range 3 {
		for i := range 100 {
			if err := tb.Apply(ctx, cell.RowMutation{Row: fmt.Appendf(nil, "m%d-%03d", f, i), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, val)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tb.kickBackground()
	select {
	case <-gate.sleeping:
	case <-time.After(30 * time.Second):
		t.Fatal("the background merge never waited in the pacer")
	}
	flushes := tb.flushes.Load()

	// Reading the state waits for no merge: the master lists a server's
	// tablets (State) every round, with a deadline of its own.
	stateRead := make(chan tabletdesc.State, 1)
	go func() { stateRead <- tb.State() }()
	select {
	case st := <-stateRead:
		if n := len(st.Groups["default"]); n != 3 {
			t.Fatalf("the state read during the merge has %d files, want the 3 being merged", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("State waited for the merge held in the pacer")
	}

	// The memtable fills while the merge waits: it is flushed anyway.
	rows := fillMemtable(t, tb, 1<<20)
	deadline := time.Now().Add(30 * time.Second)
	for tb.flushes.Load() == flushes {
		if time.Now().After(deadline) {
			t.Fatal("no flush of a full memtable while a merge waited in the pacer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := tb.merges.Load(); n != 0 {
		t.Fatalf("%d merges finished while the merge was held", n)
	}

	gate.open()
	for tb.merges.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the merge never finished once let go")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tb.lockMaint() // no flush or merge under way
	st := tb.state.Clone()
	v, _, err := tb.acquire()
	if err != nil {
		t.Fatal(err)
	}
	var inVersion, inState []string
	for _, f := range v.groups["default"].files {
		inVersion = append(inVersion, f.meta.Name)
	}
	v.unref()
	for _, m := range st.Groups["default"] {
		inState = append(inState, m.Name)
	}
	want := scanString(t, tb)
	tb.unlockMaint()
	if !slices.Equal(inVersion, inState) {
		t.Fatalf("the version's files %v differ from the saved state's %v", inVersion, inState)
	}
	if len(inState) != 2 {
		t.Fatalf("files %v: want two, the flush's and the merge's", inState)
	}
	for f := range 3 {
		for _, i := range []int{0, 99} {
			if _, ok, err := tb.ReadRow(ctx, fmt.Appendf(nil, "m%d-%03d", f, i), ReadOptions{}); !ok || err != nil {
				t.Fatalf("row m%d-%03d after the merge: %v %v", f, i, ok, err)
			}
		}
	}
	for _, i := range []int{0, rows - 1} {
		if _, ok, err := tb.ReadRow(ctx, fmt.Appendf(nil, "r%05d", i), ReadOptions{}); !ok || err != nil {
			t.Fatalf("row r%05d flushed beside the merge: %v %v", i, ok, err)
		}
	}

	// What was saved is what was served.
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	opts.StateStore = NewBlobStateStore(store, "state")
	again, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = again.Close() }()
	if got := scanString(t, again); got != want {
		t.Fatalf("reopened from the saved state, the tablet reads differently:\n%s\nwant\n%s", got, want)
	}
}
