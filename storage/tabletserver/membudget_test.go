package tabletserver

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
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
	val := make([]byte, 1000)
	const rows = 4000 // about 4 MB over the eight tablets
	for start := 0; start < rows; start += 100 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+100; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "v", bigtable.Timestamp(1000), val)
			keys = append(keys, fmt.Sprintf("k%d-%05d", i%8, i))
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
			t.Fatalf("ApplyBulk: %v %v", err, errs)
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
