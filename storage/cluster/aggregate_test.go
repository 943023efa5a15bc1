package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tabuladb/tabula/storage/cell"
)

// devClients returns the official admin and data clients of one
// connection to d.
func devClients(t *testing.T, ctx context.Context, d *Dev) (*bigtable.AdminClient, *bigtable.Client) {
	t.Helper()
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return clientsOn(t, ctx, conn)
}

// clientsOn returns the official admin and data clients of instance p/i
// over conn.
func clientsOn(t *testing.T, ctx context.Context, conn *grpc.ClientConn) (*bigtable.AdminClient, *bigtable.Client) {
	t.Helper()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	return admin, data
}

func int64BE(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func aggType(a bigtable.Aggregator) bigtable.Type {
	return bigtable.AggregateType{Input: bigtable.Int64Type{Encoding: bigtable.BigEndianBytesEncoding{}}, Aggregator: a}
}

// cellValue returns the value of the cell of fam:col at ts in r.
func cellValue(t *testing.T, r bigtable.Row, fam, col string, ts bigtable.Timestamp) []byte {
	t.Helper()
	for _, it := range r[fam] {
		if it.Column == fam+":"+col && it.Timestamp == ts {
			return it.Value
		}
	}
	t.Fatalf("no cell %s:%s@%d in %v", fam, col, ts, r)
	return nil
}

// wantCode checks that err is a status with code whose message names
// field (and matches the optional pattern).
func wantCode(t *testing.T, what string, err error, code codes.Code, field string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), field) {
		t.Errorf("%s: got %v, want %v naming %s", what, err, code, field)
	}
}

// TestDevAggregates drives aggregate column families through the official
// client: AddToCell and MergeToCell of each aggregator, in MutateRow,
// MutateRows and CheckAndMutateRow, filters over aggregate cells, type
// mismatches and type changes refused with the field named, and the state
// kept across a restart of tabula dev (its commit log replayed).
func TestDevAggregates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := DevConfig{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d, err := StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	admin, data := devClients(t, ctx, d)
	err = admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "agg", ColumnFamilies: map[string]bigtable.Family{
		"sum":   {ValueType: aggType(bigtable.SumAggregator{})},
		"min":   {ValueType: aggType(bigtable.MinAggregator{})},
		"max":   {ValueType: aggType(bigtable.MaxAggregator{}), GCPolicy: bigtable.MaxVersionsPolicy(2)},
		"hll":   {ValueType: aggType(bigtable.HllppUniqueCountAggregator{})},
		"plain": {},
	}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.TableInfo(ctx, "agg")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range info.FamilyInfos {
		_, isAgg := f.ValueType.(bigtable.AggregateType)
		if isAgg != (f.Name != "plain") {
			t.Errorf("family %s: value type %#v", f.Name, f.ValueType)
		}
	}
	tbl := data.Open("agg")
	apply := func(row string, m *bigtable.Mutation) {
		t.Helper()
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatalf("apply to %s: %v", row, err)
		}
	}
	m := bigtable.NewMutation()
	m.AddIntToCell("sum", "c", 1000, 5)
	m.AddIntToCell("sum", "c", 1000, 5)
	m.MergeBytesToCell("sum", "c", 1000, int64BE(5))
	m.AddIntToCell("sum", "c", 2000, -3)
	for _, v := range []int64{7, -2, 9} {
		m.AddIntToCell("min", "c", 1000, v)
		m.AddIntToCell("max", "c", 1000, v)
	}
	m.MergeBytesToCell("max", "c", 1000, int64BE(11))
	apply("r1", m)
	// A second write of the same cells, through MutateRows.
	m2 := bigtable.NewMutation()
	m2.AddIntToCell("sum", "c", 1000, 100)
	m2.AddIntToCell("min", "c", 1000, -5)
	if errs, err := tbl.ApplyBulk(ctx, []string{"r1"}, []*bigtable.Mutation{m2}); err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	// HLL: 300 inputs, 120 distinct, in several requests.
	for i := range 3 {
		m := bigtable.NewMutation()
		for j := range 100 {
			m.AddIntToCell("hll", "u", 0, int64((i*100+j)%120))
		}
		apply("r1", m)
	}
	// CheckAndMutateRow: AddToCell in the branch the predicate picks.
	cond := bigtable.NewCondMutation(bigtable.FamilyFilter("sum"), func() *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.AddIntToCell("sum", "c", 1000, 1000)
		return m
	}(), func() *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.AddIntToCell("sum", "c", 1000, -1)
		return m
	}())
	var matched bool
	if err := tbl.Apply(ctx, "r1", cond, bigtable.GetCondMutationResult(&matched)); err != nil || !matched {
		t.Fatalf("conditional AddToCell: %v, matched %v", err, matched)
	}

	check := func(when string) {
		t.Helper()
		r, err := tbl.ReadRow(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			fam  string
			ts   bigtable.Timestamp
			want int64
		}{{"sum", 1000, 1115}, {"min", 1000, -5}, {"max", 1000, 11}} {
			v := cellValue(t, r, c.fam, "c", c.ts)
			if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) != c.want {
				t.Errorf("%s: %s:c@%d = %x, want %d", when, c.fam, c.ts, v, c.want)
			}
		}
		if n := len(r["sum"]); n != 2 {
			t.Errorf("%s: %d sum cells, want 2 (timestamps 2000 and 1000): %v", when, n, r["sum"])
		}
		v := cellValue(t, r, "hll", "u", 0)
		n, err := cell.HLLEstimate(v)
		if err != nil || n != 120 {
			t.Errorf("%s: hll:u estimate %d (%v), want 120", when, n, err)
		}
		// Filters see aggregate cells like any other.
		r, err = tbl.ReadRow(ctx, "r1", bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("sum"), bigtable.TimestampRangeFilterMicros(0, 2000), bigtable.LatestNFilter(1))))
		if err != nil {
			t.Fatal(err)
		}
		if len(r["sum"]) != 1 || int64(binary.BigEndian.Uint64(r["sum"][0].Value)) != 1115 {
			t.Errorf("%s: filtered read %v", when, r)
		}
	}
	check("before restart")

	// Type mismatches: INVALID_ARGUMENT naming the field; nothing changes.
	bad := bigtable.NewMutation()
	bad.AddIntToCell("sum", "c", 1000, 1)
	bad.AddIntToCell("plain", "c", 1000, 1)
	wantCode(t, "AddToCell on a plain family", tbl.Apply(ctx, "r1", bad), codes.InvalidArgument, "mutations[1].add_to_cell.family_name")
	bad = bigtable.NewMutation()
	bad.Set("sum", "c", 1000, []byte("x"))
	wantCode(t, "SetCell on an aggregate family", tbl.Apply(ctx, "r1", bad), codes.InvalidArgument, "mutations[0].set_cell.family_name")
	bad = bigtable.NewMutation()
	bad.MergeBytesToCell("sum", "c", 1000, []byte{1, 2, 3})
	wantCode(t, "MergeToCell of a 3-byte state", tbl.Apply(ctx, "r1", bad), codes.InvalidArgument, "mutations[0].merge_to_cell.input")
	bad = bigtable.NewMutation()
	bad.MergeBytesToCell("hll", "u", 0, []byte("not a sketch"))
	wantCode(t, "MergeToCell of a bad HLL state", tbl.Apply(ctx, "r1", bad), codes.InvalidArgument, "mutations[0].merge_to_cell.input")
	badCond := bigtable.NewCondMutation(bigtable.FamilyFilter("sum"), nil, func() *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set("sum", "c", 1000, []byte("x"))
		return m
	}())
	wantCode(t, "CheckAndMutateRow with a SetCell on an aggregate family in the branch not taken", tbl.Apply(ctx, "r1", badCond), codes.InvalidArgument, "false_mutations[0].set_cell.family_name")
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("sum", "c", 1)
	_, err = tbl.ApplyReadModifyWrite(ctx, "r1", rmw)
	wantCode(t, "ReadModifyWriteRow on an aggregate family", err, codes.InvalidArgument, "rules[0].family_name")
	check("after the refused writes")

	// Type changes: an aggregate type is immutable (the official suite's
	// message); a declared type may change; a family cannot become an
	// aggregate one.
	err = admin.UpdateFamily(ctx, "agg", "sum", bigtable.Family{ValueType: bigtable.StringType{}})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !regexp.MustCompile("Immutable fields 'value_type.aggregate_type.*' cannot be updated").MatchString(err.Error()) {
		t.Errorf("changing an aggregate family's type: %v", err)
	}
	if err := admin.UpdateFamily(ctx, "agg", "plain", bigtable.Family{ValueType: bigtable.StringType{Encoding: bigtable.StringUtf8BytesEncoding{}}}); err != nil {
		t.Errorf("declaring a plain family's type String: %v", err)
	}
	err = admin.UpdateFamily(ctx, "agg", "plain", bigtable.Family{ValueType: aggType(bigtable.SumAggregator{})})
	wantCode(t, "making a family aggregate", err, codes.InvalidArgument, "modifications[0].update.value_type")
	err = admin.CreateColumnFamilyWithConfig(ctx, "agg", "badtype", bigtable.Family{ValueType: bigtable.AggregateType{Input: bigtable.StringType{}, Aggregator: bigtable.SumAggregator{}}})
	wantCode(t, "an aggregate over String input", err, codes.InvalidArgument, "modifications[0].create.value_type.aggregate_type.input_type")
	// The GC rule of an aggregate family may change, and keeps its type.
	if err := admin.SetGCPolicy(ctx, "agg", "max", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Errorf("changing an aggregate family's GC rule: %v", err)
	}

	// Restart: the state comes back from the commit log and SSTables.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin, data = devClients(t, ctx, d)
	tbl = data.Open("agg")
	check("after a restart")
	info, err = admin.TableInfo(ctx, "agg")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range info.FamilyInfos {
		switch f.Name {
		case "plain":
			if _, ok := f.ValueType.(bigtable.StringType); !ok {
				t.Errorf("plain: value type %#v after the update", f.ValueType)
			}
		case "max":
			if _, ok := f.ValueType.(bigtable.AggregateType); !ok || f.GCPolicy != "versions() > 1" {
				t.Errorf("max: value type %#v, GC %q", f.ValueType, f.GCPolicy)
			}
		}
	}
}

// TestDevConcurrentIncrements: many official clients, each on its own
// connection, AddToCell the same cells at once while small memtables make
// the tablets flush and compact under them; every increment counts once.
func TestDevConcurrentIncrements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := StartDev(ctx, DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MemtableBytes: 8 << 10, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	admin, _ := devClients(t, ctx, d)
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "ctr", ColumnFamilies: map[string]bigtable.Family{
		"n": {ValueType: aggType(bigtable.SumAggregator{})}, "pad": {},
	}}); err != nil {
		t.Fatal(err)
	}
	const clients, perClient, rows = 8, 150, 3
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		_, data := devClients(t, ctx, d)
		tbl := data.Open("ctr")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				m := bigtable.NewMutation()
				m.AddIntToCell("n", "hits", 0, int64(c+1))
				// Padding in another family fills memtables.
				m.Set("pad", fmt.Sprintf("c%d-%d", c, i), 0, []byte(strings.Repeat("p", 200)))
				if err := tbl.Apply(ctx, fmt.Sprintf("row%d", i%rows), m); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	_, data := devClients(t, ctx, d)
	var total int64
	err = data.Open("ctr").ReadRows(ctx, bigtable.RowRange{}, func(r bigtable.Row) bool {
		v := cellValue(t, r, "n", "hits", 0)
		total += int64(binary.BigEndian.Uint64(v))
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("n")))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(perClient * clients * (clients + 1) / 2)
	if total != want {
		t.Errorf("sum of the counters = %d, want %d", total, want)
	}
	flushes := minorCompactions(t, d)
	if flushes == 0 {
		t.Errorf("no minor compaction while the counters were written: the test did not cross flushes")
	}
	t.Logf("%d increments from %d clients summed exactly; %v flushes meanwhile", clients*perClient, clients, flushes)
}

// minorCompactions reads tabula_compactions_total{kind="minor"} from d's
// /metrics, summed over tables.
func minorCompactions(t *testing.T, d *Dev) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, m := range fams["tabula_compactions_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == "minor" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
