package cluster

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// TestDevServesMutualTLS: with a certificate, a key and a client CA, `tabula
// dev` serves the data API and the HTTP ops port over TLS, and a caller
// without a client certificate of that CA gets nothing.
func TestDevServesMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Spec{Clients: []certs.ClientSpec{{Principal: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, certs.CAFile)
	role, err := tlsconfig.ForRole(tlsconfig.RoleFiles{CertFile: filepath.Join(dir, certs.ServerFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile), ClientCAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	d, err := StartDev(ctx, DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TLS: role,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	cf, kf := certs.ClientFiles(dir, "alice")
	alice, err := tlsconfig.Client(tlsconfig.Files{CAFile: ca, CertFile: cf, KeyFile: kf})
	if err != nil {
		t.Fatal(err)
	}
	official := func(c *tls.Config) (*bigtable.AdminClient, *bigtable.Client) {
		conn, err := grpc.NewClient(d.Addr(), tlsconfig.DialOption(c))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
		if err != nil {
			t.Fatal(err)
		}
		data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
		if err != nil {
			t.Fatal(err)
		}
		return admin, data
	}
	admin, data := official(alice)
	if err := admin.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "c", 1000, []byte("v"))
	if err := data.Open("t").Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	row, err := data.Open("t").ReadRow(ctx, "r")
	if err != nil || len(row["f"]) != 1 || string(row["f"][0].Value) != "v" {
		t.Fatalf("read over mTLS: %v, %v", row, err)
	}

	// No client certificate; plaintext: refused, nothing written.
	anon, err := tlsconfig.Client(tlsconfig.Files{CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*tls.Config{"no client certificate": anon, "plaintext": nil} {
		_, data := official(c)
		// A server-timestamped write is not idempotent: the client does
		// not retry its UNAVAILABLE until the deadline.
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.ServerTime, []byte(name))
		if err := data.Open("t").Apply(ctx, "x", m); err == nil {
			t.Fatalf("%s: write accepted", name)
		}
	}
	if row, err := data.Open("t").ReadRow(ctx, "x"); err != nil || len(row) != 0 {
		t.Fatalf("refused writes left row x = %v (err %v)", row, err)
	}

	// The ops port: HTTPS with the same client certificate.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: alice}}
	resp, err := hc.Get("https://" + d.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over TLS: %d %s", resp.StatusCode, body)
	}
	anonHTTP := &http.Client{Transport: &http.Transport{TLSClientConfig: anon}}
	if resp, err := anonHTTP.Get("https://" + d.HTTPAddr() + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatal("/metrics without a client certificate answered")
	}
	if resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "go_goroutines") {
			t.Fatal("/metrics served over plaintext HTTP")
		}
	}
}
