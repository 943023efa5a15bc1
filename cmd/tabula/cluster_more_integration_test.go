//go:build integration

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/tablet"
)

// ackLog records acknowledged writes: row → the newest value acked, and
// per row the times of the acks by route.
type ackLog struct {
	mu   sync.Mutex
	last map[string]int64
	acks map[string][]ack
}

type ack struct {
	via string
	at  time.Time
	seq int64
}

func newAckLog() *ackLog { return &ackLog{last: map[string]int64{}, acks: map[string][]ack{}} }

func (a *ackLog) add(row, via string, seq int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[row] = max(a.last[row], seq)
	a.acks[row] = append(a.acks[row], ack{via: via, at: time.Now(), seq: seq})
}

// writeLoop writes rows through tbl until stop closes: each write sets
// f:c to its sequence number at timestamp = sequence (so the newest
// acknowledged write is what a read returns).
func writeLoop(ctx context.Context, tbl *bigtable.Table, via string, rows []string, seq *int64, seqMu *sync.Mutex, log *ackLog, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		row := rows[i%len(rows)]
		seqMu.Lock()
		*seq++
		n := *seq
		seqMu.Unlock()
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(n*1000), []byte(strconv.FormatInt(n, 10)))
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := tbl.Apply(wctx, row, m)
		cancel()
		if err == nil {
			log.add(row, via, n)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkLastValues reads every row of log and requires the newest
// acknowledged value.
func checkLastValues(t *testing.T, ctx context.Context, tbl *bigtable.Table, log *ackLog) {
	t.Helper()
	for row, want := range log.last {
		r, err := tbl.ReadRow(ctx, row)
		if err != nil {
			t.Fatalf("read %s: %v", row, err)
		}
		if len(r["f"]) == 0 {
			t.Fatalf("row %s lost: acknowledged value %d", row, want)
		}
		got, _ := strconv.ParseInt(string(r["f"][0].Value), 10, 64)
		if got < want {
			t.Fatalf("row %s reads %d, but %d was acknowledged", row, got, want)
		}
	}
}

// TestClusterMasterFailoverAndFullRestart: kill -9 of the active master
// lets the standby take over while reads and writes of assigned tablets go
// on; then every process is killed and restarted, and all data is back.
func TestClusterMasterFailoverAndFullRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// With mutual TLS between every party (#14).
	c := newTestCluster(t, clusterOptions{masters: 2, servers: 2, mtls: true})
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	if err := admin.CreatePresplitTable(ctx, "t", []string{"g", "n", "t"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	c.waitAllServed(30*time.Second, 6)
	tbl := cl.Open("t")
	rows := []string{"a1", "h1", "o1", "u1", "b2", "i2", "p2", "v2"}
	log := newAckLog()
	var seq int64
	var seqMu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go writeLoop(ctx, tbl, "s0", rows, &seq, &seqMu, log, stop, &wg)
	time.Sleep(time.Second)

	active, _ := c.activeMaster()
	if active == nil {
		t.Fatal("no active master")
	}
	c.kill(active)
	killed := time.Now()
	failedReads := 0
	reads := 0
	took := waitFor(t, 60*time.Second, "the standby master takes over", func() (bool, string) {
		for _, row := range rows[:2] {
			reads++
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := tbl.ReadRow(rctx, row); err != nil {
				failedReads++
			}
			rcancel()
		}
		m, _ := c.activeMaster()
		return m != nil && m != active, "no new active master"
	})
	close(stop)
	wg.Wait()
	log.mu.Lock()
	during := 0
	for _, as := range log.acks {
		for _, a := range as {
			if a.at.After(killed) {
				during++
			}
		}
	}
	log.mu.Unlock()
	t.Logf("standby active %v after kill -9 of the master; meanwhile %d reads (%d failed) and %d acknowledged writes", took.Round(time.Millisecond), reads, failedReads, during)
	if failedReads > 0 || during == 0 {
		t.Fatalf("reads and writes must go on during failover: %d of %d reads failed, %d writes acknowledged", failedReads, reads, during)
	}
	if err := admin.CreateTable(ctx, "after-failover"); err != nil {
		t.Fatalf("CreateTable through the new master: %v", err)
	}
	checkLastValues(t, ctx, tbl, log)

	// Every process killed, then the cluster started again.
	for _, p := range append(append([]*roleProc(nil), c.servers...), c.masters...) {
		if p.alive() {
			c.kill(p)
		}
	}
	c.startMaster()
	c.startServer()
	c.startServer()
	restart := c.waitAllServed(90*time.Second, 6)
	cl2, admin2 := officialClients(t, ctx, c.liveServers()[0].addr)
	tables, err := admin2.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(tables, ","), "after-failover") {
		t.Fatalf("tables after restart: %v", tables)
	}
	checkLastValues(t, ctx, cl2.Open("t"), log)
	t.Logf("after a full restart: %d servers, %d rows with their newest acknowledged values", len(restart.Servers), len(log.last))
}

// TestClusterCutOffServer: a tablet server paused with SIGSTOP past its
// lease stops acknowledging writes before its tablets are served
// elsewhere: for every row of its tablets, every write it acknowledged
// precedes every write the new owner acknowledged. On SIGCONT it exits.
func TestClusterCutOffServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3})
	q := c.servers[0]
	p := c.servers[1]
	cl, admin := officialClients(t, ctx, q.addr)
	if err := admin.CreatePresplitTable(ctx, "t", []string{"c", "f", "i", "l", "o", "r", "u", "x"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	c.waitAllServed(30*time.Second, 11)
	gc, err := client.Dial(q.addr, client.Options{Project: "p", Instance: "i"})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	tabs, err := gc.Tablets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var pRows []string
	for _, tb := range tabs {
		if tb.Server == p.addr {
			pRows = append(pRows, string(tb.Start)+"-row")
		}
	}
	if len(pRows) == 0 {
		t.Fatalf("server %s holds no tablet of t: %+v", p.addr, tabs)
	}
	pcl, _ := officialClients(t, ctx, p.addr)
	log := newAckLog()
	var seq int64
	var seqMu sync.Mutex
	stopP := make(chan struct{})
	var wgP sync.WaitGroup
	wgP.Add(1)
	go writeLoop(ctx, pcl.Open("t"), "paused", pRows, &seq, &seqMu, log, stopP, &wgP)
	time.Sleep(time.Second)

	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	stopQ := make(chan struct{})
	var wgQ sync.WaitGroup
	wgQ.Add(1)
	go writeLoop(ctx, cl.Open("t"), "other", pRows, &seq, &seqMu, log, stopQ, &wgQ)
	moved := waitFor(t, 90*time.Second, "the paused server's tablets served elsewhere", func() (bool, string) {
		_, st := c.activeMaster()
		for _, s := range st.Servers {
			if strings.HasPrefix(s.ID, p.addr+"/") {
				return false, "paused server still live"
			}
		}
		return len(st.Unassigned) == 0 && len(st.Servers) == 2, fmt.Sprintf("%d unassigned", len(st.Unassigned))
	})
	time.Sleep(2 * time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the resumed server did not exit after its lease lapsed")
	}
	time.Sleep(time.Second)
	close(stopP)
	close(stopQ)
	wgP.Wait()
	wgQ.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	otherAcks := 0
	for row, as := range log.acks {
		var lastPaused, firstOther time.Time
		for _, a := range as {
			switch a.via {
			case "paused":
				if a.at.After(lastPaused) {
					lastPaused = a.at
				}
			case "other":
				otherAcks++
				if firstOther.IsZero() || a.at.Before(firstOther) {
					firstOther = a.at
				}
			}
		}
		if !lastPaused.IsZero() && !firstOther.IsZero() && !lastPaused.Before(firstOther) {
			t.Errorf("row %s: the paused server acknowledged a write at %v, after the new owner's first at %v", row, lastPaused, firstOther)
		}
		if lastPaused.After(paused.Add(time.Second)) {
			t.Errorf("row %s: the paused server acknowledged a write %v after it was stopped", row, lastPaused.Sub(paused))
		}
	}
	if otherAcks == 0 {
		t.Fatal("no write acknowledged by the new owners")
	}
	t.Logf("tablets of the server paused by SIGSTOP served elsewhere %v after the pause; %d rows, %d writes by the new owners, none by two writers", moved.Round(time.Millisecond), len(log.acks), otherAcks)
	checkLastValues(t, ctx, cl.Open("t"), log)
}

// TestClusterGarbageCollection: the master deletes an SSTable no tablet
// references and never one a tablet's state references.
func TestClusterGarbageCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 2, splitSize: 64 << 10, memtableSize: 16 << 10})
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	tbl := cl.Open("t")
	writeRows(t, ctx, tbl, "r", 600, 500)

	keys := requireEnv(t, "TABULA_TEST_S3_ACCESS_KEY", "TABULA_TEST_S3_SECRET_KEY")
	t.Setenv("AWS_ACCESS_KEY_ID", keys[0])
	t.Setenv("AWS_SECRET_ACCESS_KEY", keys[1])
	store, err := blob.OpenURL(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: a tablet-made name from an hour ago that no state lists
	// (what a crashed compaction leaves).
	orphan := fmt.Sprintf("tables/i/t/%016x-%s.sst", time.Now().Add(-time.Hour).UnixMicro(), randomHex(8))
	if err := store.Put(ctx, orphan, []byte("orphan")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the orphan collected", func() (bool, string) {
		_, err := store.Get(ctx, orphan)
		return err != nil, "still there"
	})
	// Every file any state references still exists, and the data reads.
	states, err := store.List(ctx, cluster.StatePrefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	ss := tablet.NewBlobStateStore(store, cluster.StatePrefix)
	referenced := 0
	for _, o := range states {
		id := strings.TrimSuffix(strings.TrimPrefix(o.Name, cluster.StatePrefix+"/"), ".tablet")
		st, err := ss.Load(ctx, id)
		if err != nil {
			continue
		}
		for _, f := range st.Files() {
			referenced++
			if _, err := store.Get(ctx, f); err != nil {
				t.Errorf("tablet %s references %s, which is gone: %v", id, f, err)
			}
		}
	}
	if referenced == 0 {
		t.Fatal("no referenced file found: the check checked nothing")
	}
	n := 0
	if err := tbl.ReadRows(ctx, bigtable.PrefixRange(""), func(bigtable.Row) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 600 {
		t.Fatalf("read %d rows, want 600", n)
	}
	t.Logf("orphan collected; %d files referenced by %d states all present", referenced, len(states))
}
