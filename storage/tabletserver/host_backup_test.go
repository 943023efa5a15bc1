package tabletserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// stallingStates blocks the first state Load after it is armed until
// released: a split's children load their states while the parent, closed,
// still stands in the table's list.
type stallingStates struct {
	tablet.StateStore
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (s *stallingStates) Load(ctx context.Context, id string) (tabletdesc.State, error) {
	s.mu.Lock()
	stall := s.armed
	s.armed = false
	s.mu.Unlock()
	if stall {
		close(s.entered)
		<-s.release
	}
	return s.StateStore.Load(ctx, id)
}

// TestFlushTableStatesWaitsForASplit: a backup's flush of a table that
// meets a split between its parent closing and its children opening waits
// for the split and returns states covering the table, where it used to
// retry at once, find the closed parent every time and fail.
func TestFlushTableStatesWaitsForASplit(t *testing.T) {
	store := blob.NewMemory()
	states := &stallingStates{StateStore: tablet.NewBlobStateStore(store, "state"),
		entered: make(chan struct{}), release: make(chan struct{})}
	e := newTestEnv(t, HostOptions{Store: store, StateStore: states, SplitCheckInterval: time.Hour}, DataOptions{})
	d := tableDef{name: "bk", families: []string{"f"}, splits: []string{"m"}}
	tbl := e.createTable(d)
	for _, k := range []string{"a", "c", "e", "g", "n", "z"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", ts(1), []byte(k))
		if err := tbl.Apply(e.ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	tm := e.tableMeta(d)
	// Registered after the env's cleanup, so it runs first: a failing
	// test does not leave the split, and the Host's Close, stuck.
	release := sync.OnceFunc(func() { close(states.release) })
	t.Cleanup(release)

	states.mu.Lock()
	states.armed = true
	states.mu.Unlock()
	splitErr := make(chan error, 1)
	go func() { splitErr <- e.host.SplitTablet(e.ctx, tm.ID, "bk-0") }()
	<-states.entered

	flushed := make(chan error, 1)
	var got []tabletdesc.State
	go func() {
		var err error
		got, err = e.host.FlushTableStates(e.ctx, tm)
		flushed <- err
	}()
	// The flush must still be waiting well past its old retries' span.
	select {
	case err := <-flushed:
		t.Fatalf("FlushTableStates returned while the split was stalled: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-splitErr; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatalf("FlushTableStates across a split: %v", err)
	}
	if len(got) != 3 || !coversTable(got) {
		t.Fatalf("%d states after the split (covering the table: %v), want the 3 tablets", len(got), coversTable(got))
	}
}
