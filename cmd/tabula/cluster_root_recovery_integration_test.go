//go:build integration

package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/cluster/statuspage"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestClusterRootRecoveryReadsLogTail: the server holding the root tablet
// takes a stream of single-row writes (one log object per group commit),
// is killed and restarted on its address. The root is recovered from its
// unsorted log, read from the root's redo point — before any other tablet
// of the cluster can be found. With --metadata-log-release the root's
// redo point follows the log's tail, so that read covers about the last
// release interval; with it off (-1s), the whole log since the root was
// loaded. The test runs both, checks that the first read at most a third
// of the second's records and that every acknowledged row is there, and
// records both read times.
func TestClusterRootRecoveryReadsLogTail(t *testing.T) {
	const writeFor = 8 * time.Second
	read := map[string]rootReplay{}
	for _, v := range []struct{ name, release string }{{"release-1s", "1s"}, {"release-off", "-1s"}} {
		t.Run(v.name, func(t *testing.T) {
			read[v.name] = measureRootRecovery(t, v.release, writeFor)
		})
	}
	on, off := read["release-1s"], read["release-off"]
	if t.Failed() {
		return
	}
	if off.records == 0 {
		t.Fatal("without --metadata-log-release no server logged reading the commit log for the root after the kill")
	}
	t.Logf("root's replay after %v of writes: %d records in %v with --metadata-log-release 1s, %d in %v without", writeFor, on.records, on.took, off.records, off.took)
	if on.records*3 > off.records {
		t.Fatalf("with --metadata-log-release 1s the root's replay read %d records, without %d: want at most a third", on.records, off.records)
	}
	recordTrials(t, "root holder killed after 8 s of writes: root's log read, --metadata-log-release 1s", []time.Duration{on.took})
	recordTrials(t, "  the same, --metadata-log-release -1s (off)", []time.Duration{off.took})
}

// rootReplay is what a server logged when it recovered the root tablet.
type rootReplay struct {
	records int
	took    time.Duration
}

func measureRootRecovery(t *testing.T, release string, writeFor time.Duration) rootReplay {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3, extraServer: []string{"--metadata-log-release", release}})
	c.waitAllServed(60*time.Second, 2) // the root and METADATA's other tablet
	// The clients enter through the first server; if it is the one
	// killed, through another afterwards.
	entry := c.servers[0]
	cl, admin := officialClients(t, ctx, entry.addr)
	waitFor(t, 60*time.Second, "the table created", func() (bool, string) {
		// Thirteen tablets over three servers: assignment gives the
		// root's server some, though it holds METADATA's tablets too.
		if err := admin.CreatePresplitTable(ctx, "rootrec", []string{"b", "d", "f", "h", "j", "l", "n", "p", "r", "t", "v", "x"}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err := admin.CreateColumnFamily(ctx, "rootrec", "f"); err != nil {
		t.Fatal(err)
	}
	c.waitAllServed(60*time.Second, 2+13)
	tbl := cl.Open("rootrec")

	// The victim: the root's server. The writes go to the rows of its
	// tablets of the table alone, so that its log is the stream the
	// root's replay reads through.
	var victim *roleProc
	var victimID string
	var letters []byte // first letters of the rows the victim holds
	waitFor(t, 30*time.Second, "the root's server holding a tablet of the table", func() (bool, string) {
		_, st := c.activeMaster()
		victim, victimID, letters = nil, "", nil
		for _, ss := range st.Servers {
			if !slices.ContainsFunc(ss.Tablets, func(tb statuspage.Tablet) bool { return tb.ID == meta.RootTabletID }) {
				continue
			}
			for _, s := range c.liveServers() {
				if strings.HasPrefix(ss.ID, s.addr+"/") {
					victim, victimID = s, ss.ID
				}
			}
			for l := byte('a'); l <= 'z'; l++ {
				if slices.ContainsFunc(ss.Tablets, func(tb statuspage.Tablet) bool {
					return strings.HasSuffix(tb.Table, "rootrec") && string(tb.Start) <= string(l) && (len(tb.End) == 0 || string(l) < string(tb.End))
				}) {
					letters = append(letters, l)
				}
			}
		}
		if victim == nil {
			return false, fmt.Sprintf("no live server holds the root: %+v", st.Servers)
		}
		return len(letters) > 0, fmt.Sprintf("the root's server %s holds no tablet of rootrec", victimID)
	})

	// Single-row writes from 16 goroutines — each group commit one log
	// object, as in the fault campaign's trickle — until the kill, which
	// comes while they run: those in flight then have unknown outcomes.
	var acked, unknown atomic.Int64
	var killing atomic.Bool
	var wg sync.WaitGroup
	var writeErr atomic.Value
	for g := range 16 {
		wg.Go(func() {
			for i := 0; !killing.Load(); i++ {
				key := fmt.Sprintf("%c%02d-%06d", letters[(g*7+i)%len(letters)], g, i)
				m := bigtable.NewMutation()
				m.Set("f", "c", bigtable.Timestamp(1000), []byte(key))
				if err := tbl.Apply(ctx, key, m); err != nil {
					if killing.Load() {
						unknown.Add(1)
					} else {
						writeErr.Store(err)
					}
					return
				}
				acked.Add(1)
			}
		})
	}
	time.Sleep(writeFor)
	// METADATA tablets do not move for balance: the root is where it was.
	_, st := c.activeMaster()
	if !slices.ContainsFunc(st.Servers, func(ss statuspage.Server) bool {
		return ss.ID == victimID && slices.ContainsFunc(ss.Tablets, func(tb statuspage.Tablet) bool { return tb.ID == meta.RootTabletID })
	}) {
		t.Fatalf("the root left %s during the writes: %+v", victimID, st.Servers)
	}
	killing.Store(true)
	c.kill(victim)
	killed := time.Now()
	c.startServer("--addr", victim.addr)
	// The writes in flight at the kill end once their tablets are back
	// (the client retries them) or fail.
	wg.Wait()
	if err, _ := writeErr.Load().(error); err != nil {
		t.Fatalf("a write before the kill failed: %v", err)
	}
	c.waitRecovered(victimID)
	took := time.Since(killed)
	if victim == entry {
		for _, s := range c.liveServers() {
			if s != victim {
				cl, _ = officialClients(t, ctx, s.addr)
				tbl = cl.Open("rootrec")
				break
			}
		}
	}
	rows := 0
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows++
		return true
	})
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if n := int64(rows); n < acked.Load() || n > acked.Load()+unknown.Load() {
		t.Fatalf("%d rows after recovery, %d writes acknowledged and %d of unknown outcome", rows, acked.Load(), unknown.Load())
	}
	// No line: the root's replay read no record (its redo point was at
	// the log's tail).
	var replay rootReplay
	for _, s := range c.liveServers() {
		if r, ok := rootReplayIn(t, s.logPath, killed); ok {
			replay = r
		}
	}
	t.Logf("--metadata-log-release %s: %d writes acknowledged; killed, restarted, every tablet served after %v; the root's replay read %d records in %v",
		release, acked.Load(), took, replay.records, replay.took)
	return replay
}

var (
	recordsReadRE = regexp.MustCompile(`records_read=(\d+)`)
	tookRE        = regexp.MustCompile(`took=(\S+)`)
)

// rootReplayIn finds, in a role's log, the "read commit log" line of the
// root tablet logged after since.
func rootReplayIn(t *testing.T, path string, since time.Time) (rootReplay, bool) {
	t.Helper()
	line, _ := logLineAfter(t, path, since, func(line string) bool {
		return strings.Contains(line, `msg="read commit log"`) && strings.Contains(line, "tablet="+meta.RootTabletID+" ")
	})
	if line == "" {
		return rootReplay{}, false
	}
	m, d := recordsReadRE.FindStringSubmatch(line), tookRE.FindStringSubmatch(line)
	if m == nil || d == nil {
		t.Fatalf("unexpected line in %s: %s", path, line)
	}
	n, _ := strconv.Atoi(m[1])
	took, err := time.ParseDuration(d[1])
	if err != nil {
		t.Fatalf("took in %s: %v", line, err)
	}
	return rootReplay{records: n, took: took}, true
}
