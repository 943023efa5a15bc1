//go:build integration

package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// peerTLS maps the gRPC and HTTP addresses of the roles of mTLS clusters
// to the client config the test reaches them with. Addresses are fresh
// ports, so one map serves every cluster of the test process.
var peerTLS sync.Map // host:port → *tls.Config

func registerTLS(c *tls.Config, addrs ...string) {
	for _, a := range addrs {
		if a != "" {
			peerTLS.Store(a, c)
		}
	}
}

// tlsFor returns the client TLS of the role at addr, nil (plaintext) for
// a role of a cluster without mTLS.
func tlsFor(addr string) *tls.Config {
	if c, ok := peerTLS.Load(addr); ok {
		return c.(*tls.Config)
	}
	return nil
}

// httpGet GETs hostport/path from a role's HTTP ops port: HTTPS with the
// test's client certificate for a role of an mTLS cluster.
func httpGet(hostportPath string) (*http.Response, error) {
	hostport, _, _ := strings.Cut(hostportPath, "/")
	if c := tlsFor(hostport); c != nil {
		hc := &http.Client{Timeout: statusTimeout, Transport: &http.Transport{TLSClientConfig: c}}
		return hc.Get("https://" + hostportPath)
	}
	return (&http.Client{Timeout: statusTimeout}).Get("http://" + hostportPath)
}

// statusTimeout bounds status requests: a process paused with SIGSTOP
// accepts connections and never answers.
const statusTimeout = 3 * time.Second

func withoutEnv(env []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// makeCerts makes the cluster's CA, the certificate every role serves and
// calls with, and the test's client certificate; it returns the roles'
// TLS flags and sets c.clientTLS.
func (c *testCluster) makeCerts() []string {
	dir := filepath.Join(c.dir, "tls")
	if _, err := certs.Generate(dir, certs.Spec{Clients: []certs.ClientSpec{{Principal: "tester"}}}); err != nil {
		c.t.Fatal(err)
	}
	ca := filepath.Join(dir, certs.CAFile)
	cf, kf := certs.ClientFiles(dir, "tester")
	var err error
	if c.clientTLS, err = tlsconfig.Client(tlsconfig.Files{CAFile: ca, CertFile: cf, KeyFile: kf}); err != nil {
		c.t.Fatal(err)
	}
	return []string{"--tls-cert", filepath.Join(dir, certs.ServerFile), "--tls-key", filepath.Join(dir, certs.ServerKeyFile), "--tls-client-ca", ca}
}

// checkRefusesStrangers checks that the role at p serves only callers with
// a client certificate of the cluster's CA: plaintext gRPC, TLS without a
// client certificate, and plain HTTP on the ops port all fail.
func (c *testCluster) checkRefusesStrangers(ctx context.Context, p *roleProc) {
	c.t.Helper()
	anon, err := tlsconfig.Client(tlsconfig.Files{CAFile: filepath.Join(c.dir, "tls", certs.CAFile)})
	if err != nil {
		c.t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{"plaintext": nil, "TLS without a client certificate": anon, "the cluster's client certificate": c.clientTLS} {
		conn, err := grpc.NewClient(p.addr, tlsconfig.DialOption(tc))
		if err != nil {
			c.t.Fatal(err)
		}
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		conn.Close()
		if want := tc == c.clientTLS; (err == nil) != want {
			c.t.Fatalf("%s %s: health check with %s: err = %v", p.role, p.addr, name, err)
		}
	}
	if resp, err := http.Get("http://" + p.http + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			c.t.Fatalf("%s %s: /healthz answered over plain HTTP", p.role, p.http)
		}
	}
}

// TestClusterBackendsSecured: the cluster runs against a Consul agent that
// enforces ACLs by default deny, with the minimal-policy token: the keys it
// writes are invisible without a token, and the token cannot touch keys
// outside tabula/. Its store is MinIO over HTTPS with a private CA. With
// mTLS on, every role refuses callers without the cluster's client
// certificate.
func TestClusterBackendsSecured(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 1, mtls: true})
	c.waitAllServed(30*time.Second, 1)
	prefix := "tabula/" + c.name + "/"
	cfg := api.DefaultConfig()
	cfg.Address = c.consul
	cfg.Token = requireEnv(t, "TABULA_TEST_CONSUL_TOKEN")[0]
	tabula, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, _, err := tabula.KV().Keys(prefix, "", nil)
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys under %s with Tabula's token: %v, %v", prefix, keys, err)
	}
	if _, err := tabula.KV().Put(&api.KVPair{Key: "elsewhere/" + c.name, Value: []byte("x")}, nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("Tabula's token wrote outside tabula/: err = %v", err)
	}
	cfg.Token = "anonymous"
	anon, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if keys, _, err := anon.KV().Keys(prefix, "", nil); err == nil && len(keys) > 0 {
		t.Fatalf("keys under %s visible without a token: %v", prefix, keys)
	}
	c.checkRefusesStrangers(ctx, c.masters[0])
	c.checkRefusesStrangers(ctx, c.servers[0])

	// No credential in a log, a status page or the metrics.
	secrets := requireEnv(t, "TABULA_TEST_CONSUL_TOKEN", "TABULA_TEST_S3_ACCESS_KEY", "TABULA_TEST_S3_SECRET_KEY")
	for _, p := range []*roleProc{c.masters[0], c.servers[0]} {
		pages := map[string]string{}
		b, err := os.ReadFile(p.logPath)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s log: %d bytes, %v", p.role, len(b), err)
		}
		pages["log"] = string(b)
		for _, path := range []string{"/status", "/status?format=json", "/metrics"} {
			resp, err := httpGet(p.http + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: %s", p.role, path, resp.Status)
			}
			pages[path] = string(b)
		}
		for where, text := range pages {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("%s's %s shows a credential", p.role, where)
				}
			}
		}
	}
}
