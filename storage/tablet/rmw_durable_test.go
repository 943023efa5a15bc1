package tablet

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// gatedStore holds the commit log's object writes (names under "log/")
// while closed, telling started when one waits: a slow log flush.
type gatedStore struct {
	blob.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	started chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, name string, data []byte) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil && strings.HasPrefix(name, "log/") {
		select {
		case g.started <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Put(ctx, name, data)
}

// valueOf returns the value of f:v in r, "" if none.
func valueOf(r cell.Row) string {
	for _, c := range r.Cells {
		if c.Family == "f" && string(c.Qualifier) == "v" {
			return string(c.Value)
		}
	}
	return ""
}

// TestReadModifyWriteWithoutMutationWaitsForWhatItRead is the campaign's
// compare-and-set anomaly (#15): a conditional mutation whose predicate
// did not match (so it writes nothing) answered at once, from a write
// still waiting for its commit log flush — while readers, who see only
// durable writes, still saw the old value after that answer. Now an
// answer that writes nothing waits for the writes it read, as a write
// would: the answer and every later read agree.
func TestReadModifyWriteWithoutMutationWaitsForWhatItRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := &gatedStore{Store: blob.NewMemory(), started: make(chan struct{}, 1)}
	logOpts := commitlog.Options{Store: store, Prefix: "log"}
	log, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	tb, err := Open(ctx, Options{ID: "cas", Store: store, Dir: "sst", Log: log, LogOptions: logOpts,
		StateStore: NewBlobStateStore(store, "state"),
		Schema:     tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	row := []byte("r")
	set := func(v string) []cell.Mutation {
		return []cell.Mutation{cell.Set("f", []byte("v"), cell.ServerTimestamp, []byte(v))}
	}
	if err := tb.Apply(ctx, cell.RowMutation{Row: row, Mutations: set("old")}); err != nil {
		t.Fatal(err)
	}

	// A compare-and-set old → new whose log flush hangs.
	gate := make(chan struct{})
	var openGate sync.Once
	defer openGate.Do(func() { close(gate) }) // before Close, which flushes
	store.mu.Lock()
	store.gate = gate
	store.mu.Unlock()
	casDone := make(chan error, 1)
	go func() {
		_, err := tb.ReadModifyWrite(ctx, row, func(cur cell.Row) ([]cell.Mutation, error) {
			if valueOf(cur) == "old" {
				return set("new"), nil
			}
			return nil, nil
		})
		casDone <- err
	}()
	select {
	case <-store.started:
	case <-ctx.Done():
		t.Fatal("the log flush never started")
	}

	// A second compare-and-set old → other: its predicate fails because
	// of the pending write.
	type answer struct {
		seen string
		err  error
	}
	second := make(chan answer, 1)
	go func() {
		var seen string
		_, err := tb.ReadModifyWrite(ctx, row, func(cur cell.Row) ([]cell.Mutation, error) {
			seen = valueOf(cur)
			if seen == "old" {
				return set("other"), nil
			}
			return nil, nil
		})
		second <- answer{seen, err}
	}()
	check := func(a answer) {
		t.Helper()
		if a.err != nil {
			t.Fatal(a.err)
		}
		r, _, err := tb.ReadRow(ctx, row, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := valueOf(r); got != a.seen {
			t.Fatalf("the compare-and-set answered from v=%q, but a read after its answer sees v=%q", a.seen, got)
		}
	}
	select {
	case a := <-second:
		// Answered while the write it read is not durable: a read
		// now must agree with it (it did not before the fix).
		check(a)
	case <-time.After(300 * time.Millisecond):
		// Still waiting for the flush, as it should.
	}
	openGate.Do(func() { close(gate) })
	if err := <-casDone; err != nil {
		t.Fatal(err)
	}
	a := <-second
	if a.seen != "new" {
		t.Fatalf("second compare-and-set read v=%q, want new", a.seen)
	}
	check(a)
}
