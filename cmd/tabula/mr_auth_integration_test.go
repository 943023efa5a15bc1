//go:build integration

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/iam"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/client"
)

// enableAuth turns authentication on for every role started after it: a
// token file of tokens (principal → token), the servers' certificate name
// and the test's (tester) superusers, grants cached 100 ms.
func (c *testCluster) enableAuth(tokens map[string]string) {
	c.t.Helper()
	tokenFile := filepath.Join(c.dir, "tokens")
	var lines []string
	for p, tok := range tokens {
		lines = append(lines, tok+" "+p)
	}
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.roleArgs = append(c.roleArgs, "--auth-token-file", tokenFile, "--auth-superuser", "user:tabula-server", "--auth-superuser", "user:tester", "--auth-cache-ttl", "100ms")
}

// TestMRJobUnderAuth: a MapReduce job on a secured cluster — a master, two
// tablet servers and two `tabula worker` processes with mutual TLS between
// them and authentication on, clients admitted with a token alone
// (--tls-client-cert-optional). `tabula mr run wordcount` submitted as
// principal etl (TLS with the CA, --token; read on the input, read and
// write on the output) runs on the workers, which read, shuffle among themselves (job
// tokens) and write as etl, and its output is exact; submitted as a
// principal without grants it is refused and writes nothing; a worker
// refuses a call without credentials. Every role, and the command's
// worker pool, reach Consul over HTTPS (--consul-ca, --workers-consul-ca).
func TestMRJobUnderAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{mtls: true, consulHTTPS: true})
	tokens := map[string]string{"etl": "etl-token-0123456789abcdef", "nobody": "nobody-token-0123456789abcdef"}
	c.enableAuth(tokens)
	c.roleArgs = append(c.roleArgs, "--tls-client-cert-optional")
	c.startMaster()
	c.startServer()
	c.startServer()
	workers := []*roleProc{c.startWorker("--slots", "2"), c.startWorker("--slots", "2")}
	gw := c.servers[0].addr
	cl, admin := officialClients(t, ctx, gw) // as tester, a superuser
	want := mrLoadWordTable(t, ctx, admin, cl, "words", 3000)
	if err := admin.CreateTable(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "wc", "count"); err != nil {
		t.Fatal(err)
	}
	grant := func(table, member string, role iam.RoleName) {
		h := admin.TableIAM(table)
		p, err := h.Policy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Add(member, role)
		if err := h.SetPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	grant("words", "user:etl", acl.RoleReader)
	grant("wc", "user:etl", acl.RoleUser) // the command reads the output's schema
	time.Sleep(300 * time.Millisecond)    // the servers' grant caches (100 ms)

	caFile := filepath.Join(c.dir, "tls", certs.CAFile)
	tokenFile := filepath.Join(c.dir, "consul-token")
	mrRun := func(token string) (string, error) {
		cmd := exec.CommandContext(ctx, c.bin, "mr", "run", "wordcount", "words", "--families", "f", "--output", "table:wc",
			"--addr", gw, "--project", "p", "--instance", "i", "--tls-ca", caFile, "--token", token,
			"--workers-consul", c.consul, "--workers-consul-ca", os.Getenv("TABULA_TEST_CONSUL_CA"), "--workers-cluster", c.name, "--workers-consul-token", "@"+tokenFile, "--min-workers", "2",
			"--reducers", "3", "--progress", "none")
		cmd.Env = withoutEnv(withoutEnv(withoutEnv(c.env, "TABULA_TLS_CERT"), "TABULA_TLS_KEY"), "TABULA_TOKEN")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Without grants: refused, nothing written.
	if out, err := mrRun(tokens["nobody"]); err == nil || !strings.Contains(out, "PermissionDenied") && !strings.Contains(out, "PERMISSION_DENIED") && !strings.Contains(out, "permission") {
		t.Fatalf("mr run as nobody: %v\n%s", err, out)
	}
	if got := mrTableCells(t, ctx, cl, "wc"); len(got) != 0 {
		t.Fatalf("a refused job wrote %d rows", len(got))
	}
	// With the grants: the exact counts.
	out, err := mrRun(tokens["etl"])
	if err != nil {
		t.Fatalf("mr run as etl: %v\n%s", err, out)
	}
	got := mrTableCells(t, ctx, cl, "wc")
	if len(got) != len(want) {
		t.Fatalf("output has %d words, want %d; mr run said:\n%s", len(got), len(want), out)
	}
	for w, n := range want {
		if cells := got[w]; len(cells) != 1 || !strings.HasPrefix(cells[0], "count:count@") || !strings.HasSuffix(cells[0], "="+strconv.FormatInt(n, 10)) {
			t.Fatalf("word %s: cells %v, want one count:count = %d", w, cells, n)
		}
	}
	// The job ran on both workers: the attempts, and the shuffle between
	// them under job tokens.
	var attempts, fetched float64
	for _, w := range workers {
		attempts += mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `outcome="succeeded"`)
		fetched += mrWorkerMetric(t, w, "tabula_mr_worker_fetched_bytes_total")
	}
	if attempts < 2 || fetched <= 0 {
		t.Errorf("the workers ran %v attempts and fetched %v bytes from each other", attempts, fetched)
	}
	// METADATA shows a principal the tablets of the tables it holds a
	// grant on, not others'.
	tlsCA, err := tlsconfig.Client(tlsconfig.Files{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	for who, want := range map[string]codes.Code{"etl": codes.OK, "nobody": codes.PermissionDenied} {
		cl, err := client.Dial(gw, client.Options{Project: "p", Instance: "i", TLS: tlsCA, Token: tokens[who]})
		if err != nil {
			t.Fatal(err)
		}
		tabs, err := cl.Tablets(ctx, "words")
		cl.Close()
		if status.Code(err) != want || (want == codes.OK && len(tabs) != 9) {
			t.Errorf("the tablets of words as %s: %d, %v; want %v", who, len(tabs), err, want)
		}
	}
	// A worker admits no caller without credentials.
	conn, err := grpc.NewClient(workers[0].addr, tlsconfig.DialOption(tlsCA))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := workerpb.NewWorkerClient(conn).Heartbeat(ctx, &workerpb.HeartbeatRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a worker's Heartbeat without credentials: %v, want UNAUTHENTICATED", err)
	}
}
