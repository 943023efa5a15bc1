//go:build integration

package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// trials is how many times the failover measurements repeat: 5 (for a
// median) with TABULA_LONG=1, else 1.
func trials() int {
	if os.Getenv("TABULA_LONG") == "1" {
		return 5
	}
	return 1
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// recordTrials appends the named measurement to the JSON lines file
// $TABULA_RELIABILITY_OUT, if set (the fault campaign's report reads it).
func recordTrials(t *testing.T, name string, ds []time.Duration) {
	t.Helper()
	ms := make([]int64, len(ds))
	for i, d := range ds {
		ms[i] = d.Milliseconds()
	}
	t.Logf("%s: trials %v, median %v", name, ds, medianDuration(ds))
	path := os.Getenv("TABULA_RELIABILITY_OUT")
	if path == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"measure": name, "trials_ms": ms, "median_ms": medianDuration(ds).Milliseconds(), "at": time.Now().UTC().Format(time.RFC3339)})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestClusterMasterTakeover: a standby ends the session of an active
// master that stops answering — killed (kill -9) or paused (SIGSTOP) — and
// leads without waiting for Consul to expire the session; the paused
// master, resumed, does not act as master any more (its own lease ran out:
// storage/master/takeover.go). The times to a new leader are logged (and
// recorded for the report); they are not asserted beyond the 60 s a
// takeover left to Consul's expiry would also meet.
func TestClusterMasterTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 2, servers: 1})
	_, admin := officialClients(t, ctx, c.servers[0].addr)
	newLeader := func(old *roleProc) time.Duration {
		start := time.Now()
		waitFor(t, 60*time.Second, "a standby leads", func() (bool, string) {
			m, _ := c.activeMaster()
			return m != nil && m != old, "no new active master"
		})
		return time.Since(start)
	}
	waitFor(t, 30*time.Second, "an active master", func() (bool, string) {
		m, _ := c.activeMaster()
		return m != nil, "none"
	})
	c.waitAllServed(60*time.Second, 1) // METADATA served before the first kill

	var killed []time.Duration
	for i := range trials() {
		active, _ := c.activeMaster()
		c.kill(active)
		killed = append(killed, newLeader(active))
		createAfterTakeover(t, ctx, admin, "after-kill-"+string(rune('a'+i)))
		c.startMaster() // a standby again
	}
	recordTrials(t, "master kill -9 → standby leading", killed)

	var stopped []time.Duration
	for range trials() {
		active, _ := c.activeMaster()
		if err := active.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		took := newLeader(active)
		stopped = append(stopped, took)
		if err := active.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Resumed, it must find its lease gone and stand by: never two
		// masters saying they lead.
		for range 10 {
			time.Sleep(300 * time.Millisecond)
			n := 0
			for _, m := range c.masters {
				if !m.alive() {
					continue
				}
				var st struct{ Active bool }
				if err := getJSON(m.http+"/status?format=json", &st); err == nil && st.Active {
					n++
				}
			}
			if n > 1 {
				t.Fatalf("%d masters say they are active after the paused one resumed", n)
			}
		}
	}
	recordTrials(t, "master SIGSTOP → standby leading", stopped)
}

// createAfterTakeover creates a table through a tablet server's admin API
// just after a new master took over. Until the new master's first rounds
// have served METADATA again, the call may answer UNAVAILABLE, which a
// client retries; it must succeed within 30 s (ALREADY_EXISTS after a
// retry means an earlier attempt, whose answer was lost, did it).
func createAfterTakeover(t *testing.T, ctx context.Context, admin *bigtable.AdminClient, table string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 1; ; attempt++ {
		err := admin.CreateTable(ctx, table)
		switch code := status.Code(err); {
		case err == nil, attempt > 1 && code == codes.AlreadyExists:
			return
		case code != codes.Unavailable || time.Now().After(deadline):
			t.Fatalf("CreateTable through the new master (attempt %d): %v", attempt, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
