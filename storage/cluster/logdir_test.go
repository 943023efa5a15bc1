package cluster

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestServerLogDir: a tablet server with ServerConfig.LogDir writes its
// commit log as files in LocalLogDir(LogDir, its name), and nothing under
// logs/ in the store.
func TestServerLogDir(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	t.Cleanup(func() { _ = kv.Close() })
	store := newLocalStore(t)
	root := t.TempDir()
	s, err := StartTabletServer(ctx, ServerConfig{Coord: kv, Store: store, LogDir: root, Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A write to a tablet of this server goes to its log.
	tbl := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{{ID: "t-0"}}, Generation: 1}
	if err := s.host.OpenTable(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	if _, err := s.commit.Write(ctx, commitlog.Record{Tablet: "t-0", FirstSeq: 1, Mutation: cell.RowMutation{Row: []byte("r"),
		Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, []byte("v"))}}}); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(LocalLogDir(root, s.Name()))
	if err != nil || len(files) == 0 {
		t.Fatalf("the server's log directory %s: %v, %d files", LocalLogDir(root, s.Name()), err, len(files))
	}
	if objs, err := store.List(ctx, LogsPrefix); err != nil || len(objs) != 0 {
		t.Errorf("objects under %s: %v (%v), want none", LogsPrefix, objs, err)
	}
}

// TestLoadFromLocalDeadLog: a dead server's log kept as files is found by
// its name under the same LogDir and replayed whole when its tablets are
// loaded — also when the master asks for the sorted copy, which a local
// log never has — and ListLogSegments refuses to list it for sorting.
func TestLoadFromLocalDeadLog(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	root := t.TempDir()
	a := startSorterLogDir(t, store, root)
	dead := deadServerName(t)
	tbl := meta.Table{
		ID:       meta.TableID{Instance: "i", Table: "t"},
		Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{
			{ID: "t-0", End: []byte("t-1")},
			{ID: "t-1", Start: []byte("t-1")},
		},
		Generation: 1,
	}
	writeLog(t, commitlog.Options{Dir: LocalLogDir(root, dead)}, []string{"t-0", "t-1"}, 40)
	catalog := master.NewBlobCatalog(store, "catalog")
	if err := catalog.Create(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	conns := newConns(nil)
	defer conns.close()
	sc := &serverClient{conns: conns, catalog: catalog}
	if err := sc.SortLog(ctx, dead, []string{a.name}); err == nil || !strings.Contains(err.Error(), "replayed, not sorted") {
		t.Errorf("sorting a local log: %v, want refused", err)
	}
	for i, ref := range tbl.Tablets {
		at := assign.Tablet{ID: assign.TabletID(ref.ID), Table: tbl.ID.String(), Start: string(ref.Start), End: string(ref.End)}
		if err := sc.Load(ctx, a.name, at, master.RecoverySource{From: dead, Sorted: i == 1}); err != nil {
			t.Fatalf("load %s: %v", ref.ID, err)
		}
	}
	for _, id := range []string{"t-0", "t-1"} {
		if rows := unloadedRows(t, a.host, store, tbl, id); rows != 20 {
			t.Fatalf("tablet %s holds %d rows, want the dead log's 20", id, rows)
		}
	}
}

// TestLogGCLocalLogs: the master's collector deletes a dead server's log
// kept as files (MasterConfig.LogDir) by the rule it applies in the store,
// and keeps a live server's.
func TestLogGCLocalLogs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	kv := coord.NewLocal(coord.LocalConfig{})
	t.Cleanup(func() { _ = kv.Close() })
	live, dead := deadServerName(t), deadServerName(t)
	for _, s := range []string{live, dead} {
		writeLog(t, commitlog.Options{Dir: LocalLogDir(root, s)}, []string{"x"}, 5)
	}
	sess, err := kv.NewSession(ctx, coord.SessionOptions{Name: "live"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryLock(ctx, coord.ServerKey(live), []byte("addr")); err != nil {
		t.Fatal(err)
	}
	local, err := blob.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	g := newLogGC(blob.NewMemory(), kv, time.Minute)
	g.local = local
	now := time.Now()
	g.now = func() time.Time { return now }
	noLast := func(context.Context) ([]string, error) { return nil, nil }
	if deleted, err := g.collect(ctx, noLast); err != nil || len(deleted) != 0 {
		t.Fatalf("first round (logs young): deleted %v, %v", deleted, err)
	}
	now = now.Add(2 * time.Minute)
	deleted, err := g.collect(ctx, noLast)
	if err != nil || len(deleted) != 1 || deleted[0] != logName(dead) {
		t.Fatalf("deleted %v (%v), want the dead server's log %s", deleted, err, logName(dead))
	}
	if _, err := os.Stat(LocalLogDir(root, dead)); !os.IsNotExist(err) {
		t.Errorf("the dead log's directory is still there: %v", err)
	}
	if files, err := os.ReadDir(LocalLogDir(root, live)); err != nil || len(files) == 0 {
		t.Errorf("the live server's log: %v, %d files", err, len(files))
	}
}

// TestStartTabletServerHTTPPortTaken: a tablet server whose --http port
// is taken fails to start with the listener's error — after its gRPC
// server started serving, whose goroutine then sees it stopped and asks
// for a stop of its own, which must not shut the server down twice (it
// closed a closed channel and crashed the process).
func TestStartTabletServerHTTPPortTaken(t *testing.T) {
	ctx := context.Background()
	kv := coord.NewLocal(coord.LocalConfig{})
	t.Cleanup(func() { _ = kv.Close() })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for range 5 {
		s, err := StartTabletServer(ctx, ServerConfig{Coord: kv, Store: newLocalStore(t), LogDir: t.TempDir(), Addr: "127.0.0.1:0",
			HTTPAddr: taken.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			s.Close()
			t.Fatalf("started with --http %s taken", taken.Addr())
		}
		if !strings.Contains(err.Error(), taken.Addr().String()) {
			t.Fatalf("error %q does not name the taken address %s", err, taken.Addr())
		}
	}
}
