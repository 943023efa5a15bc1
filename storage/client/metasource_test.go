package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// fakeLocator is the cluster's Locator service: GetRoot answers root (nil:
// not assigned).
type fakeLocator struct {
	clusterpb.UnimplementedLocatorServer
	mu   sync.Mutex
	root *meta.Location
}

func (f *fakeLocator) GetRoot(context.Context, *clusterpb.GetRootRequest) (*clusterpb.GetRootResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.root == nil {
		return &clusterpb.GetRootResponse{}, nil
	}
	b, err := json.Marshal(*f.root)
	if err != nil {
		return nil, err
	}
	return &clusterpb.GetRootResponse{RootJson: b}, nil
}

// refusal makes a server answer "not serving" for the rows of a range of
// table "d", as a server that no longer holds that tablet does.
type refusal struct {
	mu     sync.Mutex
	ranges [][2]string // [start, end), "" end unbounded
	// loading are ranges refused for a while after their first request
	// (refuseFor): tablets the server is still loading.
	loading []loadingRange
	hits    atomic.Int64
	// loseNext, when set, makes the next mutation of table "d" applied
	// and then answered UNAVAILABLE, as a server killed before its answer
	// left; from then on the server refuses every row of "d".
	loseNext atomic.Bool
}

func (r *refusal) refuse(start, end string) {
	r.mu.Lock()
	r.ranges = append(r.ranges, [2]string{start, end})
	r.mu.Unlock()
}

// loadingRange is a range refused until for after its first request.
type loadingRange struct {
	start, end string
	for_       time.Duration
	until      time.Time // zero until the first request
}

// refuseFor makes the server answer "not serving" for the rows of [start,
// end) during d after the first request for one of them, as a server
// still loading the tablet does; then it serves them.
func (r *refusal) refuseFor(start, end string, d time.Duration) {
	r.mu.Lock()
	r.loading = append(r.loading, loadingRange{start: start, end: end, for_: d})
	r.mu.Unlock()
}

func (r *refusal) allow(start, end string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rg := range r.ranges {
		if rg == [2]string{start, end} {
			r.ranges = append(r.ranges[:i], r.ranges[i+1:]...)
			return
		}
	}
}

func (r *refusal) refused(table string, row []byte) bool {
	if table != "projects/tabula/instances/dev/tables/d" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	in := func(start, end string) bool {
		return bytes.Compare(row, []byte(start)) >= 0 && (end == "" || bytes.Compare(row, []byte(end)) < 0)
	}
	for _, rg := range r.ranges {
		if in(rg[0], rg[1]) {
			r.hits.Add(1)
			return true
		}
	}
	for i := range r.loading {
		l := &r.loading[i]
		if !in(l.start, l.end) {
			continue
		}
		if l.until.IsZero() {
			l.until = time.Now().Add(l.for_)
		}
		if time.Now().Before(l.until) {
			r.hits.Add(1)
			return true
		}
	}
	return false
}

func (r *refusal) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if m, ok := req.(interface {
		GetTableName() string
		GetRowKey() []byte
	}); ok && r.refused(m.GetTableName(), m.GetRowKey()) {
		return nil, notServing()
	}
	if m, ok := req.(*bigtablepb.MutateRowRequest); ok && m.GetTableName() == "projects/tabula/instances/dev/tables/d" && r.loseNext.CompareAndSwap(true, false) {
		if _, err := h(ctx, req); err != nil {
			return nil, err
		}
		r.refuse("", "")
		return nil, status.Error(codes.Unavailable, "the answer was lost: the connection closed")
	}
	return h(ctx, req)
}

func (r *refusal) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &refusingStream{ServerStream: ss, r: r})
}

type refusingStream struct {
	grpc.ServerStream
	r *refusal
}

func (s *refusingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	switch req := m.(type) {
	case *bigtablepb.ReadRowsRequest:
		for _, rr := range req.GetRows().GetRowRanges() {
			if s.r.refused(req.GetTableName(), rr.GetStartKeyClosed()) {
				return notServing()
			}
		}
		for _, k := range req.GetRows().GetRowKeys() {
			if s.r.refused(req.GetTableName(), k) {
				return notServing()
			}
		}
	case *bigtablepb.MutateRowsRequest:
		for _, e := range req.GetEntries() {
			if s.r.refused(req.GetTableName(), e.GetRowKey()) {
				return notServing()
			}
		}
	case *scriptpb.RunRequest:
		if s.r.refused(req.GetTableName(), req.GetStartKey()) {
			return notServing()
		}
	}
	return nil
}

// clusterServer is one in-process tablet server of testCluster.
type clusterServer struct {
	addr, name string // name: "<addr>/<nonce>", as METADATA records it
	host       *tabletserver.Host
	refusal    *refusal
}

// testCluster is two tablet servers holding table "d" (each opens all of
// it: which one serves a tablet is what METADATA says) and, on the first,
// METADATA, plus the Locator service on both.
type testCluster struct {
	t       *testing.T
	servers [2]*clusterServer
	loc     *fakeLocator
	meta    bigtablepb.BigtableClient // writes METADATA rows on servers[0]
	ts      atomic.Int64              // METADATA cell timestamps, increasing
	epoch   atomic.Uint64
}

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, loc: &fakeLocator{}}
	tc.ts.Store(1000)
	for i := range tc.servers {
		tc.servers[i] = tc.startServer(i == 0)
	}
	cc, err := grpc.NewClient(tc.servers[0].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	tc.meta = bigtablepb.NewBigtableClient(cc)
	root := meta.RootLocation(tc.servers[0].name, tc.epoch.Add(1))
	tc.loc.mu.Lock()
	tc.loc.root = &root
	tc.loc.mu.Unlock()
	// The root tablet's row for the meta tablet, then the user tablets:
	// d-0 [, b) and d-2 [d, f) and d-4 [k, ) on server 0, the others on 1.
	tc.setLocation(meta.MetadataTable, meta.MetaTabletID, meta.RootTabletEnd(), nil, 0)
	for i, r := range splitTablets(dataSplits) {
		tc.setLocation(dTable, r.ID, r.Start, r.End, i%2)
	}
	return tc
}

var dTable = meta.TableID{Instance: "dev", Table: "d"}

func (tc *testCluster) startServer(withMetadata bool) *clusterServer {
	t := tc.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{Store: blob.NewMemory(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if withMetadata {
		if err := host.OpenTable(ctx, meta.Table{ID: meta.MetadataTable, Families: meta.MetadataFamilies(), Tablets: []meta.TabletRef{{ID: "m"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.OpenTable(ctx, meta.Table{ID: dTable, Families: map[string]tabletdesc.Family{"f": {}, "g": {}, "c": {}},
		Tablets: splitTablets(dataSplits)}); err != nil {
		t.Fatal(err)
	}
	s := &clusterServer{host: host, refusal: &refusal{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.refusal.unary), grpc.StreamInterceptor(s.refusal.stream))
	bigtablepb.RegisterBigtableServer(srv, tabletserver.NewDataService(host, tabletserver.DataOptions{}))
	scriptpb.RegisterScriptsServer(srv, tabletserver.NewScriptService(host, tabletserver.ScriptOptions{MaxLimits: scripts.Limits{Steps: 100_000}}))
	clusterpb.RegisterLocatorServer(srv, tc.loc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Stop()
		host.Close()
	})
	s.addr = lis.Addr().String()
	s.name = s.addr + "/" + fmt.Sprintf("nonce%d", time.Now().UnixNano())
	return s
}

// setLocation writes the METADATA row of a tablet: its state (id, range)
// and its location on servers[server] (-1: unassigned) at a new epoch.
func (tc *testCluster) setLocation(table meta.TableID, id string, start, end []byte, server int) uint64 {
	tc.t.Helper()
	name := ""
	if server >= 0 {
		name = tc.servers[server].name
	}
	epoch := tc.epoch.Add(1)
	ts := tc.ts.Add(1000)
	st, err := meta.StateMutation(table, tabletdesc.State{ID: id, Start: start, End: end}, ts)
	if err != nil {
		tc.t.Fatal(err)
	}
	lm := meta.LocationMutation(table, end, name, epoch, ts)
	st.Mutations = append(st.Mutations, lm.Mutations...)
	if _, err := tc.meta.MutateRow(context.Background(), &bigtablepb.MutateRowRequest{TableName: meta.MetadataTableName,
		RowKey: st.Row, Mutations: MutationsToPB(st.Mutations)}); err != nil {
		tc.t.Fatalf("writing METADATA row of %s: %v", id, err)
	}
	return epoch
}

// source returns a MetadataSource entering at servers[0], with its own
// connections.
func (tc *testCluster) source() MetadataSource {
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	tc.t.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
	})
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		mu.Lock()
		defer mu.Unlock()
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
	entry, err := dial(tc.servers[0].addr)
	if err != nil {
		tc.t.Fatal(err)
	}
	return NewMetadataSource(entry, dial)
}

// dial returns a Client entering the cluster at servers[0].
func (tc *testCluster) dial() *Client {
	c, err := Dial(tc.servers[0].addr, Options{})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// serverOf returns the index of the server whose name is name.
func (tc *testCluster) serverOf(name string) int {
	for i, s := range tc.servers {
		if s.name == name || s.addr == name {
			return i
		}
	}
	return -1
}

// rowsOn returns the keys of table "d" stored on servers[i].
func (tc *testCluster) rowsOn(i int) []string {
	tc.t.Helper()
	cc, err := grpc.NewClient(tc.servers[i].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tc.t.Fatal(err)
	}
	defer cc.Close()
	st, err := bigtablepb.NewBigtableClient(cc).ReadRows(context.Background(), &bigtablepb.ReadRowsRequest{TableName: "projects/tabula/instances/dev/tables/d"})
	if err != nil {
		tc.t.Fatal(err)
	}
	var m chunkMerger
	var keys []string
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			tc.t.Fatal(err)
		}
		rows, err := m.add(resp.GetChunks())
		if err != nil {
			tc.t.Fatal(err)
		}
		for _, r := range rows {
			keys = append(keys, string(r.Key))
		}
	}
}

// wantServer is the server of the row's tablet as startCluster places them.
func wantServer(row string) int {
	i := 0
	for i < len(dataSplits) && row >= dataSplits[i] {
		i++
	}
	return i % 2
}

// TestMetadataSourceLocate: Locate through the three levels finds the
// tablets of several rows, on both servers, and LocateRange covers ranges
// across tablets without gaps.
func TestMetadataSourceLocate(t *testing.T) {
	tc := startCluster(t)
	src := tc.source()
	cache := NewLocationCache(LocationCacheOptions{Prefetch: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, row := range []string{"", "a", "b", "c", "d", "e9", "f", "j", "k", "zz"} {
		l, err := cache.Locate(ctx, src, dTable, []byte(row))
		if err != nil {
			t.Fatalf("Locate(%q): %v", row, err)
		}
		if !l.Contains([]byte(row)) || l.Table != dTable {
			t.Errorf("Locate(%q) = %+v: does not hold the row", row, l)
		}
		if got := tc.serverOf(l.Server); got != wantServer(row) {
			t.Errorf("Locate(%q) on server %d (%s), want %d", row, got, l.Server, wantServer(row))
		}
	}
	// The meta tablet's location came from the root and is cached too.
	if l, ok := cache.Lookup(meta.MetadataTable, meta.RootTabletEnd()); !ok || l.TabletID != meta.MetaTabletID {
		t.Errorf("meta tablet not cached: %+v %v", l, ok)
	}
	for _, tcase := range []struct {
		start, end string
		ids        []string
	}{
		{"", "", []string{"d-0", "d-1", "d-2", "d-3", "d-4"}},
		{"c", "g", []string{"d-1", "d-2", "d-3"}},
		{"c", "d", []string{"d-1"}},
		{"e", "", []string{"d-2", "d-3", "d-4"}},
	} {
		for _, fresh := range []bool{true, false} {
			cc := cache
			if fresh {
				cc = NewLocationCache(LocationCacheOptions{Prefetch: 1})
			}
			var end []byte
			if tcase.end != "" {
				end = []byte(tcase.end)
			}
			locs, err := LocateRange(ctx, cc, src, dTable, []byte(tcase.start), end)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for i, l := range locs {
				ids = append(ids, l.TabletID)
				if i > 0 && !bytes.Equal(locs[i-1].End, l.Start) {
					t.Errorf("LocateRange(%q, %q): gap between %+v and %+v", tcase.start, tcase.end, locs[i-1], l)
				}
			}
			if fmt.Sprint(ids) != fmt.Sprint(tcase.ids) {
				t.Errorf("LocateRange(%q, %q) fresh=%v = %v, want %v", tcase.start, tcase.end, fresh, ids, tcase.ids)
			}
		}
	}
}

// TestMetadataSourceErrors: a root not assigned is ErrUnassigned; a stale
// METADATA tablet location (a server that does not hold METADATA) is
// dropped and looked up again through the root.
func TestMetadataSourceErrors(t *testing.T) {
	tc := startCluster(t)
	src := tc.source()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cache := NewLocationCache(LocationCacheOptions{})
	stale := meta.Location{Table: meta.MetadataTable, Start: meta.RootTabletEnd(), TabletID: meta.MetaTabletID, Server: tc.servers[1].name, Epoch: 0}
	cache.Insert(stale)
	l, err := cache.Locate(ctx, src, dTable, []byte("x"))
	if err != nil || tc.serverOf(l.Server) != 0 {
		t.Fatalf("Locate past a stale METADATA tablet = %+v, %v", l, err)
	}
	if ml, _ := cache.Lookup(meta.MetadataTable, meta.RootTabletEnd()); tc.serverOf(ml.Server) != 0 {
		t.Errorf("meta tablet location %+v, want server 0", ml)
	}

	tc.loc.mu.Lock()
	root := tc.loc.root
	tc.loc.root = nil
	tc.loc.mu.Unlock()
	_, err = NewLocationCache(LocationCacheOptions{}).Locate(ctx, src, dTable, []byte("x"))
	if !errors.Is(err, ErrUnassigned) {
		t.Fatalf("Locate with no root = %v, want ErrUnassigned", err)
	}
	// LocateRange retries until the deadline, then answers UNAVAILABLE.
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = LocateRange(short, NewLocationCache(LocationCacheOptions{}), src, dTable, nil, nil)
	cancel2()
	if !errors.Is(err, ErrUnassigned) || status.Code(err) != codes.Unavailable {
		t.Fatalf("LocateRange with no root = %v (%v), want ErrUnassigned, UNAVAILABLE", err, status.Code(err))
	}
	// It succeeds once the root is assigned.
	go func() {
		time.Sleep(100 * time.Millisecond)
		tc.loc.mu.Lock()
		tc.loc.root = root
		tc.loc.mu.Unlock()
	}()
	if locs, err := LocateRange(ctx, NewLocationCache(LocationCacheOptions{}), src, dTable, nil, nil); err != nil || len(locs) != 5 {
		t.Fatalf("LocateRange after the root's assignment = %v, %v", locs, err)
	}
}

// TestClusterClient: the client's data operations, Tablets and scripts go
// through METADATA to the server holding each tablet.
func TestClusterClient(t *testing.T) {
	tc := startCluster(t)
	c := tc.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tabs, err := c.Tablets(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if len(tabs) != 5 {
		t.Fatalf("Tablets = %+v, want 5", tabs)
	}
	for i, tb := range tabs {
		if want := tc.servers[i%2].addr; tb.Server != want {
			t.Errorf("tablet %d [%q, %q) on %q, want %q", i, tb.Start, tb.End, tb.Server, want)
		}
	}

	var keys []string
	var rms []cell.RowMutation
	for ch := 'a'; ch <= 'm'; ch++ {
		for i := range 2 {
			k := fmt.Sprintf("%c%d", ch, i)
			keys = append(keys, k)
			rm := cell.RowMutation{Row: []byte(k), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte(fmt.Sprint(len(keys))))}}
			if i == 0 {
				if err := c.Apply(ctx, "d", rm); err != nil {
					t.Fatal(err)
				}
			} else {
				rms = append(rms, rm)
			}
		}
	}
	if _, err := c.ApplyBulk(ctx, "d", rms, BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each row is on the server METADATA names, and only there.
	for i := range tc.servers {
		for _, k := range tc.rowsOn(i) {
			if wantServer(k) != i {
				t.Errorf("row %s written to server %d", k, i)
			}
		}
	}
	if n := len(tc.rowsOn(0)) + len(tc.rowsOn(1)); n != len(keys) {
		t.Errorf("%d rows on the servers, want %d", n, len(keys))
	}

	rows := scanAll(t, c, ScanOptions{})
	if len(rows) != len(keys) {
		t.Fatalf("scan: %d rows, want %d", len(rows), len(keys))
	}
	for i, r := range rows {
		if string(r.Key) != keys[i] {
			t.Fatalf("scan row %d = %s, want %s", i, r.Key, keys[i])
		}
	}
	if rows := scanAll(t, c, ScanOptions{Start: []byte("c"), End: []byte("g"), Reverse: true}); len(rows) != 8 || string(rows[0].Key) != "f1" {
		t.Errorf("reverse scan [c, g): %d rows, first %s", len(rows), rows[0].Key)
	}
	if r, ok, err := c.ReadRow(ctx, "d", []byte("e1"), ScanOptions{}); err != nil || !ok || string(r.Cells[0].Value) != "10" {
		t.Fatalf("ReadRow(e1) = %+v, %v, %v", r, ok, err)
	}
	if v, err := c.Increment(ctx, "d", []byte("k0"), "c", []byte("n"), 5); err != nil || v != 5 {
		t.Fatalf("Increment = %d, %v", v, err)
	}
	if got := tc.rowsOn(0); !contains(got, "k0") {
		t.Errorf("increment of k0 not on server 0: %v", got)
	}

	var st ScriptStats
	res, err := c.RunScript(ctx, "d", sumScript, ScriptOptions{Start: []byte("a"), End: []byte("g"), Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	// Rows a0..f1 hold 1..12; the range spans 4 tablets on alternating servers.
	if got := res.Table("total").Entries[0].Value; got != int64(78) {
		t.Errorf("script total = %v, want 78", got)
	}
	if st.Runs != 4 {
		t.Errorf("script runs = %d, want 4", st.Runs)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// move records in METADATA that tablet id of "d", [start, end), is now on
// servers[to], which serves it; the other server refuses it ("not
// serving"), as the server it left does.
func (tc *testCluster) move(id, start, end string, to int) uint64 {
	tc.t.Helper()
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	epoch := tc.setLocation(dTable, id, []byte(start), e, to)
	tc.servers[to].refusal.allow(start, end)
	tc.servers[1-to].refusal.refuse(start, end)
	return epoch
}

// TestClusterStaleLocation: a tablet moves (METADATA says so, the old
// server answers "not serving"): cached locations are dropped and the
// operations — Apply, a bulk apply, a scan, a script — reach the new
// server.
func TestClusterStaleLocation(t *testing.T) {
	tc := startCluster(t)
	c := tc.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Tablets(ctx, "d"); err != nil { // fill the cache
		t.Fatal(err)
	}
	p := c.data()
	if old, _ := p.cache.Lookup(dTable, []byte("d")); tc.serverOf(old.Server) != 0 {
		t.Fatalf("d-2 cached on %s", old.Server)
	}
	checkCached := func(row string, server int, epoch uint64) {
		t.Helper()
		if l, _ := p.cache.Lookup(dTable, []byte(row)); tc.serverOf(l.Server) != server || l.Epoch != epoch {
			t.Fatalf("cached location of %s: %+v, want server %d epoch %d", row, l, server, epoch)
		}
	}
	epoch := tc.move("d-2", "d", "f", 1)
	epoch4 := tc.move("d-4", "k", "", 1)

	set := func(row string) cell.RowMutation {
		return cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), cell.ServerTimestamp, []byte("7"))}}
	}
	// Not idempotent: retried because "not serving" means not applied.
	if err := c.Apply(ctx, "d", set("d1")); err != nil {
		t.Fatal(err)
	}
	checkCached("d", 1, epoch)
	if !contains(tc.rowsOn(1), "d1") || contains(tc.rowsOn(0), "d1") {
		t.Fatal("d1 not written to the new server only")
	}
	if tc.servers[0].refusal.hits.Load() == 0 {
		t.Fatal("the old server was not asked")
	}
	// Bulk: k's tablet is still cached on server 0.
	if _, err := c.ApplyBulk(ctx, "d", []cell.RowMutation{set("a1"), set("k1"), set("x1")}, BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	checkCached("x", 1, epoch4)
	on0, on1 := tc.rowsOn(0), tc.rowsOn(1)
	if !contains(on1, "k1") || !contains(on1, "x1") || !contains(on0, "a1") || contains(on0, "k1") || contains(on0, "x1") {
		t.Fatalf("bulk apply after a move: server 0 %v, server 1 %v", on0, on1)
	}
	// Back to server 0: e1 goes there.
	epoch = tc.move("d-2", "d", "f", 0)
	if err := c.Apply(ctx, "d", set("e1")); err != nil {
		t.Fatal(err)
	}
	checkCached("d", 0, epoch)
	if !contains(tc.rowsOn(0), "e1") || contains(tc.rowsOn(1), "e1") {
		t.Fatal("e1 not written to the new server only")
	}
	// A scan over a stale location: server 1 holds d1.
	epoch = tc.move("d-2", "d", "f", 1)
	if rows := scanAll(t, c, ScanOptions{Start: []byte("d"), End: []byte("f")}); len(rows) != 1 || string(rows[0].Key) != "d1" {
		t.Fatalf("scan after a move: %+v", rows)
	}
	checkCached("d", 1, epoch)
	// A script over a stale location: server 0 holds e1 = 7.
	epoch = tc.move("d-2", "d", "f", 0)
	var st ScriptStats
	res, err := c.RunScript(ctx, "d", sumScript, ScriptOptions{Start: []byte("d"), End: []byte("f"), Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Table("total").Entries[0].Value; got != int64(7) || st.Runs != 1 {
		t.Errorf("script after a move: total %v, want 7 (stats %+v)", got, st)
	}
	checkCached("d", 0, epoch)
	// A filter script too, in key order across both servers.
	tc.move("d-2", "d", "f", 1)
	var keys []string
	if _, err := c.FilterRows(ctx, "d", keepAll, ScriptOptions{Start: []byte("a"), End: []byte("z")}, func(r Row) bool {
		keys = append(keys, string(r.Key))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[a1 d1 k1 x1]" {
		t.Errorf("FilterRows after a move = %v", keys)
	}
}

// keepAll is a filter script keeping every row.
const keepAll = `
emit keep <- true;
`

// TestClusterDeadServer: a cached location names a server that is gone
// (nothing listens at its address): the call fails UNAVAILABLE without
// reaching any server, so even a non-idempotent write is retried after
// the location is dropped.
func TestClusterDeadServer(t *testing.T) {
	tc := startCluster(t)
	c := tc.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Tablets(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String() + "/gone"
	lis.Close()
	p := c.data()
	cur, _ := p.cache.Lookup(dTable, []byte("x"))
	p.cache.Insert(meta.Location{Table: dTable, Start: cur.Start, End: cur.End, TabletID: cur.TabletID, Server: dead, Epoch: cur.Epoch})
	if l, _ := p.cache.Lookup(dTable, []byte("x")); l.Server != dead {
		t.Fatalf("dead location not cached: %+v", l)
	}
	rm := cell.RowMutation{Row: []byte("x1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), cell.ServerTimestamp, []byte("v"))}}
	if err := c.Apply(ctx, "d", rm); err != nil {
		t.Fatalf("Apply past a dead server: %v", err)
	}
	if !contains(tc.rowsOn(0), "x1") {
		t.Fatal("x1 not written")
	}
	// The same for a scan and a batch.
	p.cache.Insert(meta.Location{Table: dTable, Start: cur.Start, End: cur.End, TabletID: cur.TabletID, Server: dead, Epoch: cur.Epoch})
	if rows := scanAll(t, c, ScanOptions{Start: []byte("x")}); len(rows) != 1 {
		t.Fatalf("scan past a dead server: %+v", rows)
	}
	p.cache.Insert(meta.Location{Table: dTable, Start: cur.Start, End: cur.End, TabletID: cur.TabletID, Server: dead, Epoch: cur.Epoch})
	rm.Row = []byte("x2")
	if _, err := c.ApplyBulk(ctx, "d", []cell.RowMutation{rm}, BulkOptions{}); err != nil {
		t.Fatalf("ApplyBulk past a dead server: %v", err)
	}
}

// TestClusterUnassignedRetried: a tablet without a server (being moved) is
// looked up again with backoff until it is assigned.
func TestClusterUnassignedRetried(t *testing.T) {
	tc := startCluster(t)
	tc.setLocation(dTable, "d-3", []byte("f"), []byte("k"), -1)
	c := tc.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		time.Sleep(150 * time.Millisecond)
		tc.setLocation(dTable, "d-3", []byte("f"), []byte("k"), 0)
	}()
	start := time.Now()
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("g1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Errorf("Apply succeeded before the tablet was assigned")
	}
	if !contains(tc.rowsOn(0), "g1") {
		t.Fatal("g1 not on server 0")
	}
	// Unassigned past the deadline: UNAVAILABLE, matching ErrUnassigned.
	tc.setLocation(dTable, "d-3", []byte("f"), []byte("k"), -1)
	c2 := tc.dial()
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	err := c2.Apply(short, "d", cell.RowMutation{Row: []byte("g2"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}})
	if status.Code(err) != codes.Unavailable || !errors.Is(err, ErrUnassigned) {
		t.Fatalf("Apply to an unassigned tablet = %v, want UNAVAILABLE and ErrUnassigned", err)
	}
}

// TestDevFallsBackToServerLocator: `tabula dev` has no Locator service;
// the client lists the one server's tablets.
func TestDevFallsBackToServerLocator(t *testing.T) {
	c, _ := startDataServer(t, tabletserver.DataOptions{})
	l, ml, err := c.auto.choose(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.(*serverLocator); !ok || ml != nil {
		t.Fatalf("locator on a dev server = %T, %v", l, ml)
	}
	tabs, err := c.Tablets(context.Background(), "d")
	if err != nil || len(tabs) != len(dataSplits)+1 {
		t.Fatalf("Tablets = %+v, %v", tabs, err)
	}
}

// fixedRoot is a MetadataSource whose root's location is given (as the
// cluster's processes read it from the lock service).
type fixedRoot struct {
	MetadataSource
	root meta.Location
}

func (f fixedRoot) Root(context.Context) (meta.Location, error) { return f.root, nil }

// TestClientMetadataOption: with Options.Metadata the client never asks
// GetRoot, and reads and writes METADATA itself like any table.
func TestClientMetadataOption(t *testing.T) {
	tc := startCluster(t)
	tc.loc.mu.Lock()
	root := *tc.loc.root
	tc.loc.root = nil // GetRoot would say "unassigned"
	tc.loc.mu.Unlock()
	cc, err := grpc.NewClient(tc.servers[1].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := New(cc, Options{Metadata: fixedRoot{MetadataSource: tc.source(), root: root}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Apply(ctx, "d", cell.RowMutation{Row: []byte("z9"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if !contains(tc.rowsOn(0), "z9") {
		t.Fatal("z9 not on server 0")
	}
	var rows []cell.Row
	sc := c.Scan(ctx, meta.MetadataTableName, ScanOptions{})
	for sc.Next() {
		rows = append(rows, sc.Row())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 { // the meta tablet's row and five of table d
		t.Fatalf("METADATA scan: %d rows", len(rows))
	}
	if l, err := meta.ParseLocation(rows[0]); err != nil || l.TabletID != meta.MetaTabletID {
		t.Fatalf("first METADATA row: %+v, %v", l, err)
	}
	rm := meta.LocationMutation(dTable, nil, tc.servers[1].name, 99, tc.ts.Add(1000))
	if err := c.Apply(ctx, meta.MetadataTableName, rm); err != nil {
		t.Fatalf("Apply to METADATA: %v", err)
	}
	if tabs, err := c.Tablets(ctx, "d"); err != nil || tabs[4].Server != tc.servers[1].addr {
		t.Fatalf("Tablets after the METADATA write = %+v, %v", tabs, err)
	}
}

// TestMetadataSourceRootOutlivesTheEntry: once the server a source entered
// by is gone, Root asks the servers the locations it read named.
func TestMetadataSourceRootOutlivesTheEntry(t *testing.T) {
	tc := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// An entry server of its own (the Locator service only), to stop.
	srv := grpc.NewServer()
	clusterpb.RegisterLocatorServer(srv, tc.loc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	entry, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer entry.Close()
	inner := tc.source().(*metadataSource)
	src := NewMetadataSource(entry, inner.dial)

	cache := NewLocationCache(LocationCacheOptions{})
	if _, err := cache.Locate(ctx, src, dTable, []byte("c")); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := rootFrom(ctx, entry); status.Code(err) != codes.Unavailable {
		t.Fatalf("the stopped entry answered %v, want UNAVAILABLE", err)
	}
	root, err := src.Root(ctx)
	if err != nil {
		t.Fatalf("Root with the entry gone: %v", err)
	}
	if root.TabletID != meta.RootTabletID || tc.serverOf(root.Server) != 0 {
		t.Fatalf("Root with the entry gone = %+v, want the root on server 0", root)
	}
	// A source that read nothing yet has no one else to ask.
	if _, err := NewMetadataSource(entry, inner.dial).Root(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("a fresh source with the entry gone: %v, want UNAVAILABLE", err)
	}
}

// TestWriteOutcomeUnknownAfterARetry: an idempotent write applied by a
// server whose answer was lost (UNAVAILABLE after it reached the server),
// then retried and refused ("not serving") until the retries ran out,
// reports ErrOutcomeUnknown with status UNAVAILABLE — not the last
// attempt's "not serving", which would say it was not applied — and the
// write is in fact there.
func TestWriteOutcomeUnknownAfterARetry(t *testing.T) {
	giveUpSoon(t)
	tc := startCluster(t)
	c := tc.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	row := "c"
	srv := tc.servers[wantServer(row)]
	rm := cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v1"))}}
	if !Idempotent(rm) {
		t.Fatal("the test's write must be idempotent (retried after UNAVAILABLE)")
	}
	srv.refusal.loseNext.Store(true)
	err := c.Apply(ctx, "d", rm)
	if !errors.Is(err, ErrOutcomeUnknown) || status.Code(err) != codes.Unavailable {
		t.Fatalf("Apply after a lost answer and refusals: %v (code %v), want ErrOutcomeUnknown, UNAVAILABLE", err, status.Code(err))
	}
	if _, ns := tabletpb.NotServingDetail(err); ns {
		t.Fatalf("the error carries a not-serving detail, which says 'not applied': %v", err)
	}
	srv.refusal.allow("", "")
	got, ok, err := c.ReadRow(ctx, "d", []byte(row), ScanOptions{})
	if err != nil || !ok || len(got.Cells) != 1 || string(got.Cells[0].Value) != "v1" {
		t.Fatalf("row %s after the write of unknown outcome: %+v %v %v; want the write applied", row, got, ok, err)
	}

	// A write refused from the start was not applied, and says so.
	srv.refusal.refuse("", "")
	err = c.Apply(ctx, "d", cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 2000, []byte("v2"))}})
	if _, ns := tabletpb.NotServingDetail(err); !ns || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a write refused at every attempt: %v, want its not-serving answer", err)
	}
}

// TestNotServingRetriedWhileTabletLoads: the servers METADATA names for
// every tablet of "d" answer "not serving" for half a second after the first
// request (a table just created, whose tablets are still being loaded,
// or tablets being moved); writes (one row, and a bulk over every tablet),
// point reads and scans issued at once all succeed — the client backs off
// instead of spending its retries in microseconds (four refreshes without
// a pause made 1950 of 2000 bulk entries fail "not serving").
func TestNotServingRetriedWhileTabletLoads(t *testing.T) {
	tc := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loading := func() {
		for _, s := range tc.servers {
			s.refusal.mu.Lock()
			s.refusal.loading = nil
			s.refusal.mu.Unlock()
			s.refusal.refuseFor("", "", 500*time.Millisecond)
		}
	}
	set := func(row, v string) cell.RowMutation {
		return cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte(v))}}
	}

	loading()
	if err := tc.dial().Apply(ctx, "d", set("a1", "v")); err != nil {
		t.Fatalf("Apply while the tablet loads: %v", err)
	}

	loading()
	var rms []cell.RowMutation
	for _, p := range []string{"a", "c", "e", "g", "m", "z"} { // every tablet
		for i := range 50 {
			rms = append(rms, set(fmt.Sprintf("%s%03d", p, i), "v"))
		}
	}
	if errs, err := tc.dial().ApplyBulk(ctx, "d", rms, BulkOptions{}); err != nil {
		t.Fatalf("ApplyBulk while the tablets load: %v (%d entries)", err, len(errs))
	}

	loading()
	if r, ok, err := tc.dial().ReadRow(ctx, "d", []byte("m007"), ScanOptions{}); err != nil || !ok || len(r.Cells) != 1 {
		t.Fatalf("ReadRow while the tablet loads = %+v, %v, %v", r, ok, err)
	}

	loading()
	rows := scanAll(t, tc.dial(), ScanOptions{})
	if len(rows) != len(rms)+1 {
		t.Fatalf("a scan while the tablets load returned %d rows, want %d", len(rows), len(rms)+1)
	}
	hits := tc.servers[0].refusal.hits.Load() + tc.servers[1].refusal.hits.Load()
	if hits == 0 {
		t.Fatal("no request was refused: the test tested nothing")
	}
}

// TestNotServingBackoff: the pacing of "not serving" retries — the first
// at once, then doubling to the cap — adds up to several seconds before
// the client gives up.
func TestNotServingBackoff(t *testing.T) {
	p := notServingPolicy{limit: 16, first: 10 * time.Millisecond, max: time.Second}
	want := []time.Duration{0, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := p.wait(i + 1); got != w*time.Millisecond {
			t.Errorf("wait before retry %d = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	var total time.Duration
	for n := 1; n <= notServingRetries.limit; n++ {
		total += notServingRetries.wait(n)
	}
	if total < 5*time.Second {
		t.Errorf("the default retries wait %v in all before giving up; a tablet loading on a busy machine needs seconds", total)
	}
}

// giveUpSoon makes the client give up on "not serving" after a few quick
// retries for the rest of t, for tests of what it answers then (the
// default retries take seconds).
func giveUpSoon(t *testing.T) {
	saved := notServingRetries
	notServingRetries = notServingPolicy{limit: 4, first: time.Millisecond, max: time.Millisecond}
	t.Cleanup(func() { notServingRetries = saved })
}

// TestApplyBulkUnservedTabletCostsOneStreak: when a tablet stays unserved,
// the entries of an ApplyBulk bound for it share one span of "not
// serving" retries — the first entry retries, the others then fail after
// one attempt each — instead of each waiting out the retries alone (a
// bulk of thousands of rows would take hours); entries of other tablets
// are applied.
func TestApplyBulkUnservedTabletCostsOneStreak(t *testing.T) {
	saved := notServingRetries
	notServingRetries = notServingPolicy{limit: 16, first: time.Millisecond, max: 20 * time.Millisecond}
	t.Cleanup(func() { notServingRetries = saved })
	tc := startCluster(t)
	refusing := tc.servers[wantServer("g")]
	refusing.refusal.refuse("f", "k") // tablet d-3, for good
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const unserved = 200
	var rms []cell.RowMutation
	for i := range unserved {
		rms = append(rms, cell.RowMutation{Row: []byte(fmt.Sprintf("g%03d", i)), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}})
	}
	rms = append(rms, cell.RowMutation{Row: []byte("a1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}})
	errs, err := tc.dial().ApplyBulk(ctx, "d", rms, BulkOptions{})
	if err == nil {
		t.Fatal("ApplyBulk to a tablet that is never served succeeded")
	}
	for i, e := range errs[:unserved] {
		if _, ns := tabletpb.NotServingDetail(e); !ns {
			t.Fatalf("entry %d: %v, want its not-serving answer", i, e)
		}
	}
	if errs[unserved] != nil {
		t.Fatalf("the entry of a served tablet: %v", errs[unserved])
	}
	// One batch, the first entry's retries, then one attempt per entry.
	limit := int64(1 + notServingRetries.limit + 1 + unserved)
	if hits := refusing.refusal.hits.Load(); hits > limit {
		t.Fatalf("the unserved tablet was asked %d times for %d entries, want at most %d", hits, unserved, limit)
	}
}

// TestFailFastNotServing: with Options.FailFastNotServing (the cluster's
// own processes reading METADATA) "not serving" is retried a few times at
// once and returned, without waiting for the tablet.
func TestFailFastNotServing(t *testing.T) {
	tc := startCluster(t)
	srv := tc.servers[wantServer("g")]
	srv.refusal.refuse("f", "k")
	c, err := Dial(tc.servers[0].addr, Options{FailFastNotServing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Apply(ctx, "d", cell.RowMutation{Row: []byte("g1"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}})
	if _, ns := tabletpb.NotServingDetail(err); !ns {
		t.Fatalf("Apply to a tablet that refuses: %v, want its not-serving answer", err)
	}
	if hits := srv.refusal.hits.Load(); hits != int64(failFastNotServing.limit+1) {
		t.Fatalf("the tablet was asked %d times, want %d (the attempt and %d quick retries)", hits, failFastNotServing.limit+1, failFastNotServing.limit)
	}
}
