//go:build integration

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// TestClusterAggregates: counters in an aggregate family of a cluster's
// table survive what the cluster does to tablets — splits, moves between
// servers, flushes and compactions, and kill -9 of a server (its log sorted
// and replayed elsewhere): increments written before the kill sum exactly
// afterwards, and no increment acknowledged during it is lost.
func TestClusterAggregates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3, splitSize: 48 << 10, memtableSize: 32 << 10})
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "a", ColumnFamilies: map[string]bigtable.Family{
		"n":   {ValueType: bigtable.AggregateType{Input: bigtable.Int64Type{Encoding: bigtable.BigEndianBytesEncoding{}}, Aggregator: bigtable.SumAggregator{}}},
		"pad": {},
	}})
	if err != nil {
		t.Fatalf("creating an aggregate family through a tablet server: %v", err)
	}
	tbl := cl.Open("a")

	// Phase 1, no faults: ten rounds of increments 1..10 to each key, the
	// first with padding that makes the table split.
	const keys, rounds = 400, 10
	pad := []byte(strings.Repeat("p", 1000))
	for r := 1; r <= rounds; r++ {
		var ks []string
		var ms []*bigtable.Mutation
		for i := range keys {
			m := bigtable.NewMutation()
			m.AddIntToCell("n", "c", 0, int64(r))
			if r == 1 {
				m.Set("pad", "p", 1000, pad)
			}
			ks = append(ks, spreadKey("k1-", i))
			ms = append(ms, m)
			if len(ks) == 100 || i == keys-1 {
				errs, err := tbl.ApplyBulk(ctx, ks, ms)
				if err != nil || errs != nil {
					t.Fatalf("round %d: ApplyBulk: %v %v", r, err, errs)
				}
				ks, ms = nil, nil
			}
		}
	}
	last, since := "", time.Now()
	waitFor(t, 120*time.Second, "≥6 tablets on 3 servers, stable for 3s", func() (bool, string) {
		_, st := c.activeMaster()
		spread := userTablets(st)
		total := 0
		for _, n := range spread {
			total += n
		}
		cur := fmt.Sprint(spread, len(st.Unassigned))
		if cur != last {
			last, since = cur, time.Now()
		}
		return len(spread) == 3 && total >= 6 && len(st.Unassigned) == 0 && time.Since(since) > 3*time.Second, cur
	})
	t.Logf("tablets per server after the increments: %s", last)

	// Phase 2: increments of one per request while a server is killed.
	victim := c.servers[2]
	wcl, _ := officialClients(t, ctx, c.servers[0].addr)
	wtbl := wcl.Open("a")
	var mu sync.Mutex
	acked := map[string]int64{}
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
				key := spreadKey(fmt.Sprintf("k2-%d-", w), i%50)
				m := bigtable.NewMutation()
				m.AddIntToCell("n", "c", 0, 1)
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				err := wtbl.Apply(wctx, key, m)
				wcancel()
				if err == nil {
					mu.Lock()
					acked[key]++
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	c.kill(victim)
	recovered := waitFor(t, 90*time.Second, "the killed server's tablets served elsewhere", func() (bool, string) {
		_, st := c.activeMaster()
		if len(st.Unassigned) > 0 {
			return false, fmt.Sprintf("%d unassigned", len(st.Unassigned))
		}
		return len(st.Servers) == 2, fmt.Sprintf("%d servers", len(st.Servers))
	})
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("tablets of the killed server served elsewhere %v after kill -9", recovered.Round(time.Millisecond))

	sum := func(r bigtable.Row) int64 {
		for _, it := range r["n"] {
			if it.Column == "n:c" && it.Timestamp == 0 && len(it.Value) == 8 {
				return int64(binary.BigEndian.Uint64(it.Value))
			}
		}
		return -1
	}
	want1 := int64(rounds * (rounds + 1) / 2)
	n1 := 0
	err = tbl.ReadRows(ctx, bigtable.PrefixRange(""), func(r bigtable.Row) bool {
		if !strings.Contains(r.Key(), "-k1-") {
			return true
		}
		n1++
		if got := sum(r); got != want1 {
			t.Errorf("row %s: counter %d, want %d", r.Key(), got, want1)
		}
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("n")))
	if err != nil {
		t.Fatal(err)
	}
	if n1 != keys {
		t.Errorf("%d phase-1 counters read, want %d", n1, keys)
	}
	var total int64
	for key, n := range acked {
		r, err := tbl.ReadRow(ctx, key, bigtable.RowFilter(bigtable.FamilyFilter("n")))
		if err != nil {
			t.Fatal(err)
		}
		// A retried or timed-out increment may have applied without an
		// acknowledgement; an acknowledged one is never lost.
		if got := sum(r); got < n {
			t.Errorf("row %s: counter %d, but %d increments were acknowledged", key, got, n)
		}
		total += n
	}
	if total == 0 {
		t.Errorf("no increment acknowledged during the kill")
	}
	t.Logf("%d counters of %d increments exact across splits, moves and a kill -9; %d increments acknowledged during the kill, none lost", keys, keys*rounds, total)
}
