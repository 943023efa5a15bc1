package tabletserver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// childSavesHeld holds the state saves of parent's split children (the
// states naming parent as theirs) until release is closed, telling held
// when the first waits: the split stands between its stop and its
// children's opening, the parent turning writes away.
type childSavesHeld struct {
	tablet.StateStore
	parent  string
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (c *childSavesHeld) Save(ctx context.Context, st tabletdesc.State) error {
	if st.Parent == c.parent && st.ID != c.parent {
		c.once.Do(func() { close(c.held) })
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.StateStore.Save(ctx, st)
}

// TestBulkWriteTurnedAwayBySplitGoesAgainInBatches: the entries of a
// MutateRows that meet a tablet as it splits are applied, once the
// children serve, in one batch per child — one commit-log flush each —
// not one by one, each waiting for a flush of its own (in a one-server
// cluster, whose log is in MinIO, a hundred entries took 600 ms: the
// p99 of `tabula bench`'s round with the split).
func TestBulkWriteTurnedAwayBySplitGoesAgainInBatches(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	states := &childSavesHeld{StateStore: tablet.NewBlobStateStore(store, "state"), parent: "bs-1",
		held: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-states.release:
		default:
			close(states.release)
		}
	}()
	var lg *commitlog.Log
	h, _ := newPartialHost(t, store, false, func(o *HostOptions) { o.StateStore = states; lg = o.Log })
	tbl := partialTable("bs")
	loadAll(t, h, tbl, ReplayLog{}, 0, 1, 2)
	for _, r := range []string{"ia", "ka", "ma", "oa"} { // rows on both sides of the split
		if err := putRow(h, tbl.ID, r); err != nil {
			t.Fatal(err)
		}
	}

	split := make(chan error, 1)
	go func() { split <- h.SplitTablet(ctx, tbl.ID, "bs-1") }()
	<-states.held // bs-1 has stopped; its children are not open yet

	const n = 100
	rms := make([]cell.RowMutation, n)
	for i := range rms {
		row := fmt.Appendf(nil, "%c%03d", "ijklmno"[i%7], i) // in [h, p): bs-1's rows
		rms[i] = cell.RowMutation{Row: row, Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}
	}
	errs := make([]error, n)
	written := make(chan error, 1)
	go func() { written <- h.applyBatch(ctx, tbl.ID, rms, errs) }()
	// Let the split go on once the whole batch was turned away (the
	// count of turned-away entries is the test's premise).
	for counterValue(t, h.metrics.writesTurnedAway) < n {
		select {
		case err := <-written:
			t.Fatalf("the batch finished (%v) before the split did, turned away %v times", err, counterValue(t, h.metrics.writesTurnedAway))
		default:
		}
		runtimeYield()
	}
	before := lg.Stats().Flushes
	close(states.release)
	if err := <-split; err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("entry %d (row %s): %v", i, rms[i].Row, err)
		}
	}
	if flushes := lg.Stats().Flushes - before; flushes > 4 {
		t.Fatalf("the %d turned-away entries took %d commit-log flushes once the children served; want one batch per child (at most 2, and what the children's opening writes)", n, flushes)
	}
	for _, rm := range rms {
		r, ok, err := h.readRow(ctx, tbl.ID, rm.Row, tablet.ReadOptions{})
		if err != nil || !ok || len(r.Cells) != 1 {
			t.Fatalf("row %s after the split: %+v, %v, %v", rm.Row, r, ok, err)
		}
	}
}

// runtimeYield lets other goroutines run while a test polls.
func runtimeYield() { time.Sleep(time.Millisecond) }
