package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// transportSet is three `tabula dev` servers in this process — one in
// plaintext, one serving mutual TLS, one serving mutual TLS and checking a
// bearer token on every call (a static token file, the caller a superuser,
// so the grant check passes at its cheapest) — each with an official
// client and a table t (family f) holding rows r0000…r0999.
type transportSet struct {
	plain, mtls, token *bigtable.Table
}

func newTransportSet(b *testing.B) transportSet {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	if _, err := certs.Generate(dir, certs.Spec{Clients: []certs.ClientSpec{{Principal: "bench"}}}); err != nil {
		b.Fatal(err)
	}
	ca := filepath.Join(dir, certs.CAFile)
	role, err := tlsconfig.ForRole(tlsconfig.RoleFiles{CertFile: filepath.Join(dir, certs.ServerFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile), ClientCAFile: ca})
	if err != nil {
		b.Fatal(err)
	}
	cf, kf := certs.ClientFiles(dir, "bench")
	clientTLS, err := tlsconfig.Client(tlsconfig.Files{CAFile: ca, CertFile: cf, KeyFile: kf})
	if err != nil {
		b.Fatal(err)
	}
	const token = "bench-token-0123456789abcdef"
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte(token+" bench\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	authn, err := auth.New(auth.Config{TokenFile: tokenFile})
	if err != nil {
		b.Fatal(err)
	}
	open := func(r tlsconfig.Role, c *tls.Config, a *AuthConfig, opts ...grpc.DialOption) *bigtable.Table {
		d, err := StartDev(ctx, DevConfig{Dir: b.TempDir(), Addr: "127.0.0.1:0", TLS: r, Auth: a, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		conn, err := grpc.NewClient(d.Addr(), append([]grpc.DialOption{tlsconfig.DialOption(c)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
		if err != nil {
			b.Fatal(err)
		}
		if err := admin.CreateTable(ctx, "t"); err != nil {
			b.Fatal(err)
		}
		if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
			b.Fatal(err)
		}
		data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
		if err != nil {
			b.Fatal(err)
		}
		tbl := data.Open("t")
		keys := make([]string, 1000)
		muts := make([]*bigtable.Mutation, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%04d", i)
			muts[i] = bigtable.NewMutation()
			muts[i].Set("f", "c", 1000, make([]byte, 1000))
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
		return tbl
	}
	return transportSet{
		plain: open(tlsconfig.Role{}, nil, nil),
		mtls:  open(role, clientTLS, nil),
		token: open(role, clientTLS, &AuthConfig{Authenticator: authn, Superusers: []string{"user:bench"}},
			grpc.WithPerRPCCredentials(auth.BearerToken(token))),
	}
}

// benchTransport runs op on the plaintext, the mTLS and the mTLS+token
// server in turn, one call each per iteration, rotating which goes first
// (so all see the same machine load), and reports each one's time per
// call and the ratios to plaintext.
func benchTransport(b *testing.B, op func(ctx context.Context, t *bigtable.Table, i int) error) {
	set := newTransportSet(b)
	ctx := context.Background()
	tables := []*bigtable.Table{set.plain, set.mtls, set.token}
	// Warm every connection (the handshake is not what is measured: gRPC
	// connections are long-lived).
	for i := range 50 {
		for _, t := range tables {
			if err := op(ctx, t, i); err != nil {
				b.Fatal(err)
			}
		}
	}
	var took [3]time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for k := range tables {
			j := (i + k) % len(tables)
			start := time.Now()
			if err := op(ctx, tables[j], i); err != nil {
				b.Fatal(err)
			}
			took[j] += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Nanoseconds())/n, "plain-ns/call")
	b.ReportMetric(float64(took[1].Nanoseconds())/n, "mtls-ns/call")
	b.ReportMetric(float64(took[2].Nanoseconds())/n, "mtls+token-ns/call")
	b.ReportMetric(float64(took[1])/float64(took[0]), "mtls/plain")
	b.ReportMetric(float64(took[2])/float64(took[0]), "mtls+token/plain")
}

// BenchmarkTransportPointRead: ReadRow of a 1000-byte row through the
// official client, plaintext against mutual TLS and mutual TLS with a
// bearer token, same run.
func BenchmarkTransportPointRead(b *testing.B) {
	benchTransport(b, func(ctx context.Context, t *bigtable.Table, i int) error {
		row, err := t.ReadRow(ctx, fmt.Sprintf("r%04d", i%1000))
		if err == nil && len(row["f"]) != 1 {
			err = fmt.Errorf("row r%04d: %v", i%1000, row)
		}
		return err
	})
}

// BenchmarkTransportSingleRowWrite: Apply of one 1000-byte cell (a durable,
// fsynced write), plaintext against mutual TLS and mutual TLS with a
// bearer token, same run.
func BenchmarkTransportSingleRowWrite(b *testing.B) {
	value := make([]byte, 1000)
	benchTransport(b, func(ctx context.Context, t *bigtable.Table, i int) error {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(2000+i)*1000, value)
		return t.Apply(ctx, fmt.Sprintf("w%06d", i), m)
	})
}
