package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// dataSplits are the tablet boundaries of table "d" in startDataServer.
var dataSplits = []string{"b", "d", "f", "k"}

// serveHost starts a tablet server (data + scripts services) holding
// table "d" (families f, g, c) with the given tablets, plus any gRPC
// server options (interceptors). It returns the address.
func serveHost(t *testing.T, tablets []meta.TabletRef, dopts tabletserver.DataOptions, sopts ...grpc.ServerOption) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{Store: blob.NewMemory(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tbl := meta.Table{ID: meta.TableID{Instance: "dev", Table: "d"},
		Families: map[string]tabletdesc.Family{"f": {}, "g": {}, "c": {}, "sum": {Aggregate: cell.Sum}}, Tablets: tablets}
	if err := host.OpenTable(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	bigtablepb.RegisterBigtableServer(srv, tabletserver.NewDataService(host, dopts))
	scriptpb.RegisterScriptsServer(srv, tabletserver.NewScriptService(host, tabletserver.ScriptOptions{MaxLimits: scripts.Limits{Steps: 100_000}}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Stop()
		host.Close()
	})
	return lis.Addr().String()
}

// splitTablets returns the tablets of a table split at splits.
func splitTablets(splits []string) []meta.TabletRef {
	var out []meta.TabletRef
	var start []byte
	for i, s := range append(slices.Clone(splits), "") {
		r := meta.TabletRef{ID: fmt.Sprintf("d-%d", i), Start: start}
		if s != "" {
			r.End = []byte(s)
		}
		out = append(out, r)
		start = r.End
	}
	return out
}

// startDataServer serves table "d" split at dataSplits and returns our
// client and the official one over the same connection.
func startDataServer(t *testing.T, dopts tabletserver.DataOptions, sopts ...grpc.ServerOption) (*Client, *bigtable.Table) {
	t.Helper()
	addr := serveHost(t, splitTablets(dataSplits), dopts, sopts...)
	c, err := Dial(addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	bt, err := bigtable.NewClientWithConfig(context.Background(), "tabula", "dev",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(c.cc))
	if err != nil {
		t.Fatal(err)
	}
	return c, bt.Open("d")
}

// fillData writes rows a0..z3 through Apply and ApplyBulk: each has f:q1
// in versions 1000..3000, f:q2, and g:x on even ones.
func fillData(t *testing.T, c *Client) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	var bulk []cell.RowMutation
	for ch := 'a'; ch <= 'z'; ch++ {
		for i := range 4 {
			k := fmt.Sprintf("%c%d", ch, i)
			keys = append(keys, k)
			rm := cell.RowMutation{Row: []byte(k)}
			for v := int64(1); v <= 3; v++ {
				rm.Mutations = append(rm.Mutations, cell.Set("f", []byte("q1"), v*1000, []byte(fmt.Sprintf("%s-v%d", k, v))))
			}
			rm.Mutations = append(rm.Mutations, cell.Set("f", []byte("q2"), 1000, []byte("two")))
			if i%2 == 0 {
				rm.Mutations = append(rm.Mutations, cell.Set("g", []byte("x"), 2000, []byte("even")))
			}
			if ch < 'h' {
				if err := c.Apply(ctx, "d", rm); err != nil {
					t.Fatal(err)
				}
			} else {
				bulk = append(bulk, rm)
			}
		}
	}
	if _, err := c.ApplyBulk(ctx, "d", bulk, BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// officialRows reads with the official client and converts.
func officialRows(t *testing.T, tbl *bigtable.Table, rs bigtable.RowSet, opts ...bigtable.ReadOption) []cell.Row {
	t.Helper()
	var out []cell.Row
	err := tbl.ReadRows(context.Background(), rs, func(r bigtable.Row) bool {
		out = append(out, fromOfficial(r))
		return true
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fromOfficial(r bigtable.Row) cell.Row {
	out := cell.Row{Key: []byte(r.Key())}
	fams := make([]string, 0, len(r))
	for f := range r {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		for _, it := range r[f] {
			out.Cells = append(out.Cells, cell.Cell{Family: f, Qualifier: []byte(strings.TrimPrefix(it.Column, f+":")),
				Timestamp: int64(it.Timestamp), Value: it.Value})
		}
	}
	return out
}

func scanAll(t *testing.T, c *Client, opts ScanOptions) []cell.Row {
	t.Helper()
	s := c.Scan(context.Background(), "d", opts)
	defer s.Close()
	var out []cell.Row
	for s.Next() {
		out = append(out, s.Row())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameRows(t *testing.T, what string, got, want []cell.Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !bytes.Equal(g.Key, w.Key) || len(g.Cells) != len(w.Cells) {
			t.Fatalf("%s: row %d = %q (%d cells), want %q (%d cells)", what, i, g.Key, len(g.Cells), w.Key, len(w.Cells))
		}
		for j := range g.Cells {
			gc, wc := g.Cells[j], w.Cells[j]
			if gc.Family != wc.Family || !bytes.Equal(gc.Qualifier, wc.Qualifier) || gc.Timestamp != wc.Timestamp || !bytes.Equal(gc.Value, wc.Value) {
				t.Fatalf("%s: row %q cell %d = %+v, want %+v", what, g.Key, j, gc, wc)
			}
		}
	}
}

func reversed(rows []cell.Row) []cell.Row {
	out := slices.Clone(rows)
	slices.Reverse(out)
	return out
}

// TestScanMatchesOfficialClient writes across five tablets with Apply and
// ApplyBulk, then scans with each option forward and reversed: the rows
// equal what the official client reads with the equivalent filter.
func TestScanMatchesOfficialClient(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	keys := fillData(t, c)
	all := officialRows(t, tbl, bigtable.InfiniteRange(""))
	if len(all) != len(keys) {
		t.Fatalf("official client reads %d rows, want %d", len(all), len(keys))
	}
	for _, tc := range []struct {
		name  string
		opts  ScanOptions
		rs    bigtable.RowSet
		ropts []bigtable.ReadOption
	}{
		{"all", ScanOptions{}, bigtable.InfiniteRange(""), nil},
		{"range", ScanOptions{Start: []byte("c1"), End: []byte("g2")}, bigtable.NewRange("c1", "g2"), nil},
		{"prefix", ScanOptions{Prefix: []byte("d")}, bigtable.PrefixRange("d"), nil},
		{"family", ScanOptions{Families: []string{"g"}}, bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.FamilyFilter("g"))}},
		{"column", ScanOptions{ColumnRegex: "q[2x]"}, bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.ColumnFilter("q[2x]"))}},
		{"time", ScanOptions{StartTime: 2000, EndTime: 3000}, bigtable.InfiniteRange(""),
			[]bigtable.ReadOption{bigtable.RowFilter(bigtable.TimestampRangeFilterMicros(2000, 3000))}},
		{"versions", ScanOptions{MaxVersions: 1, Families: []string{"f"}, Start: []byte("e")}, bigtable.InfiniteRange("e"),
			[]bigtable.ReadOption{bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("f"), bigtable.LatestNFilter(1)))}},
	} {
		want := officialRows(t, tbl, tc.rs, tc.ropts...)
		if len(want) == 0 {
			t.Fatalf("%s: the official client reads nothing", tc.name)
		}
		sameRows(t, tc.name, scanAll(t, c, tc.opts), want)
		ro := tc.opts
		ro.Reverse = true
		sameRows(t, tc.name+" reversed", scanAll(t, c, ro), reversed(want))
		lo := tc.opts
		lo.Limit = 7
		sameRows(t, tc.name+" limit", scanAll(t, c, lo), want[:min(7, len(want))])
		ro.Limit = 7
		sameRows(t, tc.name+" reversed limit", scanAll(t, c, ro), reversed(want)[:min(7, len(want))])
	}
	ctx := context.Background()
	for _, k := range []string{"a0", "d3", "k0", "z3"} {
		r, ok, err := c.ReadRow(ctx, "d", []byte(k), ScanOptions{})
		if err != nil || !ok {
			t.Fatalf("ReadRow(%s) = %v, %v", k, ok, err)
		}
		w, err := tbl.ReadRow(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		sameRows(t, "ReadRow "+k, []cell.Row{r}, []cell.Row{fromOfficial(w)})
	}
	if _, ok, err := c.ReadRow(ctx, "d", []byte("nope"), ScanOptions{}); ok || err != nil {
		t.Fatalf("ReadRow(nope) = %v, %v", ok, err)
	}
	// Deletes through Apply.
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("b1"), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("b2"), Mutations: []cell.Mutation{cell.DeleteColumn("f", []byte("q1"), 2000, 0), cell.DeleteFamily("g")}}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "after deletes", scanAll(t, c, ScanOptions{Prefix: []byte("b")}), officialRows(t, tbl, bigtable.PrefixRange("b")))
	if r, _, _ := c.ReadRow(ctx, "d", []byte("b2"), ScanOptions{}); len(r.Cells) != 2 {
		t.Fatalf("b2 after deletes: %+v", r)
	}
}

// TestCountersAndCheckAndMutate: Increment, Append, and both branches of
// CheckAndMutate.
func TestCountersAndCheckAndMutate(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	ctx := context.Background()
	for i, want := range []int64{5, 12, 2} {
		got, err := c.Increment(ctx, "d", []byte("e-counter"), "c", []byte("n"), []int64{5, 7, -10}[i])
		if err != nil || got != want {
			t.Fatalf("Increment %d = %d, %v; want %d", i, got, err, want)
		}
	}
	r, err := tbl.ReadRow(ctx, "e-counter", bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil || len(r["c"]) != 1 || int64(binary.BigEndian.Uint64(r["c"][0].Value)) != 2 {
		t.Fatalf("official client reads %v, %v", r, err)
	}
	row, err := c.ReadModifyWrite(ctx, "d", []byte("m-log"), []ReadModifyWriteRule{{Family: "f", Qualifier: []byte("l"), Append: []byte("ab")}})
	if err != nil || len(row.Cells) != 1 || string(row.Cells[0].Value) != "ab" {
		t.Fatalf("append = %+v, %v", row, err)
	}
	pred := FilterOf(ScanOptions{Families: []string{"g"}})
	for _, tc := range []struct {
		row   string
		setup bool
		want  bool
	}{{"c-match", true, true}, {"x-nomatch", false, false}} {
		if tc.setup {
			if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte(tc.row), Mutations: []cell.Mutation{cell.Set("g", []byte("x"), 1000, []byte("y"))}}); err != nil {
				t.Fatal(err)
			}
		}
		matched, err := c.CheckAndMutate(ctx, "d", []byte(tc.row), pred,
			[]cell.Mutation{cell.Set("f", []byte("branch"), 1000, []byte("true"))},
			[]cell.Mutation{cell.Set("f", []byte("branch"), 1000, []byte("false"))})
		if err != nil || matched != tc.want {
			t.Fatalf("CheckAndMutate(%s) = %v, %v", tc.row, matched, err)
		}
		r, ok, err := c.ReadRow(ctx, "d", []byte(tc.row), ScanOptions{ColumnRegex: "branch"})
		if err != nil || !ok || string(r.Cells[0].Value) != fmt.Sprint(tc.want) {
			t.Fatalf("%s after CheckAndMutate: %+v %v %v", tc.row, r, ok, err)
		}
	}
}

// TestAggregateMutations: AddToCell and MergeToCell through Apply and
// ApplyBulk reach the server as such (the official client reads the sum),
// and are not retried as idempotent.
func TestAggregateMutations(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	ctx := context.Background()
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("k-agg"), Mutations: []cell.Mutation{
		cell.Add("sum", []byte("n"), 1000, 40), cell.Merge("sum", []byte("n"), 1000, binary.BigEndian.AppendUint64(nil, 2)),
	}}); err != nil {
		t.Fatal(err)
	}
	errs, err := c.ApplyBulk(ctx, "d", []cell.RowMutation{{Row: []byte("k-agg"), Mutations: []cell.Mutation{cell.Add("sum", []byte("n"), 1000, -100)}}}, BulkOptions{})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	r, err := tbl.ReadRow(ctx, "k-agg")
	if err != nil || len(r["sum"]) != 1 || int64(binary.BigEndian.Uint64(r["sum"][0].Value)) != -58 {
		t.Fatalf("official client reads %v, %v; want sum:n = -58", r, err)
	}
	if Idempotent(cell.RowMutation{Mutations: []cell.Mutation{cell.Add("sum", nil, 0, 1)}}) {
		t.Error("an AddToCell is idempotent")
	}
	err = c.Apply(ctx, "d", cell.RowMutation{Row: []byte("k-agg"), Mutations: []cell.Mutation{cell.Add("f", []byte("n"), 1000, 1)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "add_to_cell.family_name") {
		t.Errorf("AddToCell on a plain family: %v", err)
	}
}

// TestTabletsAndSampleRowKeys: the tablets carry their ranges and the
// server's address; the samples include every boundary and end with the
// empty key.
func TestTabletsAndSampleRowKeys(t *testing.T) {
	c, _ := startDataServer(t, tabletserver.DataOptions{})
	fillData(t, c)
	ctx := context.Background()
	tabs, err := c.Tablets(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if len(tabs) != len(dataSplits)+1 {
		t.Fatalf("%d tablets, want %d", len(tabs), len(dataSplits)+1)
	}
	for i, tb := range tabs {
		if tb.Server != c.cc.Target() {
			t.Errorf("tablet %d on %q, want %q", i, tb.Server, c.cc.Target())
		}
		if i > 0 && !bytes.Equal(tb.Start, tabs[i-1].End) {
			t.Errorf("tablet %d starts at %q after %q", i, tb.Start, tabs[i-1].End)
		}
		if i < len(dataSplits) && string(tb.End) != dataSplits[i] || i == len(dataSplits) && tb.End != nil {
			t.Errorf("tablet %d ends at %q", i, tb.End)
		}
	}
	samples, err := c.SampleRowKeys(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 || len(samples[len(samples)-1].Key) != 0 {
		t.Fatalf("samples %+v do not end with the empty key", samples)
	}
	var keys []string
	for i, s := range samples {
		if i > 0 && s.Offset < samples[i-1].Offset {
			t.Fatalf("offsets decrease: %+v", samples)
		}
		keys = append(keys, string(s.Key))
	}
	for _, s := range dataSplits {
		if !slices.Contains(keys, s) {
			t.Errorf("samples %q miss the boundary %q", keys, s)
		}
	}
}

// notServing is what a server that lost a tablet answers.
func notServing() error {
	st, _ := status.New(codes.FailedPrecondition, "tablet moved").WithDetails(&tabletpb.NotServing{TableName: "projects/-/instances/dev/tables/d"})
	return st.Err()
}

func lostAll(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
	return nil, notServing()
}

func lostAllStreams(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
	return notServing()
}

// TestStaleLocation: a cached location naming a server that no longer
// holds the tablet (a second server, reached through the connection pool,
// that answers "not serving" to everything) is dropped after its answer;
// the client relocates and succeeds.
func TestStaleLocation(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	other := serveHost(t, splitTablets(dataSplits), tabletserver.DataOptions{}, grpc.UnaryInterceptor(lostAll), grpc.StreamInterceptor(lostAllStreams))
	ctx := context.Background()
	if _, err := c.Tablets(ctx, "d"); err != nil { // fill the cache
		t.Fatal(err)
	}
	p := c.data()
	id := meta.TableID{Instance: "dev", Table: "d"}
	p.cache.Insert(meta.Location{Table: id, Start: []byte("k"), Server: other, TabletID: "moved", Epoch: 1})
	if l, _ := p.cache.Lookup(id, []byte("p")); l.Server != other {
		t.Fatalf("the stale location was not cached: %+v", l)
	}
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("p1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 7000, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if l, _ := p.cache.Lookup(id, []byte("p")); l.Server != c.cc.Target() {
		t.Fatalf("the location is still %+v", l)
	}
	if r, err := tbl.ReadRow(ctx, "p1"); err != nil || len(r["f"]) != 1 {
		t.Fatalf("official client reads %v, %v", r, err)
	}
	p.mu.Lock()
	dialed := len(p.conns)
	p.mu.Unlock()
	if dialed != 1 {
		t.Fatalf("%d pooled connections, want 1 (to the other server)", dialed)
	}
	// The same for a scan.
	p.cache.Insert(meta.Location{Table: id, Start: []byte("k"), Server: other, TabletID: "moved", Epoch: 2})
	if rows := scanAll(t, c, ScanOptions{Start: []byte("p")}); len(rows) != 1 || string(rows[0].Key) != "p1" {
		t.Fatalf("scan after a stale location: %+v", rows)
	}
}

// TestApplyBulkBudget: a budget smaller than the batch still applies
// everything, with never more than the budget in flight (a batch larger
// than the budget goes alone).
func TestApplyBulkBudget(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	ctx := context.Background()
	var rms []cell.RowMutation
	for i := range 600 {
		rms = append(rms, cell.RowMutation{Row: []byte(fmt.Sprintf("%c%04d", 'a'+i%26, i)),
			Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, bytes.Repeat([]byte{'v'}, 100))}})
	}
	const budgetBytes = 1000 // ~7 mutations
	var peak atomic.Int64
	bulkInFlightHook = func(n int) {
		if int64(n) > peak.Load() {
			peak.Store(int64(n))
		}
	}
	defer func() { bulkInFlightHook = nil }()
	errs, err := c.ApplyBulk(ctx, "d", rms, BulkOptions{BudgetBytes: budgetBytes, BatchBytes: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p == 0 || p > budgetBytes {
		t.Fatalf("peak in flight %d, budget %d", p, budgetBytes)
	}
	if got := officialRows(t, tbl, bigtable.InfiniteRange("")); len(got) != len(rms) {
		t.Fatalf("%d rows applied, want %d", len(got), len(rms))
	}
	// Per-mutation errors: an unknown family fails alone.
	bad := []cell.RowMutation{
		{Row: []byte("ok1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, nil)}},
		{Row: []byte("bad"), Mutations: []cell.Mutation{cell.Set("nofamily", []byte("q"), 1000, nil)}},
		{Row: []byte("ok2"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, nil)}},
	}
	errs, err = c.ApplyBulk(ctx, "d", bad, BulkOptions{})
	if err == nil || len(errs) != 3 || errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("ApplyBulk with a bad mutation = %v, %v", errs, err)
	}
}

// TestApplyBulkMutationLimit: narrow rows of many cells fill a batch's
// mutation count before its bytes; ApplyBulk must cut batches at the
// API's 100,000 mutations per request, which the server enforces over a
// MutateRows request's entries together.
func TestApplyBulkMutationLimit(t *testing.T) {
	c, tbl := startDataServer(t, tabletserver.DataOptions{})
	ctx := context.Background()
	const rows, cells = 1500, 100 // 150,000 mutations in about 1.1 MB, under BatchBytes
	var rms []cell.RowMutation
	for i := range rows {
		rm := cell.RowMutation{Row: []byte(fmt.Sprintf("a%05d", i))}
		for j := range cells {
			rm.Mutations = append(rm.Mutations, cell.Set("f", []byte{byte(j)}, 1000, []byte{1}))
		}
		rms = append(rms, rm)
	}
	if errs, err := c.ApplyBulk(ctx, "d", rms, BulkOptions{BatchBytes: 8 << 20}); err != nil {
		t.Fatalf("ApplyBulk: %v (first errors %v)", err, errs[:min(3, len(errs))])
	}
	got := officialRows(t, tbl, bigtable.PrefixRange("a"))
	n := 0
	for _, r := range got {
		n += len(r.Cells)
	}
	if len(got) != rows || n != rows*cells {
		t.Fatalf("%d rows, %d cells applied; want %d, %d", len(got), n, rows, rows*cells)
	}
}

// flaky fails the first n calls of each listed method with UNAVAILABLE.
type flaky struct {
	n       int64
	methods map[string]*atomic.Int64
}

func (f *flaky) fail(method string) error {
	if c, ok := f.methods[method]; ok && c.Add(1) <= f.n {
		return status.Error(codes.Unavailable, "injected")
	}
	return nil
}

func (f *flaky) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := f.fail(info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (f *flaky) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := f.fail(info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// TestRetryUnavailable: idempotent operations (explicit-timestamp sets,
// reads) are retried after UNAVAILABLE; a server-timestamp set and
// ReadModifyWrite are not.
func TestRetryUnavailable(t *testing.T) {
	const pre = "/google.bigtable.v2.Bigtable/"
	f := &flaky{n: 2, methods: map[string]*atomic.Int64{}}
	for _, m := range []string{"MutateRow", "ReadRows", "ReadModifyWriteRow"} {
		f.methods[pre+m] = new(atomic.Int64)
	}
	c, _ := startDataServer(t, tabletserver.DataOptions{}, grpc.UnaryInterceptor(f.unary), grpc.StreamInterceptor(f.stream))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 5000, []byte("v"))}}); err != nil {
		t.Fatalf("idempotent Apply: %v", err)
	}
	if r, ok, err := c.ReadRow(ctx, "d", []byte("r"), ScanOptions{}); err != nil || !ok || len(r.Cells) != 1 {
		t.Fatalf("ReadRow after UNAVAILABLE = %+v, %v, %v", r, ok, err)
	}
	if _, err := c.Increment(ctx, "d", []byte("r"), "c", []byte("n"), 1); status.Code(err) != codes.Unavailable {
		t.Fatalf("Increment = %v, want UNAVAILABLE (not retried)", err)
	}
	f.methods[pre+"MutateRow"].Store(0)
	err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), cell.ServerTimestamp, []byte("v"))}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("server-timestamp Apply = %v, want UNAVAILABLE (not retried)", err)
	}
}

// TestUnaryInterceptorsSeeEachAttempt: Options.UnaryInterceptors run on
// every attempt of a write the client resends, on the connections it
// dials to the tablet servers, so that a caller can tell a write sent
// three times from one sent once although both answer OK.
func TestUnaryInterceptorsSeeEachAttempt(t *testing.T) {
	const mutateRow = "/google.bigtable.v2.Bigtable/MutateRow"
	f := &flaky{n: 2, methods: map[string]*atomic.Int64{mutateRow: new(atomic.Int64)}}
	c, _ := startDataServer(t, tabletserver.DataOptions{}, grpc.UnaryInterceptor(f.unary))
	var attempts atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == mutateRow {
			attempts.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	counted, err := Dial(c.cc.Target(), Options{UnaryInterceptors: []grpc.UnaryClientInterceptor{count}})
	if err != nil {
		t.Fatal(err)
	}
	defer counted.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := counted.Apply(ctx, "d", cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
		t.Fatalf("idempotent Apply: %v", err)
	}
	if n := attempts.Load(); n != 3 {
		t.Fatalf("the interceptor saw %d attempts of a write failed twice with UNAVAILABLE, want 3", n)
	}
}

// breakingStream fails a ReadRows with UNAVAILABLE after it sent after
// responses, the first calls times.
type breakingStream struct {
	grpc.ServerStream
	sent, after int
}

func (b *breakingStream) SendMsg(m any) error {
	if b.sent == b.after {
		return status.Error(codes.Unavailable, "injected mid-stream")
	}
	b.sent++
	return b.ServerStream.SendMsg(m)
}

// TestScanResumes: streams broken mid-tablet (responses of a few rows)
// resume after the last row returned, forward and reversed, with neither
// duplicates nor gaps.
func TestScanResumes(t *testing.T) {
	var breaks atomic.Int64
	intercept := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if strings.HasSuffix(info.FullMethod, "/ReadRows") && breaks.Add(-1) >= 0 {
			return h(srv, &breakingStream{ServerStream: ss, after: 2})
		}
		return h(srv, ss)
	}
	c, tbl := startDataServer(t, tabletserver.DataOptions{ResponseBytes: 200}, grpc.StreamInterceptor(intercept))
	fillData(t, c)
	breaks.Store(0)
	want := officialRows(t, tbl, bigtable.InfiniteRange(""))
	for _, rev := range []bool{false, true} {
		breaks.Store(4)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s := c.Scan(ctx, "d", ScanOptions{Reverse: rev})
		var got []cell.Row
		for s.Next() {
			got = append(got, s.Row())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if breaks.Load() >= 0 {
			t.Fatalf("only %d streams broken", 4-breaks.Load())
		}
		w := want
		if rev {
			w = reversed(want)
		}
		sameRows(t, fmt.Sprintf("resumed scan (reverse %v)", rev), got, w)
	}
}

// cloneRow is a deep copy of r.
func cloneRow(r cell.Row) cell.Row {
	out := cell.Row{Key: bytes.Clone(r.Key), Cells: make([]cell.Cell, len(r.Cells))}
	for i, c := range r.Cells {
		out.Cells[i] = cell.Cell{Family: c.Family, Qualifier: bytes.Clone(c.Qualifier), Timestamp: c.Timestamp, Value: bytes.Clone(c.Value)}
	}
	return out
}

// TestScanReuseScanBuffers: a client with ReuseScanBuffers returns every
// row exactly (each copied before the next Next), forward and reversed,
// across tablets and streams broken mid-tablet (the resume key is copied
// out of a buffer before it is reused); and it does reuse: rows kept
// past the next Next were overwritten, which without the option never
// happens.
func TestScanReuseScanBuffers(t *testing.T) {
	var breaks atomic.Int64
	intercept := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if strings.HasSuffix(info.FullMethod, "/ReadRows") && breaks.Add(-1) >= 0 {
			return h(srv, &breakingStream{ServerStream: ss, after: 3})
		}
		return h(srv, ss)
	}
	c, tbl := startDataServer(t, tabletserver.DataOptions{ResponseBytes: 200}, grpc.StreamInterceptor(intercept))
	fillData(t, c)
	want := officialRows(t, tbl, bigtable.InfiniteRange(""))
	reusing, err := Dial(c.cc.Target(), Options{ReuseScanBuffers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reusing.Close()
	for _, cl := range []*Client{reusing, c} {
		reuse := cl == reusing
		for _, rev := range []bool{false, true} {
			breaks.Store(4)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s := cl.Scan(ctx, "d", ScanOptions{Reverse: rev})
			var copies, kept []cell.Row
			for s.Next() {
				copies = append(copies, cloneRow(s.Row()))
				kept = append(kept, s.Row())
			}
			cancel()
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if breaks.Load() >= 0 {
				t.Fatalf("only %d streams broken", 4-breaks.Load())
			}
			w := want
			if rev {
				w = reversed(want)
			}
			what := fmt.Sprintf("scan (reuse %v, reverse %v)", reuse, rev)
			sameRows(t, what, copies, w)
			overwritten := 0
			for i := range kept {
				if !sameRow(kept[i], copies[i]) {
					overwritten++
				}
			}
			if reuse && overwritten == 0 {
				t.Errorf("%s: no row kept past Next was overwritten: the buffers were not reused", what)
			}
			if !reuse && overwritten > 0 {
				t.Errorf("%s: %d rows changed after Next", what, overwritten)
			}
		}
	}
}
