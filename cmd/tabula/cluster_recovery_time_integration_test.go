//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// logTimeOf returns the time of the first line of the role's log after
// since whose message contains msg (zero if none).
func logTimeOf(t *testing.T, path, msg string, since time.Time) time.Time {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, msg) || !strings.HasPrefix(line, "time=") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err == nil && at.After(since) {
			return at
		}
	}
	return time.Time{}
}

// TestClusterServerRecoveryTime: a tablet server holding user tablets is
// killed (kill -9); its tablets are served again elsewhere, every row
// readable. The time from the kill to every tablet served is logged and
// recorded, split into the master's phases as its log shows them: the
// session ended for being unreachable (failure detection), the server
// declared dead (after the fence wait of a session TTL), and the tablets
// served again (log sort and loads).
func TestClusterServerRecoveryTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3})
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	if err := admin.CreatePresplitTable(ctx, "rec", []string{"c", "f", "i", "l", "o", "r"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "rec", "f"); err != nil {
		t.Fatal(err)
	}
	tbl := cl.Open("rec")
	var keys []string
	for i := range 260 {
		keys = append(keys, fmt.Sprintf("%c%03d", 'a'+i%26, i))
	}
	var muts []*bigtable.Mutation
	for range keys {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Now(), []byte("value"))
		muts = append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	c.waitAllServed(60*time.Second, 9)
	var total, detect, fence, load []time.Duration
	for range trials() {
		// A live server that holds user tablets, not the one the clients use.
		_, st := c.activeMaster()
		var victim *roleProc
		for _, s := range c.liveServers()[1:] {
			for _, ss := range st.Servers {
				if strings.HasPrefix(ss.ID, s.addr+"/") && len(ss.Tablets) > 0 {
					victim = s
				}
			}
		}
		if victim == nil {
			t.Fatalf("no server but the first holds tablets: %+v", st.Servers)
		}
		master, _ := c.activeMaster()
		c.kill(victim)
		killed := time.Now()
		waitFor(t, 90*time.Second, "the dead server's tablets served again", func() (bool, string) {
			_, st := c.activeMaster()
			for _, ss := range st.Servers {
				if strings.HasPrefix(ss.ID, victim.addr+"/") {
					return false, "the dead server is still listed"
				}
			}
			if len(st.Unassigned) > 0 {
				return false, fmt.Sprintf("%d unassigned", len(st.Unassigned))
			}
			return true, ""
		})
		took := time.Since(killed)
		for _, k := range keys {
			if _, err := tbl.ReadRow(ctx, k); err != nil {
				t.Fatalf("row %s after recovery: %v", k, err)
			}
		}
		ended := logTimeOf(t, master.logPath, "session ended", killed)
		dead := logTimeOf(t, master.logPath, "master: server dead", killed)
		if !ended.IsZero() && !dead.IsZero() {
			detect = append(detect, ended.Sub(killed))
			fence = append(fence, dead.Sub(ended))
			load = append(load, took-dead.Sub(killed))
		}
		total = append(total, took)
		c.startServer()
		c.waitAllServed(60*time.Second, 9)
	}
	recordTrials(t, "tablet server kill -9 → its tablets served again", total)
	if len(detect) > 0 {
		recordTrials(t, "  of which unreachable → session ended", detect)
		recordTrials(t, "  of which session ended → declared dead (fence wait)", fence)
		recordTrials(t, "  of which declared dead → served (sort, loads, status)", load)
	}
}
