//go:build integration

package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/master/adminextpb"
)

// mergeKey spreads rows over eight prefixes a…h, so that dropping some
// prefixes shrinks every part of the key space.
func mergeKey(i int) string { return fmt.Sprintf("%c%05d", 'a'+i%8, i) }

// tabletOps returns the admin extension's TabletOperations through
// server addr (which forwards to the active master).
func tabletOps(t *testing.T, addr string) adminextpb.TabletOperationsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminextpb.NewTabletOperationsClient(conn)
}

// listTablets returns the table's tablets as the active master sees them.
func listTablets(ctx context.Context, ops adminextpb.TabletOperationsClient, table string) ([]*adminextpb.TabletInfo, error) {
	resp, err := ops.ListTablets(ctx, &adminextpb.ListTabletsRequest{Table: "projects/p/instances/i/tables/" + table})
	if err != nil {
		return nil, err
	}
	return resp.GetTablets(), nil
}

// readers reads the table's rows in a loop (full scans and point
// reads of rows that must exist) until stop, counting reads and failures.
type readers struct {
	reads, failures atomic.Int64
	mu              sync.Mutex
	firstErr        error
	wg              sync.WaitGroup
}

func startReaders(ctx context.Context, tbl *bigtable.Table, want func() map[string]bool) *readers {
	r := &readers{}
	fail := func(err error) {
		r.failures.Add(1)
		r.mu.Lock()
		if r.firstErr == nil {
			r.firstErr = err
		}
		r.mu.Unlock()
	}
	r.wg.Go(func() {
		for ctx.Err() == nil {
			seen := make(map[string]bool)
			err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(row bigtable.Row) bool {
				seen[row.Key()] = true
				return true
			}, bigtable.RowFilter(bigtable.StripValueFilter()))
			if ctx.Err() != nil {
				return
			}
			r.reads.Add(1)
			if err != nil {
				fail(fmt.Errorf("scan: %w", err))
				continue
			}
			// Rows only leave the set, before they are deleted: those
			// still in it now existed during the whole scan.
			exp := want()
			missing := 0
			for k := range exp {
				if !seen[k] {
					missing++
				}
			}
			if missing > 0 {
				fail(fmt.Errorf("scan missed %d of the %d rows that must exist", missing, len(exp)))
			}
		}
	})
	r.wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			exp := want()
			var key string
			for k := range exp {
				key = k
				break
			}
			if key == "" {
				continue
			}
			row, err := tbl.ReadRow(ctx, key)
			if ctx.Err() != nil {
				return
			}
			r.reads.Add(1)
			if err != nil {
				fail(fmt.Errorf("read %s: %w", key, err))
			} else if row.Key() != key && want()[key] {
				fail(fmt.Errorf("read %s: row missing", key))
			}
		}
	})
	return r
}

// TestClusterMergesShrunkTable: a table split into many tablets by its
// writes is merged on request (the admin extension, through a tablet
// server) and, once most of it is dropped (DropRowRange, then major
// compactions), merged back by the master by itself (--merge-below) to
// fewer tablets — no row lost, no read failing meanwhile.
func TestClusterMergesShrunkTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 2, splitSize: 64 << 10, memtableSize: 32 << 10,
		extraMaster: []string{"--merge-below", "24576"}})
	entry := c.servers[0]
	cl, admin := officialClients(t, ctx, entry.addr)
	if err := admin.CreateTable(ctx, "shrink"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "shrink", "f"); err != nil {
		t.Fatal(err)
	}
	tbl := cl.Open("shrink")
	const rows = 1200
	val := []byte(strings.Repeat("v", 400))
	for i := 0; i < rows; i += 100 {
		var keys []string
		var muts []*bigtable.Mutation
		for j := i; j < i+100; j++ {
			m := bigtable.NewMutation()
			m.Set("f", "c", bigtable.Timestamp(1000), val)
			keys = append(keys, mergeKey(j))
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			t.Fatalf("ApplyBulk: %v %v", err, errs)
		}
	}
	var mu sync.Mutex
	live := make(map[string]bool, rows)
	for i := range rows {
		live[mergeKey(i)] = true
	}
	want := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]bool, len(live))
		for k := range live {
			out[k] = true
		}
		return out
	}
	ops := tabletOps(t, entry.addr)
	var before int
	waitFor(t, 90*time.Second, "≥6 tablets, all served", func() (bool, string) {
		tabs, err := listTablets(ctx, ops, "shrink")
		if err != nil {
			return false, err.Error()
		}
		before = len(tabs)
		for _, tb := range tabs {
			if tb.GetServer() == "" {
				return false, fmt.Sprintf("%d tablets, %s unassigned", len(tabs), tb.GetTabletId())
			}
		}
		return len(tabs) >= 6, fmt.Sprintf("%d tablets", len(tabs))
	})
	t.Logf("%d tablets after the writes", before)

	rctx, stopReaders := context.WithCancel(ctx)
	rd := startReaders(rctx, tbl, want)

	// A merge on request: the first tablet with its neighbour.
	// The table may still be splitting after the writes: a merge asked
	// for tablets that split meanwhile is refused (FAILED_PRECONDITION)
	// and asked again, as an operator would, over the new layout.
	var resp *adminextpb.MergeTabletsResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		resp, err = ops.MergeTablets(ctx, &adminextpb.MergeTabletsRequest{Table: "projects/p/instances/i/tables/shrink", RowKey: []byte("a")})
		if err == nil {
			break
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			t.Fatalf("MergeTablets: %v", err)
		}
		t.Logf("MergeTablets refused, asking again: %v", err)
		time.Sleep(time.Second)
	}
	t.Logf("merged %s and %s into %s [%q, %q)", resp.GetLeftId(), resp.GetRightId(), resp.GetMerged().GetTabletId(),
		resp.GetMerged().GetStartKey(), resp.GetMerged().GetEndKey())
	waitFor(t, 30*time.Second, "the merged tablet served", func() (bool, string) {
		tabs, err := listTablets(ctx, ops, "shrink")
		if err != nil {
			return false, err.Error()
		}
		for _, tb := range tabs {
			if tb.GetTabletId() == resp.GetMerged().GetTabletId() {
				return tb.GetServer() != "", "unassigned"
			}
		}
		return false, "not listed"
	})
	// Bad requests change nothing.
	if _, err := ops.MergeTablets(ctx, &adminextpb.MergeTabletsRequest{Table: "projects/p/instances/i/tables/shrink", RowKey: []byte("zzz")}); err == nil {
		t.Fatal("merging the last tablet: no error")
	}

	// Shrink: drop seven of the eight prefixes, delete all but a tenth of
	// the last's rows, then compact every tablet.
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		// Rows leave the set that must exist before they are deleted.
		mu.Lock()
		for k := range live {
			if strings.HasPrefix(k, p) {
				delete(live, k)
			}
		}
		mu.Unlock()
		if err := admin.DropRowRange(ctx, "shrink", p); err != nil {
			t.Fatalf("DropRowRange %s: %v", p, err)
		}
	}
	var dels []string
	var muts []*bigtable.Mutation
	for k := range want() {
		if k[len(k)-1] != '1' {
			m := bigtable.NewMutation()
			m.DeleteRow()
			dels = append(dels, k)
			muts = append(muts, m)
		}
	}
	mu.Lock()
	for _, k := range dels {
		delete(live, k)
	}
	mu.Unlock()
	if errs, err := tbl.ApplyBulk(ctx, dels, muts); err != nil || errs != nil {
		t.Fatalf("deleting rows: %v %v", err, errs)
	}
	tabs, err := listTablets(ctx, ops, "shrink")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs {
		if _, err := ops.CompactTablet(ctx, &adminextpb.CompactTabletRequest{Table: "projects/p/instances/i/tables/shrink", RowKey: tb.GetStartKey(), Major: true}); err != nil {
			t.Logf("compacting %s: %v (merged meanwhile?)", tb.GetTabletId(), err)
		}
	}
	var after int
	lastCompaction := time.Now()
	waitFor(t, 120*time.Second, "the shrunk table merged back to fewer tablets", func() (bool, string) {
		tabs, err := listTablets(ctx, ops, "shrink")
		if err != nil {
			return false, err.Error()
		}
		after = len(tabs)
		for _, tb := range tabs {
			if tb.GetServer() == "" {
				return false, fmt.Sprintf("%d tablets, %s unassigned", len(tabs), tb.GetTabletId())
			}
		}
		var sizes []string
		compact := time.Since(lastCompaction) > 5*time.Second
		for _, tb := range tabs {
			sizes = append(sizes, fmt.Sprintf("%q:%d/%v", tb.GetStartKey(), tb.GetBytes(), tb.GetSharesFiles()))
			if compact && (tb.GetSharesFiles() || tb.GetBytes() >= 24576) {
				// Split or merged since the compactions above: its size
				// is known once its files are its own and its deleted
				// rows gone.
				_, _ = ops.CompactTablet(ctx, &adminextpb.CompactTabletRequest{Table: "projects/p/instances/i/tables/shrink", RowKey: tb.GetStartKey(), Major: true})
				lastCompaction = time.Now()
			}
		}
		return after <= 3 && after <= (before-1)/2, fmt.Sprintf("%d tablets %v", after, sizes)
	})
	t.Logf("%d tablets after the shrink (from %d)", after, before)
	time.Sleep(2 * time.Second)
	stopReaders()
	rd.wg.Wait()
	if n := rd.failures.Load(); n > 0 {
		t.Fatalf("%d of %d reads failed during the merges; first: %v", n, rd.reads.Load(), rd.firstErr)
	}
	t.Logf("%d reads during the merges, none failed", rd.reads.Load())

	// Every row that must exist does, and no dropped row came back.
	exp := want()
	got := make(map[string]bool)
	if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(row bigtable.Row) bool {
		got[row.Key()] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for k := range exp {
		if !got[k] {
			t.Fatalf("row %s lost", k)
		}
	}
	for k := range got {
		if !exp[k] {
			t.Fatalf("dropped row %s is back", k)
		}
	}
	t.Logf("%d rows, as expected", len(got))
}
