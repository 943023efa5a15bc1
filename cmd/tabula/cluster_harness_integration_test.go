//go:build integration

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/cluster/statuspage"
)

// The cluster acceptance tests run the real tabula binary as master and
// tablet server processes against the Consul agent and the MinIO server
// deploy/test.sh started (TABULA_TEST_CONSUL_ADDR, TABULA_TEST_S3_*). Each
// cluster gets its own Consul prefix and bucket. The agent enforces ACLs
// (default deny): the roles get the minimal-policy token
// (TABULA_TEST_CONSUL_TOKEN, deploy/consul-policy.hcl) through
// --consul-token, not the environment. MinIO speaks HTTPS with a private CA
// (TABULA_TEST_S3_CA), given to the roles in the store URL. With
// clusterOptions.mtls every role serves mutual TLS and calls the others
// over it, and the test's clients present a client certificate.

var (
	clusterBinOnce sync.Once
	clusterBin     string
	clusterBinErr  error
)

// TestMain removes the binary tabulaBinary built (about 75 MB in a
// directory of its own) once the tests are done: left behind, one per
// test run filled the disk.
func TestMain(m *testing.M) {
	code := m.Run()
	if clusterBin != "" {
		_ = os.RemoveAll(filepath.Dir(clusterBin))
	}
	os.Exit(code)
}

// tabulaBinary builds the binary once per test process.
func tabulaBinary(t *testing.T) string {
	t.Helper()
	clusterBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tabula-bin-")
		if err != nil {
			clusterBinErr = err
			return
		}
		clusterBin = filepath.Join(dir, "tabula")
		// mrtestjobs: the MapReduce fault tests' jobs must be in the
		// workers' binary too.
		out, err := exec.Command("go", "build", "-tags", "mrtestjobs", "-o", clusterBin, ".").CombinedOutput()
		if err != nil {
			clusterBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if clusterBinErr != nil {
		t.Fatal(clusterBinErr)
	}
	return clusterBin
}

func requireEnv(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		v := os.Getenv(n)
		if v == "" {
			t.Fatalf("%s is not set: run the tests through deploy/test.sh, which starts Consul and MinIO", n)
		}
		out = append(out, v)
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// clusterOptions tune a test cluster.
type clusterOptions struct {
	masters, servers int
	splitSize        int64
	memtableSize     int64
	extraMaster      []string
	extraServer      []string // more flags of every tablet server
	// mtls: every role serves mutual TLS with certificates of a CA made
	// for the cluster (tabula certs' package), and calls the others with
	// its certificate; the test's clients use tlsFor.
	mtls bool
	// consulHTTPS: the roles reach Consul over HTTPS
	// (TABULA_TEST_CONSUL_HTTPS_ADDR, --consul-ca TABULA_TEST_CONSUL_CA);
	// c.consul is then that address.
	consulHTTPS bool
}

type testCluster struct {
	t                  *testing.T
	bin, consul, store string
	name, dir          string
	env                []string
	roleArgs           []string    // the Consul token and TLS flags of every role
	clientTLS          *tls.Config // with opts.mtls: the test's clients' TLS
	opts               clusterOptions
	mu                 sync.Mutex
	masters, servers   []*roleProc
	workers            []*roleProc // tabula worker processes
}

// roleProc is one running master or tablet server process.
type roleProc struct {
	role, addr, http, logPath string
	cmd                       *exec.Cmd
	done                      chan struct{}
	err                       error
}

func (p *roleProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func newTestCluster(t *testing.T, opts clusterOptions) *testCluster {
	t.Helper()
	env := requireEnv(t, "TABULA_TEST_CONSUL_ADDR", "TABULA_TEST_S3_ENDPOINT", "TABULA_TEST_S3_ACCESS_KEY", "TABULA_TEST_S3_SECRET_KEY",
		"TABULA_TEST_CONSUL_TOKEN", "TABULA_TEST_S3_CA")
	dir := t.TempDir()
	if keep := os.Getenv("TABULA_TEST_CLUSTER_LOGS"); keep != "" {
		// For a person investigating: the roles' logs outlive the test.
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &testCluster{
		t: t, bin: tabulaBinary(t), consul: env[0],
		name: "t" + randomHex(6), dir: dir, opts: opts,
		env: append(withoutEnv(os.Environ(), "CONSUL_HTTP_TOKEN"), "AWS_ACCESS_KEY_ID="+env[2], "AWS_SECRET_ACCESS_KEY="+env[3]),
	}
	c.store = fmt.Sprintf("s3://tabula-%s?%s", c.name, blobtest.S3Query(blob.S3Config{Endpoint: env[1], Secure: true, CAFile: env[5]}))
	// The token goes in a file (--consul-token @FILE), out of the process
	// list.
	tokenFile := filepath.Join(dir, "consul-token")
	if err := os.WriteFile(tokenFile, []byte(env[4]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.roleArgs = []string{"--consul-token", "@" + tokenFile}
	if opts.consulHTTPS {
		https := requireEnv(t, "TABULA_TEST_CONSUL_HTTPS_ADDR", "TABULA_TEST_CONSUL_CA")
		c.consul = https[0]
		c.roleArgs = append(c.roleArgs, "--consul-ca", https[1])
	}
	if opts.mtls {
		c.roleArgs = append(c.roleArgs, c.makeCerts()...)
	}
	t.Cleanup(c.stopAll)
	for range opts.masters {
		c.startMaster()
	}
	for range opts.servers {
		c.startServer()
	}
	return c
}

func (c *testCluster) start(role string, args ...string) *roleProc {
	c.t.Helper()
	c.mu.Lock()
	n := len(c.masters) + len(c.servers) + len(c.workers)
	c.mu.Unlock()
	logPath := filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", role, n))
	logFile, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	base := append([]string{role, "--consul", c.consul, "--cluster", c.name, "--addr", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "text"}, c.roleArgs...)
	if role != "worker" { // a MapReduce worker has no store
		base = append(base, "--store", c.store)
	}
	cmd := exec.Command(c.bin, append(base, args...)...)
	cmd.Env = c.env
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p := &roleProc{role: role, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "http" {
				p.http = f[1]
			}
			if len(f) == 2 && f[0] == "ready" {
				p.addr = f[1]
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	select {
	case <-ready:
		if c.clientTLS != nil {
			registerTLS(c.clientTLS, p.addr, p.http)
		} else {
			// A port an earlier mTLS cluster's role had (the kernel
			// reuses them) is plaintext now.
			peerTLS.Delete(p.addr)
			peerTLS.Delete(p.http)
		}
	case <-p.done:
		c.t.Fatalf("%s exited before ready: %v\n%s", role, p.err, logTail(logPath))
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s not ready after 60s\n%s", role, logTail(logPath))
	}
	return p
}

func (c *testCluster) startMaster() *roleProc {
	args := []string{"--gc-interval", "2s", "--gc-grace", "1m"}
	if c.opts.splitSize > 0 {
		args = append(args, "--split-size", fmt.Sprint(c.opts.splitSize))
	}
	p := c.start("master", append(args, c.opts.extraMaster...)...)
	c.mu.Lock()
	c.masters = append(c.masters, p)
	c.mu.Unlock()
	return p
}

// startServer starts a tablet server with the cluster's options and
// extra, its flags last (so "--addr", A starts it on address A).
func (c *testCluster) startServer(extra ...string) *roleProc {
	// The servers' succession locks in the test's directory rather than
	// the machine's temporary one: a server restarted on its address
	// finds its predecessor's.
	args := []string{"--lock-dir", c.dir}
	if c.opts.splitSize > 0 {
		args = append(args, "--split-size", fmt.Sprint(c.opts.splitSize))
	}
	if c.opts.memtableSize > 0 {
		args = append(args, "--memtable-size", fmt.Sprint(c.opts.memtableSize))
	}
	p := c.start("tabletserver", append(append(args, c.opts.extraServer...), extra...)...)
	c.mu.Lock()
	c.servers = append(c.servers, p)
	c.mu.Unlock()
	return p
}

// kill sends SIGKILL and waits for the process to go.
func (c *testCluster) kill(p *roleProc) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (c *testCluster) stopAll() {
	c.mu.Lock()
	procs := append(append(append([]*roleProc(nil), c.workers...), c.servers...), c.masters...)
	c.mu.Unlock()
	for _, p := range procs {
		if p.alive() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.t.Logf("--- %s %s log tail:\n%s", p.role, p.addr, logTail(p.logPath))
		}
	}
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), 6000)
}

// liveServers returns the running tablet servers.
func (c *testCluster) liveServers() []*roleProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*roleProc
	for _, p := range c.servers {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// activeMaster returns the master whose status says it is active, nil if none.
func (c *testCluster) activeMaster() (*roleProc, statuspage.MasterStatus) {
	c.mu.Lock()
	ms := append([]*roleProc(nil), c.masters...)
	c.mu.Unlock()
	for _, m := range ms {
		if !m.alive() {
			continue
		}
		var st statuspage.MasterStatus
		if err := getJSON(m.http+"/status?format=json", &st); err == nil && st.Active {
			return m, st
		}
	}
	return nil, statuspage.MasterStatus{}
}

func getJSON(hostport string, v any) error {
	resp, err := httpGet(hostport)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", hostport, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitFor polls cond every 200ms until it returns true or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		last = why
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not after %v (%s)", what, timeout, last)
	return 0
}

// clients returns the official data and admin clients pointed at server
// addr, as BIGTABLE_EMULATOR_HOST would.
func officialClients(t *testing.T, ctx context.Context, addr string) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, tlsconfig.DialOption(tlsFor(addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	ad, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); ad.Close() })
	return cl, ad
}

// waitAllServed waits until the active master sees every tablet served and
// none unassigned, and returns the status.
func (c *testCluster) waitAllServed(timeout time.Duration, minTablets int) statuspage.MasterStatus {
	var st statuspage.MasterStatus
	waitFor(c.t, timeout, "every tablet served", func() (bool, string) {
		var m *roleProc
		m, st = c.activeMaster()
		if m == nil {
			return false, "no active master"
		}
		n := 0
		for _, s := range st.Servers {
			n += len(s.Tablets)
		}
		if len(st.Unassigned) > 0 || n < minTablets {
			return false, fmt.Sprintf("%d served, %d unassigned", n, len(st.Unassigned))
		}
		return true, ""
	})
	return st
}

// waitRecovered waits until the master no longer lists the dead server
// id and has no tablet unassigned: the dead server's tablets are served
// again.
func (c *testCluster) waitRecovered(id string) {
	c.t.Helper()
	waitFor(c.t, 90*time.Second, "the dead server's tablets served again", func() (bool, string) {
		_, st := c.activeMaster()
		for _, ss := range st.Servers {
			if ss.ID == id {
				return false, "the dead server is still listed"
			}
		}
		if len(st.Unassigned) > 0 {
			return false, fmt.Sprintf("%d unassigned", len(st.Unassigned))
		}
		return true, ""
	})
}
