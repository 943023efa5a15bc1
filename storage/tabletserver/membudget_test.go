package tabletserver

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tablet"
)

func TestBudgetFlushes(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name   string
		uses   []memtableUse
		budget int64
		want   []int
	}{
		{name: "within budget", uses: []memtableUse{{active: 40 * mib}, {active: 60 * mib}}, budget: 100 * mib},
		{name: "no budget", uses: []memtableUse{{active: 400 * mib}}, budget: 0},
		{name: "negative budget", uses: []memtableUse{{active: 400 * mib}}, budget: -1},
		// 110 MiB against 100: the largest (50) brings it to 60, under 90.
		{name: "largest first", uses: []memtableUse{{active: 20 * mib}, {active: 50 * mib}, {active: 40 * mib}}, budget: 100 * mib, want: []int{1}},
		// 150 against 100: 50 and 45 leave 55; 50 alone leaves 100 > 90.
		{name: "until under the low mark", uses: []memtableUse{{active: 50 * mib}, {active: 45 * mib}, {active: 30 * mib}, {active: 25 * mib}}, budget: 100 * mib, want: []int{0, 1}},
		// 95 of 130 are being flushed already: 35 remain, under 90.
		{name: "flushes under way count as freed", uses: []memtableUse{{active: 10 * mib, frozen: 95 * mib}, {active: 25 * mib}}, budget: 100 * mib},
		// A flushing tablet is no candidate, however large its active one.
		{name: "a flushing tablet is skipped", uses: []memtableUse{{active: 80 * mib, frozen: 10 * mib}, {active: 30 * mib}}, budget: 100 * mib, want: []int{1}},
		{name: "empty memtables are skipped", uses: []memtableUse{{}, {active: 120 * mib}, {}}, budget: 100 * mib, want: []int{1}},
		// Every candidate, and still over: the next check finds the rest.
		{name: "all candidates", uses: []memtableUse{{active: 200 * mib, frozen: 1}, {active: 30 * mib}, {active: 20 * mib}}, budget: 100 * mib, want: []int{1, 2}},
		{name: "ties keep tablet order", uses: []memtableUse{{active: 60 * mib}, {active: 60 * mib}}, budget: 100 * mib, want: []int{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := budgetFlushes(tc.uses, tc.budget); !slices.Equal(got, tc.want) {
				t.Fatalf("budgetFlushes = %v, want %v", got, tc.want)
			}
		})
	}
}

// writeKiBRows writes a 1000-byte cell f:v into each of rows with one
// MutateRows: the request's error, or the first failed entry's.
func writeKiBRows(ctx context.Context, tbl *bigtable.Table, rows []string) error {
	val := make([]byte, 1000)
	muts := make([]*bigtable.Mutation, len(rows))
	for i := range rows {
		muts[i] = bigtable.NewMutation()
		muts[i].Set("f", "v", bigtable.Timestamp(1000), val)
	}
	errs, err := tbl.ApplyBulk(ctx, rows, muts)
	if err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestMemtableBudgetFlushesTheLargest writes into eight tablets whose own
// memtables never fill (64 MiB each) on a host whose budget is 1 MiB: the
// background loop flushes the largest memtables early, the memtables of
// all tablets together come back under the budget, and every row reads
// back.
func TestMemtableBudgetFlushesTheLargest(t *testing.T) {
	const budget = 1 << 20
	e := newTestEnv(t, HostOptions{MemtableBytes: 64 << 20, MemtableBudget: budget}, DataOptions{})
	var splits []string
	for i := 1; i < 8; i++ {
		splits = append(splits, fmt.Sprintf("k%d", i))
	}
	tbl := e.createTable(tableDef{name: "budget", families: []string{"f"}, splits: splits})
	const rows = 4000 // about 4 MB over the eight tablets
	for start := 0; start < rows; start += 100 {
		var keys []string
		for i := start; i < start+100; i++ {
			keys = append(keys, fmt.Sprintf("k%d-%05d", i%8, i))
		}
		if err := writeKiBRows(e.ctx, tbl, keys); err != nil {
			t.Fatal(err)
		}
	}
	memtables := func() (total int64, flushes uint64) {
		st, err := e.host.table(e.tableMeta(tableDef{name: "budget"}).ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range st.list() {
			a, f := tb.MemtableBytes()
			total += a + f
			flushes += tb.Stats().Flushes
		}
		return total, flushes
	}
	deadline := time.Now().Add(30 * time.Second)
	total, flushes := memtables()
	for total > budget && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		total, flushes = memtables()
	}
	if total > budget {
		t.Fatalf("the memtables hold %d bytes after 30 s, over the %d-byte budget (%d flushes)", total, budget, flushes)
	}
	if flushes == 0 {
		t.Fatal("no tablet flushed, yet 4 MB were written against a 1 MiB budget")
	}
	if got := counterValue(t, e.host.metrics.budgetFlushes); got < 1 {
		t.Fatalf("tabula_memtable_budget_flushes_total = %v, want at least 1", got)
	}
	n := 0
	if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != rows {
		t.Fatalf("read %d rows back, want %d", n, rows)
	}
}

// createGatedStore holds every new object (SSTables: the flushes) until
// release is closed.
type createGatedStore struct {
	blob.Store
	release chan struct{}
}

func (s *createGatedStore) Create(ctx context.Context, name string) (blob.Writer, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Create(ctx, name)
}

// TestMemtableBudgetHoldsWritesBack stalls every flush, then fills the
// memtables to more than twice a 1 MiB budget: the next writes wait (and
// one whose deadline passes first fails and changes nothing), and once
// the flushes may go on the waiting write is applied.
func TestMemtableBudgetHoldsWritesBack(t *testing.T) {
	const budget = 1 << 20
	mem := blob.NewMemory()
	store := &createGatedStore{Store: mem, release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	defer release()
	e := newTestEnv(t, HostOptions{Store: store, StateStore: tablet.NewBlobStateStore(mem, "state"),
		MemtableBytes: 64 << 20, MemtableBudget: budget}, DataOptions{})
	tbl := e.createTable(tableDef{name: "held", families: []string{"f"}, splits: []string{"k"}})
	bulk := func(ctx context.Context, prefix string, n int) error {
		var keys []string
		for i := range n {
			keys = append(keys, fmt.Sprintf("%s%05d", prefix, i))
		}
		return writeKiBRows(ctx, tbl, keys)
	}
	// 2.5 MB in one request: admitted whole, the gate being open.
	if err := bulk(e.ctx, "a", 2500); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !e.host.gate.isShut() {
		if time.Now().After(deadline) {
			t.Fatal("the memtables hold over twice the budget, and writes are still let through after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A write whose deadline passes while it waits: an error, nothing applied.
	short, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	err := bulk(short, "late", 1)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a write held back past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	// A write that waits: not applied while the flushes stall.
	done := make(chan error, 1)
	go func() { done <- bulk(e.ctx, "b", 10) }()
	select {
	case err := <-done:
		t.Fatalf("a write went through while the memtables held over twice the budget (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the held-back write, once the flushes went on: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held-back write still waits 30 s after the flushes were let go")
	}
	if e.host.gate.isShut() {
		t.Fatal("the gate is still shut after the held-back write went through")
	}
	if got := counterValue(t, e.host.metrics.budgetWaits); got < 2 {
		t.Fatalf("tabula_memtable_budget_write_waits_total = %v, want at least 2", got)
	}
	if row, err := tbl.ReadRow(e.ctx, "late00000"); err != nil || len(row) != 0 {
		t.Fatalf("the write that timed out while held back: row %v, err %v; want no row", row, err)
	}
	n := 0
	if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 2510 {
		t.Fatalf("read %d rows back, want 2510", n)
	}
}
