package tabletserver

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
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

// stalledSplit returns an env with table "bk" of tablets [, m) and [m, ),
// six rows, and a split of its first tablet stopped between the parent
// closing and the children opening (the children's state loads are held):
// release lets it finish, and splitErr then receives its result. A failing
// test releases it at cleanup, before the env closes.
func stalledSplit(t *testing.T) (e *testEnv, tm meta.Table, release func(), splitErr <-chan error) {
	t.Helper()
	store := blob.NewMemory()
	states := &stallingStates{StateStore: tablet.NewBlobStateStore(store, "state"),
		entered: make(chan struct{}), release: make(chan struct{})}
	e = newTestEnv(t, HostOptions{Store: store, StateStore: states, SplitCheckInterval: time.Hour}, DataOptions{})
	d := tableDef{name: "bk", families: []string{"f"}, splits: []string{"m"}}
	tbl := e.createTable(d)
	for _, k := range []string{"a", "c", "e", "g", "n", "z"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", ts(1), []byte(k))
		if err := tbl.Apply(e.ctx, k, m); err != nil {
			t.Fatal(err)
		}
	}
	tm = e.tableMeta(d)
	// Registered after the env's cleanup, so it runs first.
	release = sync.OnceFunc(func() { close(states.release) })
	t.Cleanup(release)

	states.mu.Lock()
	states.armed = true
	states.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- e.host.SplitTablet(e.ctx, tm.ID, "bk-0") }()
	<-states.entered
	return e, tm, release, errc
}

// TestFlushTableStatesWaitsForASplit: a backup's flush of a table that
// meets a split between its parent closing and its children opening waits
// for the split and returns states covering the table, where it used to
// retry at once, find the closed parent every time and fail.
func TestFlushTableStatesWaitsForASplit(t *testing.T) {
	e, tm, release, splitErr := stalledSplit(t)
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

// TestSampleRowKeysWaitsForASplit: SampleRowKeys that meets a split whose
// rows stay unserved for longer than 30 retries 2 ms apart (which it used
// to give up after, answering not serving) keeps backing off and answers
// once the children are open.
func TestSampleRowKeysWaitsForASplit(t *testing.T) {
	e, _, release, splitErr := stalledSplit(t)
	type answer struct {
		keys []string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		stream, err := e.stub.SampleRowKeys(e.ctx, &bigtablepb.SampleRowKeysRequest{TableName: tableName("bk")})
		for err == nil {
			var r *bigtablepb.SampleRowKeysResponse
			if r, err = stream.Recv(); err == nil {
				a.keys = append(a.keys, string(r.GetRowKey()))
			}
		}
		if err != io.EOF {
			a.err = err
		}
		answered <- a
	}()
	time.Sleep(150 * time.Millisecond) // more than the old 60 ms of retries
	release()
	if err := <-splitErr; err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil {
		t.Fatalf("SampleRowKeys across a split stalled for 150 ms: %v", a.err)
	}
	// At least the three tablets' ends: the boundary m among them, and
	// last the empty key.
	if n := len(a.keys); n < 3 || a.keys[n-1] != "" || !slices.Contains(a.keys, "m") {
		t.Fatalf("SampleRowKeys answered keys %q, want the three tablets' ends", a.keys)
	}
}
