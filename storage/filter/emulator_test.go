package filter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	"github.com/tabuladb/tabula/storage/cell"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// TestDifferentialAgainstEmulator writes random rows into the official
// emulator (bttest), then reads them back through random filters and checks
// that Apply over the same rows gives the same cells, values and labels.
//
// Filters the official Go client can express are sent through it; the others
// (open start or closed end bounds of ranges, a condition without predicate)
// go through the generated gRPC stub of the same API. The generator avoids
// the places where the emulator is known to differ from Cloud Bigtable or to
// be non-deterministic (see generator.emulatorSafe). Some values are not
// UTF-8: both sides match regexes over bytes (RE2's Latin-1 mode).
// Copies of one cell (same column and timestamp) are compared as a multiset:
// their mutual order is unspecified in Cloud Bigtable and random in the
// emulator.
func TestDifferentialAgainstEmulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	lis := bufconn.Listen(1 << 20)
	srv, err := bttest.NewServerWithListener(lis)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The emulator only closes listeners it opened, and its Close
		// waits for Serve to return, so close ours first.
		lis.Close()
		srv.Close()
	}()
	conn, err := grpc.NewClient("passthrough:///bttest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	const project, instance, table = "p", "i", "t"
	admin, err := bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	// One at a time and in name order: the emulator returns families in
	// creation order.
	for _, fam := range genFamilies {
		if err := admin.CreateColumnFamily(ctx, table, fam); err != nil {
			t.Fatal(err)
		}
	}
	client, err := bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	tbl := client.Open(table)
	stub := bigtablepb.NewBigtableClient(conn)
	tableName := fmt.Sprintf("projects/%s/instances/%s/tables/%s", project, instance, table)

	r := rand.New(rand.NewPCG(7, 11))
	var rows []cell.Row
	keys := map[string]bool{}
	for len(rows) < 40 {
		key := "r"
		for range 1 + r.IntN(3) {
			key += pick(r, []string{"a", "b"})
		}
		if keys[key] {
			key += fmt.Sprint(len(rows))
		}
		keys[key] = true
		rows = append(rows, randomRow(r, key, 10))
	}
	slices.SortFunc(rows, func(a, b cell.Row) int { return bytes.Compare(a.Key, b.Key) })
	var rowKeys []string
	var muts []*bigtable.Mutation
	for _, row := range rows {
		m := bigtable.NewMutation()
		for _, x := range row.Cells {
			m.Set(x.Family, string(x.Qualifier), bigtable.Timestamp(x.Timestamp), x.Value)
		}
		rowKeys = append(rowKeys, string(row.Key))
		muts = append(muts, m)
	}
	errs, err := tbl.ApplyBulk(ctx, rowKeys, muts)
	if err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}

	g := &generator{r: r, emulatorSafe: true, maxDepth: 3}
	viaClient, viaStub, nonEmpty := 0, 0, 0
	deadline := time.Now().Add(8 * time.Second)
	for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
		pb, _, _ := g.filter(0, genState{}, false, false)
		f, err := Compile(pb, Limits{})
		if err != nil {
			t.Fatalf("generated filter %v: %v", pb, err)
		}
		want := map[string][]string{}
		for _, row := range rows {
			if out := f.Apply(row); len(out) > 0 {
				want[string(row.Key)] = canonical(format(out))
			}
		}
		var got map[string][]string
		if cf, ok := toClientFilter(pb); ok {
			viaClient++
			got = readWithClient(ctx, t, tbl, cf)
		} else {
			viaStub++
			got = readWithStub(ctx, t, stub, tableName, pb)
		}
		if len(want) > 0 {
			nonEmpty++
		}
		for _, key := range rowKeys {
			if !slices.Equal(got[key], want[key]) {
				t.Fatalf("filter %v\nrow %q\nemulator: %q\nApply:    %q", pb, key, got[key], want[key])
			}
		}
	}
	t.Logf("%d filters via the official client, %d via the gRPC stub, %d with output", viaClient, viaStub, nonEmpty)
	if viaClient < 100 || viaStub < 20 || nonEmpty < 50 {
		t.Errorf("too few filters compared: %d via client, %d via stub, %d with output", viaClient, viaStub, nonEmpty)
	}
}

// canonical sorts copies of one cell (same column and timestamp, adjacent in
// row order) by their rendering, leaving the row order alone.
func canonical(cells []string) []string {
	out := slices.Clone(cells)
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && cellKey(out[j]) == cellKey(out[i]) {
			j++
		}
		slices.Sort(out[i:j])
		i = j
	}
	return out
}

// cellKey is the "family:qualifier@ts" part of a formatted cell.
func cellKey(s string) string {
	return s[:strings.IndexByte(s, '=')]
}

func readWithClient(ctx context.Context, t *testing.T, tbl *bigtable.Table, f bigtable.Filter) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(row bigtable.Row) bool {
		var cells []LabeledCell
		for _, items := range row {
			for _, it := range items {
				fam, qual, _ := strings.Cut(it.Column, ":")
				cells = append(cells, LabeledCell{Cell: cell.Cell{
					Family: fam, Qualifier: []byte(qual), Timestamp: int64(it.Timestamp), Value: it.Value,
				}, Labels: it.Labels})
			}
		}
		// The client groups cells by family in a map; put the families
		// back in order (a stable sort keeps each family's cells as sent).
		slices.SortStableFunc(cells, func(a, b LabeledCell) int { return strings.Compare(a.Family, b.Family) })
		got[row.Key()] = canonical(format(cells))
		return true
	}, bigtable.RowFilter(f))
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	return got
}

func readWithStub(ctx context.Context, t *testing.T, stub bigtablepb.BigtableClient, table string, f *bigtablepb.RowFilter) map[string][]string {
	t.Helper()
	stream, err := stub.ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: table, Filter: f})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]LabeledCell{}
	var key, fam string
	var qual []byte
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadRows: %v", err)
		}
		// The emulator never splits a cell across chunks; a chunk only
		// repeats the key, family and qualifier when they change.
		for _, ch := range resp.Chunks {
			if len(ch.RowKey) > 0 {
				key = string(ch.RowKey)
			}
			if ch.FamilyName != nil {
				fam = ch.FamilyName.Value
			}
			if ch.Qualifier != nil {
				qual = ch.Qualifier.Value
			}
			rows[key] = append(rows[key], LabeledCell{Cell: cell.Cell{
				Family: fam, Qualifier: qual, Timestamp: ch.TimestampMicros, Value: ch.Value,
			}, Labels: ch.Labels})
		}
	}
	got := map[string][]string{}
	for k, cells := range rows {
		slices.SortStableFunc(cells, func(a, b LabeledCell) int { return strings.Compare(a.Family, b.Family) })
		got[k] = canonical(format(cells))
	}
	return got
}

// toClientFilter expresses a RowFilter with the official client's filter
// constructors, if they can.
func toClientFilter(f *bigtablepb.RowFilter) (bigtable.Filter, bool) {
	subs := func(fs []*bigtablepb.RowFilter) ([]bigtable.Filter, bool) {
		out := make([]bigtable.Filter, len(fs))
		for i, sf := range fs {
			var ok bool
			if out[i], ok = toClientFilter(sf); !ok {
				return nil, false
			}
		}
		return out, true
	}
	switch x := f.Filter.(type) {
	case *bigtablepb.RowFilter_Chain_:
		s, ok := subs(x.Chain.Filters)
		return bigtable.ChainFilters(s...), ok
	case *bigtablepb.RowFilter_Interleave_:
		s, ok := subs(x.Interleave.Filters)
		return bigtable.InterleaveFilters(s...), ok
	case *bigtablepb.RowFilter_Condition_:
		if x.Condition.PredicateFilter == nil {
			return nil, false
		}
		pred, ok := toClientFilter(x.Condition.PredicateFilter)
		if !ok {
			return nil, false
		}
		var branches [2]bigtable.Filter
		for i, b := range []*bigtablepb.RowFilter{x.Condition.TrueFilter, x.Condition.FalseFilter} {
			if b != nil {
				if branches[i], ok = toClientFilter(b); !ok {
					return nil, false
				}
			}
		}
		return bigtable.ConditionFilter(pred, branches[0], branches[1]), true
	case *bigtablepb.RowFilter_PassAllFilter:
		return bigtable.PassAllFilter(), true
	case *bigtablepb.RowFilter_BlockAllFilter:
		return bigtable.BlockAllFilter(), true
	case *bigtablepb.RowFilter_RowKeyRegexFilter:
		return bigtable.RowKeyFilter(string(x.RowKeyRegexFilter)), true
	case *bigtablepb.RowFilter_FamilyNameRegexFilter:
		return bigtable.FamilyFilter(x.FamilyNameRegexFilter), true
	case *bigtablepb.RowFilter_ColumnQualifierRegexFilter:
		return bigtable.ColumnFilter(string(x.ColumnQualifierRegexFilter)), true
	case *bigtablepb.RowFilter_ValueRegexFilter:
		return bigtable.ValueFilter(string(x.ValueRegexFilter)), true
	case *bigtablepb.RowFilter_ColumnRangeFilter:
		// The client sends a closed start and an open end only.
		r := x.ColumnRangeFilter
		var start, end string
		switch s := r.StartQualifier.(type) {
		case *bigtablepb.ColumnRange_StartQualifierClosed:
			start = string(s.StartQualifierClosed)
		case nil:
		default:
			return nil, false
		}
		switch e := r.EndQualifier.(type) {
		case *bigtablepb.ColumnRange_EndQualifierOpen:
			end = string(e.EndQualifierOpen)
		case nil:
		default:
			return nil, false
		}
		return bigtable.ColumnRangeFilter(r.FamilyName, start, end), true
	case *bigtablepb.RowFilter_ValueRangeFilter:
		r := x.ValueRangeFilter
		var start, end []byte
		switch s := r.StartValue.(type) {
		case *bigtablepb.ValueRange_StartValueClosed:
			start = s.StartValueClosed
		case nil:
		default:
			return nil, false
		}
		switch e := r.EndValue.(type) {
		case *bigtablepb.ValueRange_EndValueOpen:
			end = e.EndValueOpen
		case nil:
		default:
			return nil, false
		}
		return bigtable.ValueRangeFilter(start, end), true
	case *bigtablepb.RowFilter_TimestampRangeFilter:
		r := x.TimestampRangeFilter
		return bigtable.TimestampRangeFilterMicros(bigtable.Timestamp(r.StartTimestampMicros), bigtable.Timestamp(r.EndTimestampMicros)), true
	case *bigtablepb.RowFilter_CellsPerRowOffsetFilter:
		return bigtable.CellsPerRowOffsetFilter(int(x.CellsPerRowOffsetFilter)), true
	case *bigtablepb.RowFilter_CellsPerRowLimitFilter:
		return bigtable.CellsPerRowLimitFilter(int(x.CellsPerRowLimitFilter)), true
	case *bigtablepb.RowFilter_CellsPerColumnLimitFilter:
		return bigtable.LatestNFilter(int(x.CellsPerColumnLimitFilter)), true
	case *bigtablepb.RowFilter_StripValueTransformer:
		return bigtable.StripValueFilter(), true
	case *bigtablepb.RowFilter_ApplyLabelTransformer:
		return bigtable.LabelFilter(x.ApplyLabelTransformer), true
	}
	return nil, false
}
