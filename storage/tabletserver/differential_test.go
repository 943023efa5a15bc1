package tabletserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	diffFamilies = []string{"a", "b", "c"}
	diffQuals    = []string{"x", "y", "z"}
	diffValues   = []string{"v1", "v2", "ab", "b", ""}
)

// diffWorkload drives one table through the official client with a random
// workload decided by seed, and returns what every read and
// check-and-mutate observed, one line each. The same seed gives the same
// requests whatever the server.
func diffWorkload(t *testing.T, ctx context.Context, tbl *bigtable.Table, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 99))
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	row := func() string { return fmt.Sprintf("r%d", r.IntN(10)) }
	ms := func() bigtable.Timestamp { return bigtable.Timestamp(1000 * (1 + r.IntN(6))) }
	mutation := func() *bigtable.Mutation {
		m := bigtable.NewMutation()
		for range 1 + r.IntN(4) {
			switch k := r.IntN(20); {
			case k < 13:
				m.Set(pick(diffFamilies), pick(diffQuals), ms(), []byte(pick(diffValues)))
			case k < 15:
				m.DeleteCellsInColumn(pick(diffFamilies), pick(diffQuals))
			case k < 17:
				// An empty range [t, t) is refused by the emulator.
				lo, hi := ms(), bigtable.Timestamp(0) // 0: no upper bound
				if r.IntN(3) != 0 {
					hi = lo + bigtable.Timestamp(1000*(1+r.IntN(3)))
				}
				m.DeleteTimestampRange(pick(diffFamilies), pick(diffQuals), lo, hi)
			case k < 19:
				m.DeleteCellsInFamily(pick(diffFamilies))
			default:
				m.DeleteRow()
			}
		}
		return m
	}
	var out []string
	for op := range 300 {
		switch k := r.IntN(10); {
		case k < 4:
			if err := tbl.Apply(ctx, row(), mutation()); err != nil {
				t.Fatalf("op %d: apply: %v", op, err)
			}
		case k < 5:
			var keys []string
			var muts []*bigtable.Mutation
			for range 1 + r.IntN(5) {
				keys = append(keys, row())
				muts = append(muts, mutation())
			}
			if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
				t.Fatalf("op %d: bulk: %v %v", op, err, errs)
			}
		case k < 6:
			var matched bool
			var pred bigtable.Filter
			if r.IntN(5) != 0 {
				pred = diffFilter(r, 0)
			}
			key := row()
			cm := bigtable.NewCondMutation(pred, mutation(), mutation())
			if err := tbl.Apply(ctx, key, cm, bigtable.GetCondMutationResult(&matched)); err != nil {
				t.Fatalf("op %d: check and mutate: %v", op, err)
			}
			out = append(out, fmt.Sprintf("op %d: check-and-mutate %s %v: %v", op, key, pred, matched))
		default:
			var rs bigtable.RowSet
			switch r.IntN(5) {
			case 0:
				rs = bigtable.InfiniteRange("")
			case 1:
				rs = bigtable.RowList{row(), row(), row()}
			case 2:
				a, b := row(), row()
				if a > b {
					a, b = b, a
				}
				rs = bigtable.NewRange(a, b)
			case 3:
				rs = bigtable.PrefixRange(row()[:2])
			default:
				rs = bigtable.RowRangeList{bigtable.NewRange("r1", "r3"), bigtable.InfiniteRange(row())}
			}
			var opts []bigtable.ReadOption
			desc := fmt.Sprintf("%v", rs)
			if r.IntN(10) < 7 {
				f := diffFilter(r, 0)
				opts = append(opts, bigtable.RowFilter(f))
				desc += " filter " + f.String()
			}
			if r.IntN(5) == 0 {
				n := int64(1 + r.IntN(4))
				opts = append(opts, bigtable.LimitRows(n))
				desc += fmt.Sprintf(" limit %d", n)
			}
			if r.IntN(4) == 0 {
				opts = append(opts, bigtable.ReverseScan())
				desc += " reversed"
			}
			var rows []string
			err := tbl.ReadRows(ctx, rs, func(row bigtable.Row) bool {
				rows = append(rows, formatRowMultiset(row))
				return true
			}, opts...)
			if err != nil {
				t.Fatalf("op %d: read %s: %v", op, desc, err)
			}
			out = append(out, fmt.Sprintf("op %d: read %s: %s", op, desc, strings.Join(rows, " ")))
		}
	}
	return out
}

// formatRowMultiset renders a row with its cells sorted: copies of a cell
// that an interleave outputs have no specified order.
func formatRowMultiset(r bigtable.Row) string {
	var cells []string
	for _, items := range r {
		for _, it := range items {
			cells = append(cells, fmt.Sprintf("%s@%d=%s%v", it.Column, it.Timestamp, it.Value, it.Labels))
		}
	}
	slices.Sort(cells)
	return r.Key() + "{" + strings.Join(cells, " ") + "}"
}

// diffFilter returns a random filter among those the emulator evaluates as
// Cloud Bigtable does, deterministically: no labels, strips or row
// samples; per-row limits only over one family (the emulator walks
// families in map order).
func diffFilter(r *rand.Rand, depth int) bigtable.Filter {
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	if depth < 2 && r.IntN(3) == 0 {
		switch r.IntN(3) {
		case 0:
			return bigtable.ChainFilters(diffFilter(r, depth+1), diffFilter(r, depth+1))
		case 1:
			return bigtable.InterleaveFilters(diffFilter(r, depth+1), diffFilter(r, depth+1))
		default:
			return bigtable.ConditionFilter(diffFilter(r, depth+1), diffFilter(r, depth+1), diffFilter(r, depth+1))
		}
	}
	switch r.IntN(12) {
	case 0:
		return bigtable.FamilyFilter(pick([]string{"a", "b|c", "[ab]", "."}))
	case 1:
		return bigtable.ColumnFilter(pick([]string{"x", "y|z", ".*", "[xz]"}))
	case 2:
		return bigtable.ValueFilter(pick([]string{"v.", "a.*", "", ".*b", "v1|b"}))
	case 3:
		lo, hi := pick(diffQuals), pick(diffQuals)
		if lo > hi {
			lo, hi = hi, lo
		}
		return bigtable.ColumnRangeFilter(pick(diffFamilies), lo, hi)
	case 4:
		lo := bigtable.Timestamp(1000 * r.IntN(6))
		return bigtable.TimestampRangeFilterMicros(lo, lo+bigtable.Timestamp(1000*(1+r.IntN(4))))
	case 5:
		return bigtable.ValueRangeFilter([]byte(pick([]string{"", "a", "b"})), []byte(pick([]string{"v2", "w", "c"})))
	case 6:
		return bigtable.LatestNFilter(1 + r.IntN(3))
	case 7:
		return bigtable.RowKeyFilter(pick([]string{"r[1-4]", "r.", "r1|r7", ".*[05]"}))
	case 8:
		fam := bigtable.FamilyFilter(pick(diffFamilies))
		if r.IntN(2) == 0 {
			return bigtable.ChainFilters(fam, bigtable.CellsPerRowLimitFilter(1+r.IntN(3)))
		}
		return bigtable.ChainFilters(fam, bigtable.CellsPerRowOffsetFilter(1+r.IntN(2)))
	case 9:
		return bigtable.PassAllFilter()
	case 10:
		return bigtable.BlockAllFilter()
	default:
		return bigtable.ChainFilters(bigtable.FamilyFilter(pick(diffFamilies)), bigtable.ColumnFilter(pick(diffQuals)), bigtable.LatestNFilter(1))
	}
}

// TestDifferentialAgainstEmulator runs the same random workload through
// the same client code against the bttest emulator and against Tabula
// (three tablets, so reads cross tablets) and compares every observation.
func TestDifferentialAgainstEmulator(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	ctx := e.ctx
	tabula := e.createTable(tableDef{name: "d", families: diffFamilies, splits: []string{"r3", "r6"}})

	srv, err := bttest.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTable(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	for _, f := range diffFamilies { // in name order: the emulator keeps creation order
		if err := admin.CreateColumnFamily(ctx, "d", f); err != nil {
			t.Fatal(err)
		}
	}
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	emu := client.Open("d")

	for _, seed := range []uint64{1, 2, 3} {
		want := diffWorkload(t, ctx, emu, seed)
		got := diffWorkload(t, ctx, tabula, seed)
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d observations, emulator %d", seed, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d differs from the emulator:\n tabula:   %s\n emulator: %s", seed, got[i], want[i])
			}
		}
		nonEmpty, matched := 0, 0
		for _, o := range want {
			if strings.Contains(o, "}") {
				nonEmpty++
			}
			if strings.HasSuffix(o, ": true") {
				matched++
			}
		}
		// The workload must observe data, and both predicate outcomes,
		// for the agreement to mean something.
		if nonEmpty < 40 || matched == 0 {
			t.Fatalf("seed %d: dull workload: %d reads saw rows, %d predicates matched", seed, nonEmpty, matched)
		}
		t.Logf("seed %d: %d observations agree (%d reads saw rows, %d predicates matched)", seed, len(want), nonEmpty, matched)
	}
}
