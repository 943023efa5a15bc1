package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// gwSplit divides the test table: server A owns [“”, gwSplit), B the rest.
const gwSplit = "m"

// fakeLocator serves the two tablets of every table: [“”, m) on low, [m, “”)
// on high, or on staleHigh while it is set (a location the owner will
// refuse). Invalidating the stale location clears staleHigh unless sticky.
type fakeLocator struct {
	mu          sync.Mutex
	low, high   string
	staleHigh   string
	sticky      bool
	invalidated []meta.Location
}

func (l *fakeLocator) Tablets(ctx context.Context, table meta.TableID, start, end []byte) ([]meta.Location, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hi := l.high
	if l.staleHigh != "" {
		hi = l.staleHigh
	}
	var out []meta.Location
	if bytes.Compare(start, []byte(gwSplit)) < 0 {
		out = append(out, meta.Location{Table: table, End: []byte(gwSplit), TabletID: table.Table + "-0", Server: l.low, Epoch: 1})
	}
	if end == nil || bytes.Compare(end, []byte(gwSplit)) > 0 {
		out = append(out, meta.Location{Table: table, Start: []byte(gwSplit), TabletID: table.Table + "-1", Server: hi, Epoch: 1})
	}
	return out, nil
}

func (l *fakeLocator) Invalidate(loc meta.Location) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.invalidated = append(l.invalidated, loc)
	if loc.Server == l.staleHigh && !l.sticky {
		l.staleHigh = ""
	}
}

func (l *fakeLocator) setStale(server string, sticky bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.staleHigh, l.sticky, l.invalidated = server, sticky, nil
}

func (l *fakeLocator) invalidations() []meta.Location {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.invalidated)
}

// notServingErr is the answer of a server that does not hold the tablet.
func notServingErr(table string) error {
	st, err := status.New(codes.FailedPrecondition, "tablet not served here").
		WithDetails(&tabletpb.NotServing{TableName: table, Reason: "test"})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// faultServer wraps a node's Gateway: with refuse set it answers every
// routed method "not serving" (a server the locator wrongly names); with
// readFailAfter n > 0 the next ReadRows relays n responses, then fails
// "not serving" (a tablet moved mid-scan).
type faultServer struct {
	bigtablepb.BigtableServer
	refuse        atomic.Bool
	readFailAfter atomic.Int32
	calls         atomic.Int32 // refused requests
}

func (f *faultServer) refused(table string) error {
	f.calls.Add(1)
	return notServingErr(table)
}

func (f *faultServer) MutateRow(ctx context.Context, req *bigtablepb.MutateRowRequest) (*bigtablepb.MutateRowResponse, error) {
	if f.refuse.Load() {
		return nil, f.refused(req.GetTableName())
	}
	return f.BigtableServer.MutateRow(ctx, req)
}

func (f *faultServer) CheckAndMutateRow(ctx context.Context, req *bigtablepb.CheckAndMutateRowRequest) (*bigtablepb.CheckAndMutateRowResponse, error) {
	if f.refuse.Load() {
		return nil, f.refused(req.GetTableName())
	}
	return f.BigtableServer.CheckAndMutateRow(ctx, req)
}

func (f *faultServer) ReadModifyWriteRow(ctx context.Context, req *bigtablepb.ReadModifyWriteRowRequest) (*bigtablepb.ReadModifyWriteRowResponse, error) {
	if f.refuse.Load() {
		return nil, f.refused(req.GetTableName())
	}
	return f.BigtableServer.ReadModifyWriteRow(ctx, req)
}

func (f *faultServer) MutateRows(req *bigtablepb.MutateRowsRequest, stream bigtablepb.Bigtable_MutateRowsServer) error {
	if f.refuse.Load() {
		return f.refused(req.GetTableName())
	}
	return f.BigtableServer.MutateRows(req, stream)
}

func (f *faultServer) SampleRowKeys(req *bigtablepb.SampleRowKeysRequest, stream bigtablepb.Bigtable_SampleRowKeysServer) error {
	if f.refuse.Load() {
		return f.refused(req.GetTableName())
	}
	return f.BigtableServer.SampleRowKeys(req, stream)
}

func (f *faultServer) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	if f.refuse.Load() {
		return f.refused(req.GetTableName())
	}
	n := f.readFailAfter.Swap(0)
	if n <= 0 {
		return f.BigtableServer.ReadRows(req, stream)
	}
	s := &failingReadStream{Bigtable_ReadRowsServer: stream, left: int(n)}
	if err := f.BigtableServer.ReadRows(req, s); err != nil && !s.failed {
		return err
	}
	return notServingErr(req.GetTableName())
}

// failingReadStream passes left responses, then fails.
type failingReadStream struct {
	bigtablepb.Bigtable_ReadRowsServer
	left   int
	failed bool
}

func (s *failingReadStream) Send(r *bigtablepb.ReadRowsResponse) error {
	if s.left == 0 {
		s.failed = true
		return io.ErrClosedPipe
	}
	s.left--
	return s.Bigtable_ReadRowsServer.Send(r)
}

// gwNode is one tablet server of the test cluster: a Host with the test
// table (whole: the locator decides which part the node owns), its
// DataService, and a Gateway served on loopback behind a faultServer.
type gwNode struct {
	name  string // "address/nonce", as METADATA records servers
	addr  string
	host  *tabletserver.Host
	ds    *tabletserver.DataService
	gw    *Gateway
	fault *faultServer
	reg   *prometheus.Registry
}

// gwCluster is two nodes, A owning [“”, m) and B owning [m, “”), a third
// address C that refuses everything, and the official client talking to A.
type gwCluster struct {
	t       testing.TB
	ctx     context.Context
	a, b, c *gwNode
	loc     *fakeLocator
	client  *bigtable.Client // connected to A
	clientB *bigtable.Client // connected to B
	tbl     *bigtable.Table  // "t" through A
}

const gwTable = "t"

func newGWCluster(t testing.TB) *gwCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := &gwCluster{t: t, ctx: ctx, loc: &fakeLocator{}}
	var connMu sync.Mutex
	conns := make(map[string]*grpc.ClientConn)
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		connMu.Lock()
		defer connMu.Unlock()
		if cc, ok := conns[addr]; ok {
			return cc, nil
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		conns[addr] = cc
		return cc, nil
	}
	t.Cleanup(func() {
		connMu.Lock()
		defer connMu.Unlock()
		for _, cc := range conns {
			cc.Close()
		}
	})
	// B sends every row in its own response, so that a scan can fail
	// between rows; samples are dense.
	c.a = newGWNode(t, ctx, c.loc, dial, tabletserver.DataOptions{SampleBytes: 1}, nil)
	c.b = newGWNode(t, ctx, c.loc, dial, tabletserver.DataOptions{SampleBytes: 1, ResponseBytes: 1}, nil)
	c.c = newGWNode(t, ctx, c.loc, dial, tabletserver.DataOptions{}, nil)
	c.c.fault.refuse.Store(true)
	c.loc.low, c.loc.high = c.a.name, c.b.name
	c.client = gwClient(t, ctx, c.a.addr)
	c.clientB = gwClient(t, ctx, c.b.addr)
	c.tbl = c.client.Open(gwTable)
	return c
}

func gwClient(t testing.TB, ctx context.Context, addr string) *bigtable.Client {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		conn.Close()
	})
	return client
}

// newGWNode starts a node; lease, when not nil, is its host's lease.
func newGWNode(t testing.TB, ctx context.Context, loc Locator, dial func(string) (grpc.ClientConnInterface, error), do tabletserver.DataOptions, lease tabletserver.Lease) *gwNode {
	t.Helper()
	logOpts := commitlog.Options{Dir: filepath.Join(t.TempDir(), "log")}
	lg, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{Store: blob.NewMemory(), Log: lg, LogOptions: logOpts,
		Cache: sstable.NewCache(8 << 20), Logger: quietLogger(), Registerer: reg, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	tm := meta.Table{ID: meta.TableID{Instance: testInstance, Table: gwTable}, Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{{ID: gwTable + "-0", End: []byte(gwSplit)}, {ID: gwTable + "-1", Start: []byte(gwSplit)}}}
	if err := host.OpenTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	ds := tabletserver.NewDataService(host, do)
	gw, err := New(ds, Options{Self: addr, Locator: loc, Dial: dial, Registerer: reg, Logger: quietLogger(), PointReads: true})
	if err != nil {
		t.Fatal(err)
	}
	fault := &faultServer{BigtableServer: gw}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(tabletserver.MaxRequestBytes), tabletserver.ServerCodec(),
		grpc.UnaryInterceptor(host.UnaryInterceptor()), grpc.StreamInterceptor(host.StreamInterceptor()))
	bigtablepb.RegisterBigtableServer(srv, fault)
	stopping := make(chan struct{})
	if !withoutPointReads {
		RegisterPointReads(srv, fault.ReadRows, nil, stopping)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		// As a tablet server stops: the point-read streams other nodes
		// keep open here would hold GracefulStop forever.
		close(stopping)
		srv.GracefulStop()
		if err := host.Close(); err != nil {
			t.Errorf("host close: %v", err)
		}
		if err := lg.Close(); err != nil {
			t.Errorf("log close: %v", err)
		}
	})
	return &gwNode{name: addr + "/1", addr: addr, host: host, ds: ds, gw: gw, fault: fault, reg: reg}
}

// has reports whether the node's Host stores row (read directly, not
// through any gateway).
func (n *gwNode) has(t *testing.T, ctx context.Context, row string) bool {
	t.Helper()
	found := false
	err := n.ds.ReadRows(&bigtablepb.ReadRowsRequest{TableName: tableName(gwTable), Rows: &bigtablepb.RowSet{RowKeys: [][]byte{[]byte(row)}}},
		&readRowsCapture{ctx: ctx, send: func(r *bigtablepb.ReadRowsResponse) error {
			found = found || len(r.GetChunks()) > 0
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// gwCounter reads a counter.
func gwCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func (n *gwNode) requests(method, route string) float64 {
	return gwCounter(n.gw.metrics.requests.WithLabelValues(method, route))
}

func (n *gwNode) retries() float64 { return gwCounter(n.gw.metrics.retries) }

// put writes row f:c=value at timestamp 1 ms through tbl.
func gwPut(t testing.TB, ctx context.Context, tbl *bigtable.Table, row, value string) {
	t.Helper()
	m := bigtable.NewMutation()
	m.Set("f", "c", ts(1), []byte(value))
	if err := tbl.Apply(ctx, row, m); err != nil {
		t.Fatalf("Apply %q: %v", row, err)
	}
}

// keys reads rs through tbl and returns the row keys, space separated.
func gwKeys(t *testing.T, ctx context.Context, tbl *bigtable.Table, rs bigtable.RowSet, opts ...bigtable.ReadOption) string {
	t.Helper()
	var out []string
	err := tbl.ReadRows(ctx, rs, func(r bigtable.Row) bool {
		out = append(out, r.Key())
		return true
	}, opts...)
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	return strings.Join(out, " ")
}

func TestGatewayRoutesWritesToOwner(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	for _, r := range []string{"a", "b", "x", "z"} {
		gwPut(t, ctx, c.tbl, r, "v-"+r)
	}
	for _, r := range []string{"a", "b"} {
		if !c.a.has(t, ctx, r) || c.b.has(t, ctx, r) {
			t.Errorf("row %q: want it on A only", r)
		}
	}
	for _, r := range []string{"x", "z"} {
		if c.a.has(t, ctx, r) || !c.b.has(t, ctx, r) {
			t.Errorf("row %q: want it on B only", r)
		}
	}
	if got := c.a.gw.Forwarded(); got != 2 {
		t.Errorf("A forwarded %d sub-requests, want 2", got)
	}
	if l, f := c.a.requests("MutateRow", routeLocal), c.a.requests("MutateRow", routeForwarded); l != 2 || f != 2 {
		t.Errorf("A MutateRow local=%v forwarded=%v, want 2 and 2", l, f)
	}
	// B served A's forwarded writes itself: no ping-pong.
	if l, f := c.b.requests("MutateRow", routeLocal), c.b.gw.Forwarded(); l != 2 || f != 0 {
		t.Errorf("B MutateRow local=%v forwarded=%v, want 2 and 0", l, f)
	}
	// A client that reaches the owner directly causes no forwarding.
	before := c.a.gw.Forwarded()
	gwPut(t, ctx, c.clientB.Open(gwTable), "y", "v-y")
	if c.b.gw.Forwarded() != 0 || c.a.gw.Forwarded() != before {
		t.Errorf("write to the owner forwarded: A %d (was %d), B %d", c.a.gw.Forwarded(), before, c.b.gw.Forwarded())
	}
	if !c.b.has(t, ctx, "y") || c.a.has(t, ctx, "y") {
		t.Errorf("row y: want it on B only")
	}
	if got := gwCounter(c.a.gw.metrics.retries); got != 0 {
		t.Errorf("retries = %v, want 0", got)
	}
}

// gwFill writes rows on both sides of the split through A.
var gwRows = []string{"a", "c", "e", "g", "n", "p", "r", "t"}

func gwFill(t testing.TB, c *gwCluster) {
	t.Helper()
	for _, r := range gwRows {
		gwPut(t, c.ctx, c.tbl, r, "v-"+r)
	}
}

func TestGatewayReadRows(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	gwFill(t, c)
	all := strings.Join(gwRows, " ")
	rev := slices.Clone(gwRows)
	slices.Reverse(rev)
	for _, tc := range []struct {
		name string
		rs   bigtable.RowSet
		opts []bigtable.ReadOption
		want string
	}{
		{"all", bigtable.InfiniteRange(""), nil, all},
		{"limit across tablets", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(5)}, "a c e g n"},
		{"limit within first tablet", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(2)}, "a c"},
		{"limit exactly first tablet", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(4)}, "a c e g"},
		{"range across", bigtable.NewRange("e", "r"), nil, "e g n p"},
		{"range in B", bigtable.NewRange("o", "s"), nil, "p r"},
		{"row keys both sides", bigtable.RowList{"t", "c", "zz", "a", "n"}, nil, "a c n t"},
		{"ranges both sides", bigtable.RowRangeList{bigtable.NewRange("b", "d"), bigtable.NewRange("q", "s")}, nil, "c r"},
		{"reverse", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.ReverseScan()}, strings.Join(rev, " ")},
		{"reverse limit", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.ReverseScan(), bigtable.LimitRows(5)}, "t r p n g"},
		{"reverse range", bigtable.NewRange("d", "q"), []bigtable.ReadOption{bigtable.ReverseScan()}, "p n g e"},
		{"filter passes", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.ValueFilter("v-[cp]"))}, "c p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gwKeys(t, ctx, c.tbl, tc.rs, tc.opts...); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	row, err := c.tbl.ReadRow(ctx, "r")
	if err != nil || formatRow(row) != "r{f:c@1000=v-r}" {
		t.Fatalf("ReadRow r: %v %v", formatRow(row), err)
	}
	if f := c.a.requests("ReadRows", routeForwarded); f == 0 || c.b.gw.Forwarded() != 0 {
		t.Errorf("A ReadRows forwarded %v, B forwarded %d", f, c.b.gw.Forwarded())
	}
	// Through B: its own rows need no forwarding.
	before := c.b.gw.Forwarded()
	if got := gwKeys(t, ctx, c.clientB.Open(gwTable), bigtable.PrefixRange("p")); got != "p" || c.b.gw.Forwarded() != before {
		t.Errorf("read on the owner: %q, forwarded %d -> %d", got, before, c.b.gw.Forwarded())
	}
	// Bad input is refused before any routing.
	stub := bigtablepb.NewBigtableClient(gwConn(t, c.a.addr))
	st, err := stub.ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: tableName(gwTable), RowsLimit: -1})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "rows_limit")
}

func gwConn(t *testing.T, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestGatewayMutateRowsMixed(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	set := func(fam, v string) *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set(fam, "c", ts(1), []byte(v))
		return m
	}
	keys := []string{"z1", "a1", "z2", "b1", "z3", "a1"}
	muts := []*bigtable.Mutation{set("f", "z1"), set("f", "a1"), set("nope", "z2"), set("f", "b1"), set("f", "z3"), set("f", "a1-again")}
	errs, err := c.tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		t.Fatalf("ApplyBulk: %v", err)
	}
	if len(errs) != len(keys) {
		t.Fatalf("got %d errors, want %d", len(errs), len(keys))
	}
	for i, e := range errs {
		if i == 2 {
			wantCode(t, e, codes.NotFound, "entries[2]", "nope")
			continue
		}
		if e != nil {
			t.Errorf("entry %d (%s): %v", i, keys[i], e)
		}
	}
	for _, r := range []string{"z1", "z3"} {
		if !c.b.has(t, ctx, r) || c.a.has(t, ctx, r) {
			t.Errorf("row %q: want it on B only", r)
		}
	}
	for _, r := range []string{"a1", "b1"} {
		if !c.a.has(t, ctx, r) || c.b.has(t, ctx, r) {
			t.Errorf("row %q: want it on A only", r)
		}
	}
	if c.b.has(t, ctx, "z2") {
		t.Error("the failed entry was applied")
	}
	if got := gwKeys(t, ctx, c.tbl, bigtable.RowList{"a1"}, bigtable.RowFilter(bigtable.LatestNFilter(1))); got != "a1" {
		t.Fatalf("a1: %q", got)
	}
	row, _ := c.tbl.ReadRow(ctx, "a1", bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if got := formatRow(row); got != "a1{f:c@1000=a1-again}" {
		t.Errorf("entries of one row applied out of order: %s", got)
	}
	// One sub-request per owner.
	if l, f := c.a.requests("MutateRows", routeLocal), c.a.requests("MutateRows", routeForwarded); l != 1 || f != 1 {
		t.Errorf("MutateRows local=%v forwarded=%v, want 1 and 1", l, f)
	}
}

func TestGatewayConditionalAndReadModifyWriteOnOwner(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	gwPut(t, ctx, c.tbl, "x", "old")

	mTrue := bigtable.NewMutation()
	mTrue.Set("f", "matched", ts(2), []byte("yes"))
	mFalse := bigtable.NewMutation()
	mFalse.Set("f", "matched", ts(2), []byte("no"))
	var matched bool
	cond := bigtable.NewCondMutation(bigtable.ValueFilter("old"), mTrue, mFalse)
	if err := c.tbl.Apply(ctx, "x", cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		t.Fatal(err)
	}
	if !matched {
		t.Error("predicate did not match")
	}
	if err := c.tbl.Apply(ctx, "y", cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		t.Fatal(err)
	}
	if matched {
		t.Error("predicate matched an empty row")
	}

	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("f", "n", 5)
	for range 2 {
		if _, err := c.tbl.ApplyReadModifyWrite(ctx, "w", rmw); err != nil {
			t.Fatal(err)
		}
	}
	row, err := c.tbl.ApplyReadModifyWrite(ctx, "w", rmw)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(binary.BigEndian.Uint64(row["f"][0].Value)); got != 15 {
		t.Errorf("counter = %d, want 15", got)
	}
	for _, r := range []string{"x", "y", "w"} {
		if !c.b.has(t, ctx, r) || c.a.has(t, ctx, r) {
			t.Errorf("row %q: want it on B only", r)
		}
	}
	if f := c.a.requests("CheckAndMutateRow", routeForwarded); f != 2 {
		t.Errorf("CheckAndMutateRow forwarded %v, want 2", f)
	}
	if f := c.a.requests("ReadModifyWriteRow", routeForwarded); f != 3 {
		t.Errorf("ReadModifyWriteRow forwarded %v, want 3", f)
	}
	// The owner's errors pass through unchanged and are not retried: an
	// increment of a value that is not 8 bytes is a FAILED_PRECONDITION
	// without the not-serving detail.
	bad := bigtable.NewReadModifyWrite()
	bad.Increment("f", "c", 1)
	_, err = c.tbl.ApplyReadModifyWrite(ctx, "x", bad)
	wantCode(t, err, codes.FailedPrecondition, "8 bytes")
	m := bigtable.NewMutation()
	m.Set("nope", "c", ts(1), nil)
	wantCode(t, c.tbl.Apply(ctx, "x", m), codes.NotFound, "nope")
	if r := c.a.retries(); r != 0 {
		t.Errorf("retries = %v, want 0", r)
	}
}

// sampleKeys returns the samples of a SampleRowKeys call through stub.
func sampleKeys(t *testing.T, ctx context.Context, stub bigtablepb.BigtableClient) []*bigtablepb.SampleRowKeysResponse {
	t.Helper()
	st, err := stub.SampleRowKeys(ctx, &bigtablepb.SampleRowKeysRequest{TableName: tableName(gwTable)})
	if err != nil {
		t.Fatal(err)
	}
	var out []*bigtablepb.SampleRowKeysResponse
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

// localSamples returns what a node's own DataService samples.
func localSamples(t *testing.T, ctx context.Context, n *gwNode) []*bigtablepb.SampleRowKeysResponse {
	t.Helper()
	c := &captureStream[bigtablepb.SampleRowKeysResponse]{ctx: ctx}
	if err := n.ds.SampleRowKeys(&bigtablepb.SampleRowKeysRequest{TableName: tableName(gwTable)}, c); err != nil {
		t.Fatal(err)
	}
	return c.resps
}

func fmtSamples(ss []*bigtablepb.SampleRowKeysResponse, offsets bool) string {
	var b []string
	for _, s := range ss {
		if offsets {
			b = append(b, fmt.Sprintf("%q@%d", s.RowKey, s.OffsetBytes))
		} else {
			b = append(b, fmt.Sprintf("%q", s.RowKey))
		}
	}
	return strings.Join(b, " ")
}

func TestGatewaySampleRowKeys(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	gwFill(t, c)
	// Flush both hosts, so that the samples come from SSTable indexes.
	for _, n := range []*gwNode{c.a, c.b} {
		if err := n.host.FlushTable(ctx, meta.TableID{Instance: testInstance, Table: gwTable}); err != nil {
			t.Fatal(err)
		}
	}
	// Expected: A's samples of [“”, m], B's of (m, end], offsets added up.
	var want []*bigtablepb.SampleRowKeysResponse
	var total int64
	for _, part := range []struct {
		n      *gwNode
		lo, hi string
	}{{c.a, "", gwSplit}, {c.b, gwSplit, ""}} {
		var base int64
		for _, s := range localSamples(t, ctx, part.n) {
			size := s.OffsetBytes - base
			base = s.OffsetBytes
			k := string(s.RowKey)
			in := k > part.lo && (part.hi == "" || k <= part.hi)
			if k == "" {
				in = part.hi == ""
			}
			if in {
				total += size
				want = append(want, &bigtablepb.SampleRowKeysResponse{RowKey: s.RowKey, OffsetBytes: total})
			}
		}
	}
	got := sampleKeys(t, ctx, bigtablepb.NewBigtableClient(gwConn(t, c.a.addr)))
	if g, w := fmtSamples(got, true), fmtSamples(want, true); g != w {
		t.Errorf("samples:\n got %s\nwant %s", g, w)
	}
	if n := len(got); n == 0 || len(got[n-1].RowKey) != 0 || !slices.ContainsFunc(got, func(s *bigtablepb.SampleRowKeysResponse) bool { return string(s.RowKey) == gwSplit }) {
		t.Errorf("samples %s: want the boundary %q and the empty key last", fmtSamples(got, true), gwSplit)
	}
	if len(got) < 4 {
		t.Errorf("samples %s: want keys within the tablets too", fmtSamples(got, true))
	}
	keys, err := c.tbl.SampleRowKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The client drops the final empty key.
	if len(keys) != len(got)-1 {
		t.Errorf("client sampled %q, want %s", keys, fmtSamples(got, false))
	}
}

func TestGatewayRetriesStaleLocation(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	gwFill(t, c)
	wantStale := func(step string, wantRetries float64) {
		t.Helper()
		inv := c.loc.invalidations()
		if len(inv) == 0 || inv[0].Server != c.c.name {
			t.Errorf("%s: invalidated %v, want C's location", step, inv)
		}
		if r := c.a.retries(); r != wantRetries {
			t.Errorf("%s: retries = %v, want %v", step, r, wantRetries)
		}
	}

	c.loc.setStale(c.c.name, false)
	gwPut(t, ctx, c.tbl, "zz", "v")
	if !c.b.has(t, ctx, "zz") || c.a.has(t, ctx, "zz") {
		t.Error("row zz: want it on B only")
	}
	wantStale("MutateRow", 1)

	c.loc.setStale(c.c.name, false)
	if got, want := gwKeys(t, ctx, c.tbl, bigtable.InfiniteRange("")), strings.Join(gwRows, " ")+" zz"; got != want {
		t.Errorf("ReadRows: got %q, want %q", got, want)
	}
	wantStale("ReadRows", 2)

	c.loc.setStale(c.c.name, false)
	errs, err := c.tbl.ApplyBulk(ctx, []string{"b2", "y2"}, []*bigtable.Mutation{gwMut("1"), gwMut("2")})
	if err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	if !c.b.has(t, ctx, "y2") || !c.a.has(t, ctx, "b2") {
		t.Error("bulk rows not on their owners")
	}
	wantStale("MutateRows", 3)

	c.loc.setStale(c.c.name, false)
	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("f", "n", 1)
	if _, err := c.tbl.ApplyReadModifyWrite(ctx, "y3", rmw); err != nil {
		t.Fatal(err)
	}
	row, _ := c.clientB.Open(gwTable).ReadRow(ctx, "y3")
	if len(row["f"]) != 1 || binary.BigEndian.Uint64(row["f"][0].Value) != 1 {
		t.Errorf("the retried increment applied %v", row)
	}
	wantStale("ReadModifyWriteRow", 4)

	c.loc.setStale(c.c.name, false)
	if _, err := c.tbl.SampleRowKeys(ctx); err != nil {
		t.Fatal(err)
	}
	wantStale("SampleRowKeys", 5)

	// A location that stays stale: maxAttempts attempts, then the owner's
	// answer as UNAVAILABLE (which the official clients retry), its
	// not-serving detail kept.
	c.loc.setStale(c.c.name, true)
	calls := c.c.fault.calls.Load()
	err = c.a.gw.checkRow(ctx, "zzz")
	wantCode(t, err, codes.Unavailable)
	if !hasNotServingDetail(err) {
		t.Errorf("the answer after the retries lost its not-serving detail: %v", err)
	}
	if n := c.c.fault.calls.Load() - calls; n != maxAttempts {
		t.Errorf("stale owner asked %d times, want %d", n, maxAttempts)
	}
	// A deadline too close for the next backoff ends the retries early:
	// 2 s holds the first backoffs (10, 20, … 500 ms: about 1.6 s over 8
	// attempts) but not all 20 attempts' (about 7 s), and leaves the first
	// attempt time enough on a loaded machine (15 ms did not).
	c.loc.setStale(c.c.name, true)
	calls = c.c.fault.calls.Load()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = c.a.gw.checkRow(dctx, "zzz")
	if n := c.c.fault.calls.Load() - calls; n >= maxAttempts || status.Code(err) != codes.Unavailable || !hasNotServingDetail(err) {
		t.Errorf("with a deadline: %d attempts, err %v", n, err)
	}
}

// hasNotServingDetail reports whether err's status carries a
// tabletpb.NotServing detail, whatever its code.
func hasNotServingDetail(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if _, ok := d.(*tabletpb.NotServing); ok {
			return true
		}
	}
	return false
}

// checkRow writes row through the gateway's MutateRow directly.
func (g *Gateway) checkRow(ctx context.Context, row string) error {
	_, err := g.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tableName(gwTable), RowKey: []byte(row),
		Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("c"), TimestampMicros: 1000, Value: []byte("v")}}}}})
	return err
}

func gwMut(v string) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set("f", "c", ts(1), []byte(v))
	return m
}

func TestGatewayReadRowsResumesAfterLastRow(t *testing.T) {
	c := newGWCluster(t)
	ctx := c.ctx
	gwFill(t, c)
	for _, r := range []string{"o", "q", "s", "u"} {
		gwPut(t, ctx, c.tbl, r, "v-"+r)
	}
	// B (one response per row) fails after two rows: the gateway resumes
	// after the last row it relayed, each row once, in order.
	c.b.fault.readFailAfter.Store(2)
	if got, want := gwKeys(t, ctx, c.tbl, bigtable.InfiniteRange("")), "a c e g n o p q r s t u"; got != want {
		t.Errorf("forward: got %q, want %q", got, want)
	}
	c.b.fault.readFailAfter.Store(3)
	if got, want := gwKeys(t, ctx, c.tbl, bigtable.InfiniteRange(""), bigtable.ReverseScan()), "u t s r q p o n g e c a"; got != want {
		t.Errorf("reverse: got %q, want %q", got, want)
	}
	c.b.fault.readFailAfter.Store(2)
	if got, want := gwKeys(t, ctx, c.tbl, bigtable.InfiniteRange("f"), bigtable.LimitRows(5)), "g n o p q"; got != want {
		t.Errorf("limit: got %q, want %q", got, want)
	}
	if r := c.a.retries(); r != 3 {
		t.Errorf("retries = %v, want 3", r)
	}
	if inv := c.loc.invalidations(); len(inv) != 3 || inv[0].Server != c.b.name {
		t.Errorf("invalidated %v, want B's location thrice", inv)
	}
}

// TestGatewayReadRowsStats: a read through a gateway that spans both
// owners returns one set of request stats, the owners' summed (the
// official client's callback runs once, with every row and cell).
func TestGatewayReadRowsStats(t *testing.T) {
	c := newGWCluster(t)
	gwFill(t, c)
	calls := 0
	var got bigtable.ReadIterationStats
	n := 0
	err := c.tbl.ReadRows(c.ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true },
		bigtable.WithFullReadStats(func(s *bigtable.FullReadStats) { calls++; got = s.ReadIterationStats }))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(gwRows))
	if calls != 1 || n != len(gwRows) || got.RowsReturnedCount != want || got.CellsReturnedCount != want || got.RowsSeenCount < want || got.CellsSeenCount < want {
		t.Errorf("stats callback called %d times with %+v for %d rows, want once with %d rows and cells returned", calls, got, n, want)
	}
	if c.a.requests("ReadRows", routeForwarded) == 0 {
		t.Error("the read was not forwarded: it tests nothing of the gateway")
	}
}
