//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/meta"
)

// logTimeOf returns the time of the first line of the role's log after
// since whose message contains msg (zero if none).
func logTimeOf(t *testing.T, path, msg string, since time.Time) time.Time {
	_, at := logLineAfter(t, path, since, func(line string) bool { return strings.Contains(line, msg) })
	return at
}

// logLineAfter returns the first line of the role's log (text format)
// logged after since for which match is true, and its time; "" and the
// zero time if none.
func logLineAfter(t *testing.T, path string, since time.Time, match func(line string) bool) (string, time.Time) {
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
		if !strings.HasPrefix(line, "time=") || !match(line) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && at.After(since) {
			return line, at
		}
	}
	return "", time.Time{}
}

// TestClusterServerRecoveryTime: a tablet server holding user tablets is
// killed (kill -9); its tablets are served again elsewhere, every row
// readable. The time from the kill to every tablet served is logged and
// recorded, split into the master's phases as its log shows them: the
// session ended for being unreachable (failure detection), the server
// declared dead (after the fence wait of the server's own lease,
// --server-lease, plus a tenth), and the tablets served again (log sort
// and loads).
func TestClusterServerRecoveryTime(t *testing.T) {
	measureServerRecovery(t, false, false)
}

// TestClusterServerRecoveryTimeRestarted is TestClusterServerRecoveryTime
// with the killed server started again at once on its address, as a
// supervisor (systemd, the fault campaign's) does: the new process takes
// the address's succession lock its predecessor held until it died and
// says so in its key, and the master declares the predecessor dead
// without waiting out its lease ("succeeded_by" in its log) — the test
// fails if it waited.
func TestClusterServerRecoveryTimeRestarted(t *testing.T) {
	measureServerRecovery(t, false, true)
}

// TestClusterServerRecoveryTimeMetadata is TestClusterServerRecoveryTime
// with METADATA split into several tablets (--metadata-split-size 4096,
// as the fault campaign runs) and the victim a server holding METADATA
// tablets as well as user tablets: the master reloads the METADATA
// tablets first while the dead server's log is sorted, then the user
// tablets.
func TestClusterServerRecoveryTimeMetadata(t *testing.T) {
	measureServerRecovery(t, true, false)
}

func measureServerRecovery(t *testing.T, metadata, restarted bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	opts := clusterOptions{masters: 1, servers: 3}
	splits := []string{"c", "f", "i", "l", "o", "r"}
	minTablets := 9
	if metadata {
		opts.extraServer = []string{"--metadata-split-size", "4096"}
		splits = nil
		for i := 1; i < 40; i++ {
			splits = append(splits, fmt.Sprintf("%c%03d", 'a'+i%26, i))
		}
		slices.Sort(splits)
		minTablets = 40 + 3
	}
	c := newTestCluster(t, opts)
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	waitFor(t, 60*time.Second, "the table created", func() (bool, string) {
		if err := admin.CreatePresplitTable(ctx, "rec", splits); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
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
	c.waitAllServed(90*time.Second, minTablets)
	metaTable := meta.MetadataTable.String()
	var total, detect, fence, load []time.Duration
	for range trials() {
		// A live server that holds user tablets, not the one the clients
		// use; in the METADATA case the one holding the most METADATA
		// tablets, the rows then read through another's gateway.
		var victim *roleProc
		var victimID string
		waitFor(t, 60*time.Second, "a victim server", func() (bool, string) {
			_, st := c.activeMaster()
			candidates := c.liveServers()[1:]
			if metadata {
				candidates = c.liveServers()
			}
			most := 0
			for _, s := range candidates {
				for _, ss := range st.Servers {
					if !strings.HasPrefix(ss.ID, s.addr+"/") || len(ss.Tablets) == 0 {
						continue
					}
					metas := 0
					for _, tb := range ss.Tablets {
						if tb.Table == metaTable && tb.ID != meta.RootTabletID {
							metas++
						}
					}
					if !metadata || metas > most {
						victim, victimID, most = s, ss.ID, metas
					}
				}
			}
			if victim == nil {
				return false, fmt.Sprintf("no server but the first holds the tablets wanted: %+v", st.Servers)
			}
			return true, ""
		})
		master, _ := c.activeMaster()
		c.kill(victim)
		killed := time.Now()
		if restarted {
			c.startServer("--addr", victim.addr)
		}
		c.waitRecovered(victimID)
		took := time.Since(killed)
		if victim == c.servers[0] || !c.servers[0].alive() {
			for _, s := range c.liveServers() {
				if s != victim {
					cl, _ = officialClients(t, ctx, s.addr)
					tbl = cl.Open("rec")
					break
				}
			}
		}
		// Every row is there. A read may meet a tablet the balancer is
		// moving onto the restarted server of the trial before (the
		// gateway answers FAILED_PRECONDITION "not serving" until the move
		// is recorded): such a row is read again, for a few seconds.
		for _, k := range keys {
			waitFor(t, 20*time.Second, "row "+k+" after recovery", func() (bool, string) {
				row, err := tbl.ReadRow(ctx, k)
				switch {
				case status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.Unavailable:
					return false, err.Error()
				case err != nil:
					t.Fatalf("row %s after recovery: %v", k, err)
				case len(row["f"]) == 0 || string(row["f"][0].Value) != "value":
					t.Fatalf("row %s after recovery: %v, want f:c=value", k, row)
				}
				return true, ""
			})
		}
		ended := logTimeOf(t, master.logPath, "session ended", killed)
		dead := logTimeOf(t, master.logPath, "master: server dead", killed)
		if restarted {
			succeeded := logTimeOf(t, master.logPath, "server="+victimID+" succeeded_by=", killed)
			if succeeded.IsZero() {
				t.Fatalf("the master did not declare %s dead on its successor's word (no succeeded_by in its log): it waited out the lease\n%s", victimID, logTail(master.logPath))
			}
			detect = append(detect, succeeded.Sub(killed))
			load = append(load, took-succeeded.Sub(killed))
		} else if !ended.IsZero() && !dead.IsZero() {
			detect = append(detect, ended.Sub(killed))
			fence = append(fence, dead.Sub(ended))
			load = append(load, took-dead.Sub(killed))
		}
		total = append(total, took)
		if !restarted {
			c.startServer()
		}
		c.waitAllServed(90*time.Second, minTablets)
	}
	what := "tablet server kill -9 → its tablets served again"
	switch {
	case metadata:
		what = "tablet server holding METADATA tablets kill -9 → its tablets served again"
	case restarted:
		what = "tablet server kill -9, restarted on its address → its tablets served again"
	}
	recordTrials(t, what, total)
	if restarted {
		recordTrials(t, "  of which kill → declared dead (its successor's word)", detect)
		recordTrials(t, "  of which declared dead → served (loads, status)", load)
	} else if len(detect) > 0 {
		recordTrials(t, "  of which unreachable → session ended", detect)
		recordTrials(t, "  of which session ended → declared dead (fence wait)", fence)
		recordTrials(t, "  of which declared dead → served (sort, loads, status)", load)
	}
}
