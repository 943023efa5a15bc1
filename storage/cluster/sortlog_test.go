package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

func TestSortSegments(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "down")
	segs := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, tc := range []struct {
		name    string
		sorters []string
		fail    func(sorter string, seg uint64, attempt int) error
		wantErr bool
		// the sorters that must never succeed at a segment
		never []string
	}{
		{name: "all well", sorters: []string{"a", "b", "c"}},
		{name: "one sorter", sorters: []string{"a"}},
		{name: "a dead sorter", sorters: []string{"dead", "a", "b"}, never: []string{"dead"},
			fail: func(s string, _ uint64, _ int) error {
				if s == "dead" {
					return unavailable
				}
				return nil
			}},
		{name: "transient failure", sorters: []string{"a", "b"},
			fail: func(_ string, seg uint64, attempt int) error {
				if seg == 4 && attempt == 1 {
					return unavailable
				}
				return nil
			}},
		{name: "corrupt segment", sorters: []string{"a", "b", "c"}, wantErr: true,
			fail: func(_ string, seg uint64, _ int) error {
				if seg == 5 {
					return status.Error(codes.DataLoss, "corrupt")
				}
				return nil
			}},
		{name: "fails everywhere", sorters: []string{"a", "b"}, wantErr: true,
			fail: func(_ string, seg uint64, _ int) error {
				if seg == 2 {
					return unavailable
				}
				return nil
			}},
		{name: "every sorter dead", sorters: []string{"a", "b"}, wantErr: true, never: []string{"a", "b"},
			fail: func(string, uint64, int) error { return unavailable }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			attempts := make(map[uint64]int)
			busy := make(map[string]bool)
			sorted := make(map[uint64]string)
			err := sortSegments(context.Background(), segs, tc.sorters, func(ctx context.Context, sorter string, seg uint64) error {
				mu.Lock()
				if busy[sorter] {
					t.Errorf("sorter %s given two segments at once", sorter)
				}
				busy[sorter] = true
				attempts[seg]++
				n := attempts[seg]
				mu.Unlock()
				time.Sleep(time.Millisecond)
				var err error
				if tc.fail != nil {
					err = tc.fail(sorter, seg, n)
				}
				mu.Lock()
				busy[sorter] = false
				if err == nil {
					if prev, ok := sorted[seg]; ok {
						t.Errorf("segment %d sorted twice (%s, %s)", seg, prev, sorter)
					}
					sorted[seg] = sorter
				}
				mu.Unlock()
				return err
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("sortSegments: %v, want error %v", err, tc.wantErr)
			}
			for seg, n := range attempts {
				if n > maxSortAttempts {
					t.Errorf("segment %d tried %d times", seg, n)
				}
			}
			if tc.name == "corrupt segment" && attempts[5] != 1 {
				t.Errorf("a corrupt segment was tried %d times, want once", attempts[5])
			}
			if !tc.wantErr && len(sorted) != len(segs) {
				t.Errorf("%d segments sorted, want %d", len(sorted), len(segs))
			}
			for seg, s := range sorted {
				for _, bad := range tc.never {
					if s == bad {
						t.Errorf("segment %d sorted by %s", seg, s)
					}
				}
			}
		})
	}
	if err := sortSegments(context.Background(), nil, []string{"a"}, nil); err != nil {
		t.Fatalf("no segments: %v", err)
	}
}

// sorterServer is a tablet server reduced to what sorting and loading
// need: the TabletControl service over a Host, on loopback.
type sorterServer struct {
	name string
	host *tabletserver.Host
	logs *syncBuffer // what the control service logged
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startSorter(t *testing.T, store blob.Store) *sorterServer {
	t.Helper()
	return startSorterLogDir(t, store, "")
}

// startSorterLogDir is startSorter with its log, and the dead servers',
// as files under logDir when set (ServerConfig.LogDir).
func startSorterLogDir(t *testing.T, store blob.Store, logDir string) *sorterServer {
	t.Helper()
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	name := NewServerName(lis.Addr().String())
	logs := &syncBuffer{}
	logger := slog.New(slog.DiscardHandler)
	ts := &TabletServer{cfg: ServerConfig{Coord: coord.NewLocal(coord.LocalConfig{}), Store: store, LogDir: logDir}, name: name, log: slog.New(slog.NewTextHandler(logs, nil))}
	lg, err := commitlog.Open(ctx, ts.logOptions(name))
	if err != nil {
		t.Fatal(err)
	}
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{Store: store, Log: lg, Partial: true, Logger: logger,
		StateStore: tablet.NewBlobStateStore(store, StatePrefix), SplitCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ts.host = host
	srv := grpc.NewServer()
	clusterpb.RegisterTabletControlServer(srv, newTabletControlService(ts))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = host.Close()
		_ = lg.Close()
	})
	return &sorterServer{name: name, host: host, logs: logs}
}

// deadServerName is a server name at an address nobody listens on.
func deadServerName(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return NewServerName(addr)
}

// writeDeadLog writes n records of tablets to dead's log in small
// segments, as the dead server left it.
func writeDeadLog(t *testing.T, store blob.Store, dead string, tablets []string, n int) {
	t.Helper()
	writeLog(t, commitlog.Options{Store: store, Prefix: LogPrefix(dead)}, tablets, n)
}

// writeLog writes n records of tablets to the log opts describes, in
// small segments.
func writeLog(t *testing.T, opts commitlog.Options, tablets []string, n int) {
	t.Helper()
	ctx := context.Background()
	opts.SegmentBytes = 1 << 10
	lg, err := commitlog.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		tb := tablets[i%len(tablets)]
		rec := commitlog.Record{Tablet: tb, FirstSeq: uint64(i + 1), Mutation: cell.RowMutation{
			Row:       fmt.Appendf(nil, "%s-row-%03d", tb, i),
			Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, fmt.Appendf(nil, "value-%d", i))},
		}}
		if _, err := lg.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSortLogAndLoad sorts a dead server's log through the TabletControl
// RPCs, on two live sorters and one that is gone (listed first, so that it
// is asked first and its segments go elsewhere), then loads the dead
// server's tablets with RecoverySource.Sorted: every tablet's rows are back.
func TestSortLogAndLoad(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	a, b := startSorter(t, store), startSorter(t, store)
	dead := deadServerName(t)
	tbl := meta.Table{
		ID:       meta.TableID{Instance: "i", Table: "t"},
		Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{
			{ID: "t-0", End: []byte("t-1")},
			{ID: "t-1", Start: []byte("t-1"), End: []byte("t-2")},
			{ID: "t-2", Start: []byte("t-2")},
		},
		Generation: 1,
	}
	ids := []string{"t-0", "t-1", "t-2"}
	writeDeadLog(t, store, dead, ids, 150)
	catalog := master.NewBlobCatalog(store, "catalog")
	if err := catalog.Create(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	conns := newConns(nil)
	defer conns.close()
	sc := &serverClient{conns: conns, catalog: catalog}

	if err := sc.SortLog(ctx, dead, []string{deadServerName(t), a.name, b.name}); err != nil {
		t.Fatal(err)
	}
	deadLog := commitlog.Options{Store: store, Prefix: LogPrefix(dead)}
	segs, err := commitlog.Segments(ctx, deadLog)
	if err != nil || len(segs) < 4 {
		t.Fatalf("the dead log has %d segments (%v); the test wants several", len(segs), err)
	}
	for _, id := range ids {
		var fromLog, fromSorted []commitlog.Record
		if _, err := commitlog.Replay(ctx, deadLog, tabletdesc.LogPosition{}, func(_ tabletdesc.LogPosition, r commitlog.Record) error {
			if r.Tablet == id {
				fromLog = append(fromLog, r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		sorted := commitlog.SortedLog{Store: store, Prefix: SortedLogPrefix(dead)}
		if _, err := commitlog.ReplaySorted(ctx, deadLog, sorted, id, tabletdesc.LogPosition{}, func(_ tabletdesc.LogPosition, r commitlog.Record) error {
			fromSorted = append(fromSorted, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(fromLog) == 0 || !reflect.DeepEqual(fromSorted, fromLog) {
			t.Fatalf("tablet %s: %d records from the sorted copy, %d from the log", id, len(fromSorted), len(fromLog))
		}
	}

	// Load the tablets on a from the sorted copy, but t-2 after a segment
	// of the copy is gone: a falls back to the log itself for it.
	for i, ref := range tbl.Tablets {
		if i == 2 {
			if err := store.Delete(ctx, SortedLogPrefix(dead)+fmt.Sprintf("/%020d.sorted", segs[len(segs)-1])); err != nil {
				t.Fatal(err)
			}
		}
		at := assign.Tablet{ID: assign.TabletID(ref.ID), Table: tbl.ID.String(), Start: string(ref.Start), End: string(ref.End)}
		if err := sc.Load(ctx, a.name, at, master.RecoverySource{From: dead, Sorted: true}); err != nil {
			t.Fatalf("load %s: %v", ref.ID, err)
		}
	}
	if got := len(a.host.ServedTablets()); got != 3 {
		t.Fatalf("a serves %d tablets, want 3", got)
	}
	logged := a.logs.String()
	for _, want := range []string{
		"tablet=t-0 table=i/t recovered_from=" + dead + " sorted_log=true",
		"tablet=t-1 table=i/t recovered_from=" + dead + " sorted_log=true",
		"sorted log incomplete; replaying the log itself\" tablet=t-2",
		"tablet=t-2 table=i/t recovered_from=" + dead + " sorted_log=false",
	} {
		if !strings.Contains(logged, want) {
			t.Errorf("a's log lacks %q:\n%s", want, logged)
		}
	}
	for _, id := range ids {
		if rows := unloadedRows(t, a.host, store, tbl, id); rows != 50 {
			t.Fatalf("tablet %s holds %d rows, want 50", id, rows)
		}
	}
}

// unloadedRows unloads tablet id from host (which flushes it), then opens
// its saved state from store and counts its rows.
func unloadedRows(t *testing.T, host *tabletserver.Host, store blob.Store, tbl meta.Table, id string) int {
	t.Helper()
	ctx := context.Background()
	if err := host.UnloadTablet(ctx, id); err != nil {
		t.Fatal(err)
	}
	tb, err := tablet.Open(ctx, tablet.Options{ID: id, Store: store, Dir: tbl.Dir(), Schema: tbl.Schema(),
		StateStore: tablet.NewBlobStateStore(store, StatePrefix), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	rows := 0
	if err := tb.Scan(ctx, tablet.ScanOptions{}, func(cell.Row) error { rows++; return nil }); err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestSortLogSegmentErrors(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	a := startSorter(t, store)
	dead := deadServerName(t)
	writeDeadLog(t, store, dead, []string{"x", "y"}, 60)
	conns := newConns(nil)
	defer conns.close()
	sc := &serverClient{conns: conns}
	c, err := sc.tabletControl(a.name)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dead string
		seg  uint64
		want codes.Code
	}{
		{a.name, 1, codes.FailedPrecondition}, // its own log
		{"", 1, codes.InvalidArgument},
		{dead, 99, codes.NotFound},
		{dead, 1, codes.OK},
	} {
		_, err := c.SortLogSegment(ctx, &clusterpb.SortLogSegmentRequest{DeadServer: tc.dead, Segment: tc.seg})
		if status.Code(err) != tc.want {
			t.Errorf("SortLogSegment(%q, %d): %v, want %v", tc.dead, tc.seg, err, tc.want)
		}
	}

	// A corrupt segment: DATA_LOSS, and SortLog gives up at once.
	name := LogPrefix(dead) + fmt.Sprintf("/%020d/%020d.log", 1, 0)
	data, err := store.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1
	if err := store.Put(ctx, name, data); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SortLogSegment(ctx, &clusterpb.SortLogSegmentRequest{DeadServer: dead, Segment: 1}); status.Code(err) != codes.DataLoss {
		t.Fatalf("sorting a corrupt segment: %v, want DATA_LOSS", err)
	}
	if err := sc.SortLog(ctx, dead, []string{a.name}); status.Code(errors.Unwrap(err)) != codes.DataLoss {
		t.Fatalf("SortLog over a corrupt segment: %v", err)
	}
	if err := sc.SortLog(ctx, dead, nil); err == nil {
		t.Fatal("SortLog with no sorters succeeded")
	}
}
