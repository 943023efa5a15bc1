package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
)

const (
	devProject  = "p"
	devInstance = "i"
)

func quietDevLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// devClients are the official data and admin clients and the extension's
// client, connected to addr.
type devClients struct {
	conn   *grpc.ClientConn
	data   *bigtable.Client
	admin  *bigtable.AdminClient
	groups adminextpb.LocalityGroupsClient
}

func dialDev(t *testing.T, addr, project, instance string) *devClients {
	t.Helper()
	ctx := context.Background()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	data, err := bigtable.NewClientWithConfig(ctx, project, instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := bigtable.NewAdminClient(ctx, project, instance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	c := &devClients{conn: conn, data: data, admin: admin, groups: adminextpb.NewLocalityGroupsClient(conn)}
	t.Cleanup(func() { c.close() })
	return c
}

func (c *devClients) close() {
	c.data.Close()
	c.conn.Close()
}

// TestDevEndToEnd creates a table with the official admin client, writes
// and reads with the data client, restarts the server on the same
// directory and finds data and schema (locality groups included) again.
func TestDevEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	cfg := cluster.DevConfig{Dir: dir, Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: quietDevLogger(), MemtableBytes: 64 << 10}
	d, err := cluster.StartDev(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := dialDev(t, d.Addr(), devProject, devInstance)
	if err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "web", SplitKeys: []string{"m"},
		Families: map[string]bigtable.GCPolicy{"contents": bigtable.MaxVersionsPolicy(2)}, DeletionProtection: bigtable.Protected}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.groups.SetLocalityGroup(ctx, &adminextpb.SetLocalityGroupRequest{Table: "projects/p/instances/i/tables/web",
		Group: "meta", Families: []string{"anchor"}, InMemory: proto.Bool(true), Compression: adminextpb.Compression_COMPRESSION_SNAPPY}); err != nil {
		t.Fatal(err)
	}
	tbl := c.data.Open("web")
	const rows = 300
	for i := range rows {
		m := bigtable.NewMutation()
		m.Set("contents", "html", bigtable.Timestamp(1000), fmt.Appendf(nil, "<html>%d v1</html>", i))
		m.Set("contents", "html", bigtable.Timestamp(2000), fmt.Appendf(nil, "<html>%d v2</html>", i))
		m.Set("contents", "html", bigtable.Timestamp(3000), fmt.Appendf(nil, "<html>%d v3</html>", i))
		m.Set("anchor", "cnnsi.com", bigtable.Timestamp(1000), []byte("CNN"))
		if err := tbl.Apply(ctx, fmt.Sprintf("row%04d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	check := func(tbl *bigtable.Table, when string) {
		t.Helper()
		n := 0
		err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			i := n
			want := fmt.Sprintf("row%04d", i)
			if r.Key() != want || len(r["contents"]) != 2 || string(r["contents"][0].Value) != fmt.Sprintf("<html>%d v3</html>", i) ||
				len(r["anchor"]) != 1 || string(r["anchor"][0].Value) != "CNN" {
				t.Errorf("%s: row %d = %v, want %s with 2 versions of contents:html and anchor", when, n, r, want)
				return false
			}
			n++
			return true
		})
		if err != nil || n != rows {
			t.Fatalf("%s: read %d rows (%v), want %d", when, n, err, rows)
		}
	}
	check(tbl, "before restart")

	// Metrics and health over HTTP.
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "go_goroutines", "/debug/pprof/": "goroutine"} {
		resp, err := http.Get("http://" + d.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}

	// The standard gRPC health check answers on the same port.
	hc, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}

	// A second server on the same directory is refused.
	if _, err := cluster.StartDev(ctx, cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on one dir: %v", err)
	}

	c.close()
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	d, err = cluster.StartDev(ctx, cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer d.Close()
	c = dialDev(t, d.Addr(), devProject, devInstance)
	check(c.data.Open("web"), "after restart")
	info, err := c.admin.TableInfo(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(info.Families)
	if !slices.Equal(info.Families, []string{"anchor", "contents"}) || info.DeletionProtection != bigtable.Protected {
		t.Fatalf("schema after restart: %+v", info)
	}
	groups, err := c.groups.GetLocalityGroups(ctx, &adminextpb.GetLocalityGroupsRequest{Table: "projects/p/instances/i/tables/web"})
	if err != nil || len(groups.Groups) != 2 || !groups.Groups[1].InMemory || !slices.Equal(groups.Groups[1].Families, []string{"anchor"}) {
		t.Fatalf("locality groups after restart: %v %v", groups, err)
	}
	// DropRowRange through the admin API reaches the tablets.
	if err := c.admin.DropRowRange(ctx, "web", "row00"); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := c.data.Open("web").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool { left = append(left, r.Key()); return true }); err != nil ||
		len(left) != rows-100 || left[0] != "row0100" {
		t.Fatalf("after DropRowRange(row00): %d rows from %q (%v), want %d from row0100", len(left), left[:min(1, len(left))], err, rows-100)
	}
	if err := c.admin.DropAllRows(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.data.Open("web").ReadRow(ctx, "row0200"); err != nil || len(r) != 0 {
		t.Fatalf("after DropAllRows: %v %v", r, err)
	}
	// Deleting the table removes its files.
	if err := c.admin.UpdateTableWithDeletionProtection(ctx, "web", bigtable.Unprotected); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.DeleteTable(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if ssts, _ := filepath.Glob(filepath.Join(dir, "store", "tables", "i", "web", "*.sst")); len(ssts) != 0 {
		t.Fatalf("files of the deleted table remain: %v", ssts)
	}
	if err := c.data.Open("web").Apply(ctx, "row", bigtable.NewMutation()); err == nil {
		t.Fatal("write to a deleted table succeeded")
	}
}

// With InstanceAgnostic every project and instance reach the same tables,
// through the data API as through the admin API.
func TestDevInstanceAgnostic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := cluster.StartDev(ctx, cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietDevLogger(), InstanceAgnostic: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := dialDev(t, d.Addr(), "p1", "i1")
	b := dialDev(t, d.Addr(), "p2", "i2")
	if err := a.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "q", bigtable.Timestamp(1000), []byte("v"))
	if err := b.data.Open("t").Apply(ctx, "row", m); err != nil {
		t.Fatal(err)
	}
	r, err := a.data.Open("t").ReadRow(ctx, "row")
	if err != nil || len(r["f"]) != 1 || string(r["f"][0].Value) != "v" {
		t.Fatalf("read through another instance: %v %v", r, err)
	}
	if tables, err := b.admin.Tables(ctx); err != nil || !slices.Equal(tables, []string{"t"}) {
		t.Fatalf("tables through another instance: %v %v", tables, err)
	}
}

// TestDevCrash is the crash test: `tabula dev` runs as a
// subprocess, writers apply multi-cell row mutations (single and bulk)
// through the official client, and the server is killed with SIGKILL in the
// middle of the writes, five times, restarting on the same directory with
// a small memtable and split size and frequent log truncation, so that
// crashes also hit flushes, splits and truncations. After every restart each acknowledged write must be readable and
// every row whole: all its cells from one mutation, and every family
// created before the crash must be there. A last round stops the
// server with SIGTERM, which must exit 0 and lose nothing either.
func TestDevCrash(t *testing.T) {
	bin := buildTabula(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	st := newCrashState()
	const rounds = 5
	for round := 0; round <= rounds; round++ {
		p := startDevProcess(t, ctx, bin, dir, round)
		c := dialDev(t, p.addr, devProject, devInstance)
		if round == 0 {
			if err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "crash", SplitKeys: []string{"w2", "w5"},
				Families: map[string]bigtable.GCPolicy{"a": bigtable.NoGcPolicy(), "b": bigtable.MaxVersionsPolicy(2)}}); err != nil {
				t.Fatal(err)
			}
		} else {
			st.verify(t, ctx, c.data.Open("crash"), round)
			// Every acknowledged schema change survived too.
			info, err := c.admin.TableInfo(ctx, "crash")
			if err != nil {
				t.Fatal(err)
			}
			if known, exists := st.churnState(); known && slices.Contains(info.Families, "churn") != exists {
				t.Fatalf("round %d: family churn present=%v after the crash; the last acknowledged change left present=%v", round, !exists, exists)
			}
			for r := 0; r < round; r++ {
				if !slices.Contains(info.Families, fmt.Sprintf("round%d", r)) {
					t.Fatalf("round %d: family round%d, created before the crash, is gone: %v", round, r, info.Families)
				}
			}
		}
		if err := c.admin.CreateColumnFamilyWithConfig(ctx, "crash", fmt.Sprintf("round%d", round),
			bigtable.Family{GCPolicy: bigtable.MaxVersionsPolicy(1)}); err != nil {
			t.Fatal(err)
		}
		if round == rounds {
			// Clean stop: SIGTERM, exit 0, and one more restart.
			st.write(ctx, c.data.Open("crash"), 200*time.Millisecond)
			c.close()
			p.stop(t)
			p = startDevProcess(t, ctx, bin, dir, round+1)
			c = dialDev(t, p.addr, devProject, devInstance)
			st.verify(t, ctx, c.data.Open("crash"), round+1)
			// The writes outgrew the split size: the crashes also hit
			// tablets being split, and the splits survived them.
			keys, err := c.data.Open("crash").SampleRowKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) <= 3 {
				t.Errorf("SampleRowKeys %q: no tablet split during the run", keys)
			}
			c.close()
			p.stop(t)
			break
		}
		// Schema changes go on during the writes and the kill.
		churnStop := make(chan struct{})
		churnDone := make(chan struct{})
		go func() {
			defer close(churnDone)
			st.churn(ctx, c.admin, churnStop)
		}()
		acked := st.write(ctx, c.data.Open("crash"), time.Duration(300+rand.IntN(500))*time.Millisecond, p.kill)
		close(churnStop)
		<-churnDone
		c.close()
		p.wait()
		if acked == 0 {
			t.Fatalf("round %d: no write was acknowledged", round)
		}
	}
	if st.total() < 500 {
		t.Fatalf("only %d acknowledged writes over the run", st.total())
	}
	t.Logf("%d acknowledged row mutations over %d crashes", st.total(), rounds)
}

// devProcess is `tabula dev` running as a subprocess.
type devProcess struct {
	cmd    *exec.Cmd
	addr   string
	stderr string // path of its log
	done   chan error
}

func startDevProcess(t *testing.T, ctx context.Context, bin, dir string, round int) *devProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("dev-%d.log", round))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "dev", "--dir", dir, "--addr", "127.0.0.1:0",
		"--memtable-size", "131072", "--split-size", "1048576", "--log-truncate-interval", "100ms", "--log-format", "text")
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, stderr: logPath, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				n++
				if n == 1 {
					ready <- addr
				} else {
					t.Errorf("round %d: a second ready line %q", round, sc.Text())
				}
			}
		}
		close(ready)
	}()
	go func() {
		p.done <- cmd.Wait()
		logFile.Close()
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			<-p.done
			log, _ := os.ReadFile(logPath)
			t.Fatalf("round %d: tabula dev exited without a ready line; log:\n%s", round, log)
		}
		p.addr = addr
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("round %d: no ready line in 30s", round)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("log of round %d:\n%s", round, tail(string(log), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *devProcess) kill() { p.cmd.Process.Kill() }

// wait waits for the killed process; its exit status is the kill's.
func (p *devProcess) wait() { <-p.done }

// stop sends SIGTERM and requires a clean exit (status 0).
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			log, _ := os.ReadFile(p.stderr)
			t.Fatalf("tabula dev after SIGTERM: %v\n%s", err, tail(string(log), 4000))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("tabula dev did not stop within 30s of SIGTERM")
	}
}

// crashState is what the writers did: per row, the highest token of an
// acknowledged mutation and the highest token ever sent. Each writer owns
// its rows and sends their mutations one after another with increasing
// tokens, so a row's newest cells after recovery must carry one token t
// with acked <= t <= sent.
type crashState struct {
	mu    sync.Mutex
	acked map[string]int64
	sent  map[string]int64
	next  []int64 // per writer: next token
	n     atomic.Int64
	// churnExists and churnKnown: see churn.
	churnExists, churnKnown bool
}

const (
	crashWriters    = 8
	crashRowsPerW   = 40
	crashBulkWriter = 2 // writers with an index below this use ApplyBulk
	crashBulkSize   = 8
)

func newCrashState() *crashState {
	return &crashState{acked: map[string]int64{}, sent: map[string]int64{}, next: make([]int64, crashWriters)}
}

func (s *crashState) total() int64 { return s.n.Load() }

// churn creates and drops the family "churn" and changes the GC policy of
// family "b" until stop is closed, recording whether the family's
// existence is known: an acknowledged change with none in flight after it.
func (s *crashState) churn(ctx context.Context, admin *bigtable.AdminClient, stop chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s.mu.Lock()
		exists := s.churnExists
		s.churnKnown = false
		s.mu.Unlock()
		var err error
		if exists {
			err = admin.DeleteColumnFamily(cctx, "crash", "churn")
		} else {
			err = admin.CreateColumnFamily(cctx, "crash", "churn")
		}
		if err == nil {
			s.mu.Lock()
			s.churnExists, s.churnKnown = !exists, true
			s.mu.Unlock()
			err = admin.SetGCPolicy(cctx, "crash", "b", bigtable.MaxVersionsPolicy(2+i%2))
		}
		cancel()
		if err != nil {
			return // the server is gone
		}
	}
}

// churnState says whether the existence of family "churn" is known, and
// what it is.
func (s *crashState) churnState() (known, exists bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.churnKnown, s.churnExists
}

// columns of every mutation: two families, two qualifiers each; the value
// is the token, padded so that the data outgrows memtables and tablets.
var crashColumns = [][2]string{{"a", "x"}, {"a", "y"}, {"b", "x"}, {"b", "z"}}

func crashMutation(token int64) *bigtable.Mutation {
	m := bigtable.NewMutation()
	pad := strings.Repeat("p", 200)
	for _, c := range crashColumns {
		m.Set(c[0], c[1], bigtable.Timestamp(token*1000), fmt.Appendf(nil, "%d|%s", token, pad))
	}
	return m
}

func crashRow(w, j int) string { return fmt.Sprintf("w%d-%03d", w, j) }

// write runs the writers for d, then calls kill (if any) and waits for the
// writers; it returns the mutations acknowledged in this round.
func (s *crashState) write(ctx context.Context, tbl *bigtable.Table, d time.Duration, kill ...func()) int64 {
	var stop atomic.Bool
	var roundAcked atomic.Int64
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n := 1
				if w < crashBulkWriter {
					n = crashBulkSize
				}
				var keys []string
				var muts []*bigtable.Mutation
				var tokens []int64
				s.mu.Lock()
				for range n {
					s.next[w]++
					tok := s.next[w]
					key := crashRow(w, int(tok)%crashRowsPerW)
					if slices.Contains(keys, key) {
						break
					}
					keys, tokens = append(keys, key), append(tokens, tok)
					muts = append(muts, crashMutation(tok))
					s.sent[key] = max(s.sent[key], tok)
				}
				s.mu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var errs []error
				var err error
				if n == 1 {
					err = tbl.Apply(cctx, keys[0], muts[0])
				} else {
					errs, err = tbl.ApplyBulk(cctx, keys, muts)
				}
				cancel()
				if err != nil {
					continue // not acknowledged (the server may be gone)
				}
				s.mu.Lock()
				for i, key := range keys {
					if errs != nil && errs[i] != nil {
						continue
					}
					s.acked[key] = max(s.acked[key], tokens[i])
					s.n.Add(1)
					roundAcked.Add(1)
				}
				s.mu.Unlock()
			}
		}()
	}
	time.Sleep(d)
	for _, k := range kill {
		k()
	}
	stop.Store(true)
	wg.Wait()
	return roundAcked.Load()
}

// verify reads the whole table: every row whole (the newest cell of every
// column from the same mutation), no acknowledged write lost.
func (s *crashState) verify(t *testing.T, ctx context.Context, tbl *bigtable.Table, round int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		key := r.Key()
		seen[key] = true
		var token int64 = -1
		cols := 0
		for _, fam := range []string{"a", "b"} {
			for _, it := range r[fam] {
				cols++
				var tok int64
				if _, err := fmt.Sscanf(string(it.Value), "%d|", &tok); err != nil || it.Timestamp != bigtable.Timestamp(tok*1000) {
					t.Errorf("round %d: row %s cell %s: value %.20q at %d", round, key, it.Column, it.Value, it.Timestamp)
				}
				if token == -1 {
					token = tok
				} else if tok != token {
					t.Errorf("round %d: row %s is half-applied: %s has token %d, another column %d", round, key, it.Column, tok, token)
				}
			}
		}
		if cols != len(crashColumns) {
			t.Errorf("round %d: row %s has %d columns, want %d (half-applied)", round, key, cols, len(crashColumns))
		}
		if token < s.acked[key] || token > s.sent[key] {
			t.Errorf("round %d: row %s has token %d; acknowledged %d, sent at most %d", round, key, token, s.acked[key], s.sent[key])
		}
		return true
	}, bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		t.Fatalf("round %d: read: %v", round, err)
	}
	for key := range s.acked {
		if !seen[key] {
			t.Errorf("round %d: acknowledged row %s is gone", round, key)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
