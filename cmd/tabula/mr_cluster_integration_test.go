//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote"
	"github.com/tabuladb/tabula/storage/coord"
)

// The MapReduce fault tests run jobs on a real local cluster — Consul,
// MinIO, a master, two tablet servers and `tabula worker` processes — with
// the coordinator in the test process (as `tabula mr run --workers-consul`
// has it in the command's), finding the workers through Consul.

// mrPoolOptions detect a killed worker in about two seconds.
var mrPoolOptions = remote.PoolOptions{HeartbeatInterval: 200 * time.Millisecond, LostAfter: 2 * time.Second}

// startWorker starts a `tabula worker` process of the cluster.
func (c *testCluster) startWorker(args ...string) *roleProc {
	c.t.Helper()
	p := c.start("worker", append([]string{"--dir", c.t.TempDir(), "--session-ttl", "10s", "--lock-delay", "1s"}, args...)...)
	c.mu.Lock()
	c.workers = append(c.workers, p)
	c.mu.Unlock()
	return p
}

// workerPool returns a pool of the workers registered in the cluster's
// Consul prefix, once it has n of them.
func (c *testCluster) workerPool(ctx context.Context, n int) (*remote.Pool, []mapreduce.Worker) {
	c.t.Helper()
	svc, err := coord.NewConsul(coord.ConsulConfig{Address: c.consul, Prefix: coord.ClusterPrefix(c.name)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { svc.Close() })
	opts := mrPoolOptions
	opts.Logger = slog.New(slog.NewTextHandler(mrTestLogWriter{c.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, err := remote.NewConsulPool(svc, opts)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { pool.Close() })
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, err := pool.WaitWorkers(wctx, n)
	if err != nil {
		c.t.Fatal(err)
	}
	return pool, ws
}

type mrTestLogWriter struct{ t testing.TB }

func (w mrTestLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// mrWords is the vocabulary of the word-count input.
func mrWord(i int) string { return "w" + strconv.Itoa(i%37) }

// mrLoadWordTable creates table name split into 9 tablets and writes rows
// rows of three words each; it returns the word counts.
func mrLoadWordTable(t testing.TB, ctx context.Context, admin *bigtable.AdminClient, cl *bigtable.Client, name string, rows int) map[string]int64 {
	return mrLoadWords(t, ctx, admin, cl, name, rows, 3)
}

// mrLoadWords is mrLoadWordTable with perRow words in each row.
func mrLoadWords(t testing.TB, ctx context.Context, admin *bigtable.AdminClient, cl *bigtable.Client, name string, rows, perRow int) map[string]int64 {
	t.Helper()
	if err := admin.CreatePresplitTable(ctx, name, []string{"c", "f", "i", "l", "o", "r", "u", "x"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, name, "f"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	tbl := cl.Open(name)
	for i := 0; i < rows; i += 200 {
		var keys []string
		var muts []*bigtable.Mutation
		for j := i; j < min(i+200, rows); j++ {
			words := []string{mrWord(j), mrWord(j * 7), mrWord(j*13 + 5)}
			for k := 3; k < perRow; k++ {
				words = append(words, mrWord(j*k+k*k))
			}
			for _, w := range words {
				want[w]++
			}
			m := bigtable.NewMutation()
			m.Set("f", "text", bigtable.Timestamp(1000+int64(j)), []byte(strings.Join(words, " ")))
			keys = append(keys, fmt.Sprintf("%c%06d", 'a'+j%26, j))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil {
			t.Fatal(err)
		}
		for k, e := range errs {
			if e != nil {
				t.Fatalf("row %s: %v", keys[k], e)
			}
		}
	}
	return want
}

// mrTableCells reads every cell of a table: row → "family:qualifier@ts=value".
func mrTableCells(t testing.TB, ctx context.Context, cl *bigtable.Client, name string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := cl.Open(name).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out[r.Key()] = append(out[r.Key()], fmt.Sprintf("%s@%d=%s", it.Column, it.Timestamp, it.Value))
			}
		}
		slices.Sort(out[r.Key()])
		return true
	})
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return out
}

// mrCheckCounts checks that a word-count output holds exactly want.
func mrCheckCounts(t testing.TB, got map[string][]string, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("output has %d words, want %d", len(got), len(want))
	}
	for w, n := range want {
		cells := got[w]
		if len(cells) != 1 || !strings.HasPrefix(cells[0], "f:n@") || !strings.HasSuffix(cells[0], "="+strconv.FormatInt(n, 10)) {
			t.Fatalf("word %s: cells %v, want one f:n = %d", w, cells, n)
		}
	}
}

func mrCreateOutputTable(t testing.TB, ctx context.Context, admin *bigtable.AdminClient, name string) {
	t.Helper()
	if err := admin.CreateTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, name, "f"); err != nil {
		t.Fatal(err)
	}
}

// mrFullName is the name jobs give tables the official client calls "p"/"i"'s name.
func mrFullName(table string) string { return "projects/p/instances/i/tables/" + table }

// mrWorkerMetric sums a worker's metric over the series whose labels
// contain every one of labels (like `kind="m"`).
func mrWorkerMetric(t testing.TB, p *roleProc, name string, labels ...string) float64 {
	t.Helper()
	resp, err := httpGet(p.http + "/metrics") // HTTPS for a role of an mTLS cluster
	if err != nil {
		return -1 // a killed worker
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return sum
}

// TestWorkerProcessesInConsul: `tabula worker` processes register in the
// cluster's Consul, a coordinator's pool finds them, a kill -9 is noticed
// by heartbeat, a SIGTERM by the worker unregistering; /healthz and
// /metrics answer.
func TestWorkerProcessesInConsul(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{})
	a := c.startWorker("--slots", "3")
	b := c.startWorker()
	// A tablet server with a worker in its process.
	ts := c.start("tabletserver", "--worker", "--worker-slots", "1", "--worker-dir", t.TempDir())
	c.mu.Lock()
	c.servers = append(c.servers, ts)
	c.mu.Unlock()
	_, ws := c.workerPool(ctx, 3)
	byAddr := map[string]mapreduce.Worker{}
	var inServer mapreduce.Worker
	for _, w := range ws {
		addr := w.(*remote.Client).Addr()
		byAddr[addr] = w
		if addr != a.addr && addr != b.addr {
			inServer = w
		}
	}
	if byAddr[a.addr] == nil || byAddr[b.addr] == nil || byAddr[a.addr].Slots() != 3 || inServer == nil || inServer.Slots() != 1 {
		t.Fatalf("pool %v, want the workers at %s (3 slots), %s and the tablet server's (1 slot)", ws, a.addr, b.addr)
	}
	if host, _, _ := strings.Cut(ts.addr, ":"); inServer.Host() != host {
		t.Fatalf("tablet server %s's worker has host %q", ts.addr, inServer.Host())
	}
	resp, err := http.Get("http://" + a.http + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	if v := mrWorkerMetric(t, a, "tabula_mr_worker_slots"); v != 3 {
		t.Fatalf("tabula_mr_worker_slots = %v, want 3", v)
	}
	var st struct {
		Name  string `json:"name"`
		Slots int    `json:"slots"`
	}
	if err := getJSON(a.http+"/status", &st); err != nil || st.Slots != 3 || st.Name != byAddr[a.addr].Name() {
		t.Fatalf("worker /status: %+v, %v; want %s with 3 slots", st, err, byAddr[a.addr].Name())
	}

	c.kill(a)
	select {
	case <-byAddr[a.addr].Lost():
		if err := byAddr[a.addr].(*remote.Client).LostErr(); !strings.Contains(err.Error(), "no heartbeat") {
			t.Fatalf("killed worker lost because %v, want no heartbeat", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kill -9 of a worker not noticed after 30s")
	}

	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-byAddr[b.addr].Lost():
		if err := byAddr[b.addr].(*remote.Client).LostErr(); !strings.Contains(err.Error(), "unregistered") && !strings.Contains(err.Error(), "no heartbeat") {
			t.Fatalf("stopped worker lost because %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stopped worker not noticed after 30s")
	}
	<-b.done
	if b.err != nil {
		t.Fatalf("worker stopped by SIGINT exited with %v", b.err)
	}
}

func mrCellsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
