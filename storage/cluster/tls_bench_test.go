package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// transportPair is two `tabula dev` servers in this process, one in
// plaintext and one serving mutual TLS, each with an official client and a
// table t (family f) holding rows r0000…r0999.
type transportPair struct {
	plain, mtls *bigtable.Table
}

func newTransportPair(b *testing.B) transportPair {
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
	open := func(r tlsconfig.Role, c *tls.Config) *bigtable.Table {
		d, err := StartDev(ctx, DevConfig{Dir: b.TempDir(), Addr: "127.0.0.1:0", TLS: r, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		conn, err := grpc.NewClient(d.Addr(), tlsconfig.DialOption(c))
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
	return transportPair{plain: open(tlsconfig.Role{}, nil), mtls: open(role, clientTLS)}
}

// benchTransport runs op on the plaintext and the mTLS server alternately,
// one call each per iteration (so both see the same machine load), and
// reports each side's time per call and their ratio.
func benchTransport(b *testing.B, op func(ctx context.Context, t *bigtable.Table, i int) error) {
	p := newTransportPair(b)
	ctx := context.Background()
	// Warm both connections (the handshake is not what is measured:
	// gRPC connections are long-lived).
	for i := range 50 {
		if err := op(ctx, p.plain, i); err != nil {
			b.Fatal(err)
		}
		if err := op(ctx, p.mtls, i); err != nil {
			b.Fatal(err)
		}
	}
	var plain, mtls time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		first, second, d1, d2 := p.plain, p.mtls, &plain, &mtls
		if i%2 == 1 { // alternate the order too
			first, second, d1, d2 = p.mtls, p.plain, &mtls, &plain
		}
		start := time.Now()
		if err := op(ctx, first, i); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := op(ctx, second, i); err != nil {
			b.Fatal(err)
		}
		*d1 += mid.Sub(start)
		*d2 += time.Since(mid)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plain.Nanoseconds())/n, "plain-ns/call")
	b.ReportMetric(float64(mtls.Nanoseconds())/n, "mtls-ns/call")
	b.ReportMetric(float64(mtls)/float64(plain), "mtls/plain")
}

// BenchmarkTransportPointRead: ReadRow of a 1000-byte row through the
// official client, plaintext against mutual TLS, same run.
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
// fsynced write), plaintext against mutual TLS, same run.
func BenchmarkTransportSingleRowWrite(b *testing.B) {
	value := make([]byte, 1000)
	benchTransport(b, func(ctx context.Context, t *bigtable.Table, i int) error {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(2000+i)*1000, value)
		return t.Apply(ctx, fmt.Sprintf("w%06d", i), m)
	})
}
