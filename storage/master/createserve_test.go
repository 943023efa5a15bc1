package master

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// loadingHost is a TableHost that serves a new table's tablets as a
// cluster does: OpenTable only records them (the METADATA rows), and a
// loader — the assignment loop and the tablet servers — loads them one by
// one afterwards, each taking loadEach; until a tablet is loaded, a
// request for one of its rows answers "not serving". It is a
// ServingWaiter. stuck keeps the loader from loading anything.
type loadingHost struct {
	*fakeTableHost
	loadEach time.Duration

	mu      sync.Mutex
	stuck   bool
	tablets map[meta.TableID][]meta.TabletRef
	loaded  map[string]bool // by tablet ID
	changed chan struct{}   // closed and replaced at each load
}

func newLoadingHost(loadEach time.Duration) *loadingHost {
	return &loadingHost{fakeTableHost: newFakeTableHost(), loadEach: loadEach,
		tablets: map[meta.TableID][]meta.TabletRef{}, loaded: map[string]bool{}, changed: make(chan struct{})}
}

func (h *loadingHost) OpenTable(ctx context.Context, t meta.Table) error {
	if err := h.fakeTableHost.OpenTable(ctx, t); err != nil {
		return err
	}
	h.mu.Lock()
	h.tablets[t.ID] = t.Tablets
	stuck := h.stuck
	h.mu.Unlock()
	if !stuck {
		go h.load(t.Tablets)
	}
	return nil
}

// load loads tablets in turn, as the servers would after the master's
// next round.
func (h *loadingHost) load(tablets []meta.TabletRef) {
	for _, r := range tablets {
		time.Sleep(h.loadEach)
		h.mu.Lock()
		h.loaded[r.ID] = true
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
	}
}

func (h *loadingHost) DropTable(ctx context.Context, t meta.Table) error {
	h.mu.Lock()
	delete(h.tablets, t.ID)
	h.mu.Unlock()
	return h.fakeTableHost.DropTable(ctx, t)
}

// served reports whether every tablet of table is loaded, and returns
// the change signal to wait on when not.
func (h *loadingHost) served(id meta.TableID) (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tabs, ok := h.tablets[id]
	if !ok {
		return false, h.changed
	}
	for _, r := range tabs {
		if !h.loaded[r.ID] {
			return false, h.changed
		}
	}
	return true, nil
}

func (h *loadingHost) WaitServing(ctx context.Context, t meta.Table) error {
	for {
		ok, changed := h.served(t.ID)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// write is a data request for row of table: "not serving" unless the
// tablet holding the row is loaded.
func (h *loadingHost) write(id meta.TableID, row []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	tabs, ok := h.tablets[id]
	if !ok {
		return fmt.Errorf("table %s: %w", id, tabletdesc.ErrNotServing)
	}
	for _, r := range tabs {
		rg := tabletdesc.KeyRange{Start: r.Start, End: r.End}
		if rg.Contains(row) {
			if !h.loaded[r.ID] {
				return fmt.Errorf("tablet %s still loading: %w", r.ID, tabletdesc.ErrNotServing)
			}
			return nil
		}
	}
	return fmt.Errorf("no tablet of %s holds %q", id, row)
}

// newLoadingEnv is newEnvOn with h as the Host.
func newLoadingEnv(t *testing.T, h *loadingHost, opts Options) *env {
	t.Helper()
	opts.Host = h
	return newEnvOn(t, blob.NewMemory(), h.fakeTableHost, opts)
}

// TestCreateTableReturnsOnceServed: with a host that loads a new table's
// tablets after OpenTable (a cluster), CreateTable with many split keys
// returns only once every tablet is loaded, so that a write to any row
// sent right after it succeeds. Before, CreateTable returned as soon as
// the METADATA rows were written, and writes met tablets still loading.
func TestCreateTableReturnsOnceServed(t *testing.T) {
	h := newLoadingHost(5 * time.Millisecond)
	e := newLoadingEnv(t, h, Options{})
	var splits []string
	for i := 1; i < 16; i++ {
		splits = append(splits, fmt.Sprintf("k%02d", i))
	}
	for round := range 3 {
		name := fmt.Sprintf("t%d", round)
		if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: name, SplitKeys: splits}); err != nil {
			t.Fatal(err)
		}
		// At once: a row of every tablet, and the rows around each split.
		id := meta.TableID{Instance: testInstance, Table: name}
		rows := [][]byte{{}, []byte("a"), []byte("zzz")}
		for _, s := range splits {
			rows = append(rows, []byte(s), append([]byte(s), 0), []byte(s[:len(s)-1]))
		}
		for _, row := range rows {
			if err := h.write(id, row); err != nil {
				t.Fatalf("round %d: a write to row %q right after CreateTable returned: %v", round, row, err)
			}
		}
		tbl, err := e.catalog.Get(e.ctx, id)
		if err != nil || len(tbl.Tablets) != len(splits)+1 {
			t.Fatalf("round %d: the catalog has %d tablets (%v), want %d", round, len(tbl.Tablets), err, len(splits)+1)
		}
	}
}

// TestCreateTableUndoneWhenNotServed: tablets that are not served within
// ServeTimeout make CreateTable UNAVAILABLE, naming the table; the
// creation is undone (the table does not exist, its tablets were
// dropped), and the table can be created once the servers load again.
func TestCreateTableUndoneWhenNotServed(t *testing.T) {
	h := newLoadingHost(time.Millisecond)
	h.stuck = true
	e := newLoadingEnv(t, h, Options{ServeTimeout: 50 * time.Millisecond})
	err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "slow", SplitKeys: []string{"m"}})
	wantCode(t, "create with tablets never served", err, codes.Unavailable)
	if !strings.Contains(err.Error(), tableFullName("slow")) || !strings.Contains(err.Error(), "not created") {
		t.Fatalf("the error does not name the table and say it was not created: %v", err)
	}
	_, err = e.admin.TableInfo(e.ctx, "slow")
	wantCode(t, "TableInfo after the undone create", err, codes.NotFound)
	calls := e.control.Calls()
	if len(calls) != 2 || !strings.HasPrefix(calls[0], "OpenTable") || !strings.HasPrefix(calls[1], "DropTable") {
		t.Fatalf("calls %v: want OpenTable then DropTable", calls)
	}

	h.mu.Lock()
	h.stuck = false
	h.mu.Unlock()
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "slow", SplitKeys: []string{"m"}}); err != nil {
		t.Fatalf("create once the servers load: %v", err)
	}
	for _, row := range []string{"a", "m", "z"} {
		if err := h.write(meta.TableID{Instance: testInstance, Table: "slow"}, []byte(row)); err != nil {
			t.Fatalf("write %q: %v", row, err)
		}
	}
}

// TestCreateTableServedHostNeedsNoWait: a host that serves the table in
// OpenTable (not a ServingWaiter) is not waited for.
func TestCreateTableServedHostNeedsNoWait(t *testing.T) {
	e := newEnvOn(t, blob.NewMemory(), newFakeTableHost(), Options{ServeTimeout: time.Nanosecond})
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.control.Open(meta.TableID{Instance: testInstance, Table: "t"}); !ok {
		t.Fatal("the table is not open")
	}
}
