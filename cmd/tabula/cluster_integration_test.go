//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster/statuspage"
)

// spreadKey spreads rows over the key space, so that splits happen
// everywhere rather than only at the end.
func spreadKey(prefix string, i int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s%d", prefix, i)
	return fmt.Sprintf("%08x-%s%06d", h.Sum32(), prefix, i)
}

// writeRows writes n rows of about valueBytes each through cl, 100 per
// bulk call, with explicit timestamps (so retries are idempotent).
func writeRows(t *testing.T, ctx context.Context, tbl *bigtable.Table, prefix string, n, valueBytes int) {
	t.Helper()
	val := []byte(strings.Repeat("v", valueBytes))
	for i := 0; i < n; i += 100 {
		var keys []string
		var muts []*bigtable.Mutation
		for j := i; j < min(i+100, n); j++ {
			m := bigtable.NewMutation()
			m.Set("f", "c", bigtable.Timestamp(1000), val)
			keys = append(keys, spreadKey(prefix, j))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil {
			t.Fatalf("ApplyBulk rows %d..: %v", i, err)
		}
		for k, e := range errs {
			if e != nil {
				t.Fatalf("ApplyBulk row %s: %v", keys[k], e)
			}
		}
	}
}

// userTablets counts each server's tablets of user tables.
func userTablets(st statuspage.MasterStatus) map[string]int {
	out := make(map[string]int)
	for _, s := range st.Servers {
		out[s.ID] = 0
		for _, tb := range s.Tablets {
			if !strings.Contains(tb.Table, "METADATA") {
				out[s.ID]++
			}
		}
	}
	return out
}

// gatewayCounts sums, over the servers, tabula_gateway_requests_total by
// route ("local", "forwarded").
func gatewayCounts(t *testing.T, servers []*roleProc) map[string]float64 {
	t.Helper()
	out := make(map[string]float64)
	for _, s := range servers {
		resp, err := httpGet(s.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "tabula_gateway_requests_total{") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, route := range []string{"local", "forwarded"} {
				if strings.Contains(line, `route="`+route+`"`) {
					out[route] += v
				}
			}
			out[line[:i]] += v
		}
		resp.Body.Close()
	}
	return out
}

// TestClusterSplitSpreadScanAndRecover: three tablet servers, a table
// loaded with a small split size splits into at least 20 tablets spread
// within ±30% of even; a scan through the Go client reaches each owner
// directly (no gateway hop); kill -9 of a server during continuous writes
// gets its tablets served elsewhere, and every acknowledged write reads
// back.
func TestClusterSplitSpreadScanAndRecover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// With mutual TLS between every party (#14).
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3, splitSize: 48 << 10, memtableSize: 32 << 10, mtls: true})
	entry := c.servers[0]
	cl, admin := officialClients(t, ctx, entry.addr)
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatalf("CreateTable through a tablet server: %v", err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	tbl := cl.Open("t")
	const rows = 2500
	writeRows(t, ctx, tbl, "r", rows, 1000)

	// Splits and balance.
	var spread map[string]int
	took := waitFor(t, 120*time.Second, "≥20 tablets within ±30% over 3 servers", func() (bool, string) {
		_, st := c.activeMaster()
		spread = userTablets(st)
		total := 0
		for _, n := range spread {
			total += n
		}
		if len(spread) != 3 || total < 20 || len(st.Unassigned) > 0 {
			return false, fmt.Sprintf("%v, %d unassigned", spread, len(st.Unassigned))
		}
		mean := float64(total) / 3
		for _, n := range spread {
			if float64(n) < 0.7*mean || float64(n) > 1.3*mean {
				return false, fmt.Sprintf("%v: unbalanced", spread)
			}
		}
		return true, ""
	})
	t.Logf("tablets per server %v after %v", spread, took.Round(time.Millisecond))

	// Let splits and moves finish: a scan racing a move may meet a
	// location that changed after the client read it, which the gateway
	// then rightly routes.
	last, since := "", time.Now()
	waitFor(t, 60*time.Second, "tablets stable for 3s", func() (bool, string) {
		_, st := c.activeMaster()
		cur := fmt.Sprint(userTablets(st), len(st.Unassigned))
		if cur != last {
			last, since = cur, time.Now()
		}
		return time.Since(since) > 3*time.Second, last
	})

	// A scan through the Go client goes to the owners directly.
	gc, err := client.Dial(entry.addr, client.Options{Project: "p", Instance: "i", TLS: tlsFor(entry.addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	tabs, err := gc.Tablets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(tabs) < 20 {
		t.Fatalf("client lists %d tablets, want ≥20", len(tabs))
	}
	before := gatewayCounts(t, c.servers)
	s := gc.Scan(ctx, "t", client.ScanOptions{})
	n := 0
	for s.Next() {
		n++
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	after := gatewayCounts(t, c.servers)
	if n != rows {
		t.Fatalf("scan returned %d rows, want %d", n, rows)
	}
	for k, v := range after {
		if strings.Contains(k, "forwarded") && v != before[k] {
			t.Logf("%s: %v → %v", k, before[k], v)
		}
	}
	if after["forwarded"] != before["forwarded"] {
		t.Fatalf("the scan made %v gateway hops, want 0", after["forwarded"]-before["forwarded"])
	}
	if after["local"]-before["local"] < float64(len(tabs))/2 {
		t.Fatalf("only %v local requests for %d tablets", after["local"]-before["local"], len(tabs))
	}
	t.Logf("scan of %d rows over %d tablets: %v local requests, 0 forwarded", n, len(tabs), after["local"]-before["local"])

	sessionCallsMatch(t, ctx, c, entry.addr, tbl, rows)

	// kill -9 of a tablet server during continuous writes.
	victim := c.servers[2]
	writer := c.servers[0]
	wcl, _ := officialClients(t, ctx, writer.addr)
	wtbl := wcl.Open("t")
	var mu sync.Mutex
	var acked []string
	var attempted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := spreadKey(fmt.Sprintf("w%d-", w), i)
				m := bigtable.NewMutation()
				m.Set("f", "c", bigtable.Timestamp(2000), []byte(key))
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				attempted.Add(1)
				err := wtbl.Apply(wctx, key, m)
				wcancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, key)
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	c.kill(victim)
	recovered := waitFor(t, 60*time.Second, "the killed server's tablets served elsewhere", func() (bool, string) {
		_, st := c.activeMaster()
		for _, s := range st.Servers {
			if strings.HasPrefix(s.ID, victim.addr+"/") {
				return false, "victim still listed"
			}
		}
		if len(st.Unassigned) > 0 {
			return false, fmt.Sprintf("%d unassigned", len(st.Unassigned))
		}
		return len(st.Servers) == 2, fmt.Sprintf("%d servers", len(st.Servers))
	})
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("tablets of the killed server served elsewhere %v after kill -9; %d writes acknowledged meanwhile", recovered.Round(time.Millisecond), len(acked))
	// The issue asks for 30 s. Where the time goes (19 s on the quiet
	// 2-core machine): the master finds the server unreachable for 4 s and
	// ends its session, waits 1.1×TTL = 11 s (the server may believe its
	// lease valid that long), sorts its log (under a second) and loads its
	// tablets in parallel from the sorted copy (3 s).
	if recovered > 30*time.Second {
		t.Errorf("the killed server's tablets were served elsewhere after %v, want within 30s", recovered.Round(time.Millisecond))
	}
	// Its log was sorted once, on the survivors, and the tablets loaded
	// from the sorted copy.
	_, st := c.activeMaster()
	sorted := false
	for _, ev := range st.Events {
		if ev.Kind == "sortlog" && strings.HasPrefix(ev.Server, victim.addr+"/") {
			if strings.Contains(ev.Detail, ":") {
				t.Errorf("sorting the killed server's log failed: %s", ev.Detail)
			}
			sorted = true
		}
	}
	if !sorted {
		t.Errorf("no sortlog event for the killed server among the master's events %+v", st.Events)
	}
	for _, key := range acked {
		r, err := wtbl.ReadRow(ctx, key)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if len(r["f"]) == 0 || string(r["f"][0].Value) != key {
			t.Fatalf("acknowledged write %s lost: %v", key, r)
		}
	}
	count := 0
	if err := wtbl.ReadRows(ctx, bigtable.PrefixRange(""), func(r bigtable.Row) bool { count++; return true }); err != nil {
		t.Fatal(err)
	}
	// A write that timed out may still have been applied (the usual
	// unknown outcome): the count lies between the acknowledged and the
	// attempted writes.
	if count < rows+len(acked) || int64(count) > int64(rows)+attempted.Load() {
		t.Fatalf("table has %d rows, want %d acknowledged up to %d attempted", count, rows+len(acked), int64(rows)+attempted.Load())
	}
}

// sessionCallsMatch: an official client that dials the entry server itself
// sends its point reads and single-row writes on sessions, which the
// gateway routes to the rows' servers as it routes the classic calls: the
// reads return what classic reads of the same rows return.
func sessionCallsMatch(t *testing.T, ctx context.Context, c *testCluster, addr string, classic *bigtable.Table, rows int) {
	t.Helper()
	sc, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true},
		option.WithEndpoint(addr), option.WithoutAuthentication(), option.WithGRPCDialOption(tlsconfig.DialOption(tlsFor(addr))))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	st := sc.Open("t")
	calls := func() float64 {
		var n float64
		for _, s := range c.servers {
			resp, err := httpGet(s.http + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			v, err := devtest.SumMetric(resp.Body, "tabula_session_calls_total", `code="OK"`)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			n += v
		}
		return n
	}
	// The client turns sessions on after its first poll of the server's
	// configuration.
	waitFor(t, 30*time.Second, "a read on a session", func() (bool, string) {
		before := calls()
		if _, err := st.ReadRow(ctx, spreadKey("r", 0)); err != nil {
			t.Fatal(err)
		}
		return calls() > before, ""
	})
	before := calls()
	const reads = 200
	for i := range reads {
		key := spreadKey("r", i*rows/reads)
		want, err := classic.ReadRow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadRow(ctx, key)
		if err != nil {
			t.Fatalf("session read of %s: %v", key, err)
		}
		if len(want["f"]) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("session read of %s: %.200v, classic %.200v", key, got, want)
		}
	}
	m := bigtable.NewMutation()
	m.Set("f", "s", bigtable.Timestamp(2000), []byte("on a session"))
	if err := st.Apply(ctx, spreadKey("r", 7), m); err != nil {
		t.Fatal(err)
	}
	if got, err := classic.ReadRow(ctx, spreadKey("r", 7), bigtable.RowFilter(bigtable.ColumnFilter("s"))); err != nil || len(got["f"]) != 1 || string(got["f"][0].Value) != "on a session" {
		t.Fatalf("the session's write read back classically: %v, %v", got, err)
	}
	if n := calls() - before; n < reads+1 {
		t.Fatalf("%v calls went on sessions, want %d", n, reads+1)
	}
}
