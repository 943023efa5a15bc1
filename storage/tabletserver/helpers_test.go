package tabletserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

const (
	testProject  = "p"
	testInstance = "i"
)

// testEnv is a DataService over a Host on an in-memory store with a real
// commit log in a temporary directory, served by a real gRPC server on
// loopback and driven by the official Go client.
type testEnv struct {
	t      testing.TB
	ctx    context.Context
	host   *Host
	reg    *prometheus.Registry
	client *bigtable.Client
	stub   bigtablepb.BigtableClient
	store  blob.Store
	log    *commitlog.Log
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestEnv(t testing.TB, ho HostOptions, do DataOptions) *testEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if ho.Store == nil {
		ho.Store = blob.NewMemory()
	}
	logOpts := commitlog.Options{Dir: filepath.Join(t.TempDir(), "log")}
	lg, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	ho.Log, ho.LogOptions = lg, logOpts
	if ho.Cache == nil {
		ho.Cache = sstable.NewCache(8 << 20)
	}
	ho.Logger = quietLogger()
	reg := prometheus.NewRegistry()
	ho.Registerer = reg
	host, err := NewHost(ctx, ho)
	if err != nil {
		t.Fatal(err)
	}
	// The server's codec is ServerCodec: scans are written in wire form
	// (readrows_encode.go), as in the cluster's servers.
	do.EncodedResponses = true
	ds := NewDataService(host, do)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(MaxRequestBytes), ServerCodec(),
		grpc.UnaryInterceptor(host.UnaryInterceptor()), grpc.StreamInterceptor(host.StreamInterceptor()))
	bigtablepb.RegisterBigtableServer(srv, ds)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRequestBytes), grpc.MaxCallSendMsgSize(MaxRequestBytes)))
	if err != nil {
		t.Fatal(err)
	}
	client, err := bigtable.NewClientWithConfig(ctx, testProject, testInstance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, ctx: ctx, host: host, reg: reg, client: client, stub: bigtablepb.NewBigtableClient(conn), store: ho.Store, log: lg}
	t.Cleanup(func() {
		client.Close()
		conn.Close()
		srv.Stop()
		if err := host.Close(); err != nil {
			t.Errorf("host close: %v", err)
		}
		if err := lg.Close(); err != nil {
			t.Errorf("log close: %v", err)
		}
	})
	return e
}

// tableDef is a table to create directly on the host (the admin API is
// storage/master's).
type tableDef struct {
	name        string
	families    []string
	gc          map[string]tabletdesc.GCPolicy
	granularity meta.Granularity
	splits      []string // initial tablet boundaries
}

func (e *testEnv) tableMeta(d tableDef) meta.Table {
	t := meta.Table{ID: meta.TableID{Instance: testInstance, Table: d.name}, Families: map[string]tabletdesc.Family{},
		Granularity: d.granularity}
	for _, f := range d.families {
		t.Families[f] = tabletdesc.Family{GC: d.gc[f]}
	}
	var start []byte
	for i, s := range append(slices.Clone(d.splits), "") {
		ref := meta.TabletRef{ID: fmt.Sprintf("%s-%d", d.name, i), Start: start}
		if s != "" {
			ref.End = []byte(s)
		}
		t.Tablets = append(t.Tablets, ref)
		start = []byte(s)
	}
	return t
}

func (e *testEnv) createTable(d tableDef) *bigtable.Table {
	e.t.Helper()
	if err := e.host.OpenTable(e.ctx, e.tableMeta(d)); err != nil {
		e.t.Fatal(err)
	}
	return e.client.Open(d.name)
}

func tableName(t string) string {
	return meta.TableID{Instance: testInstance, Table: t}.FullName(testProject)
}

// formatRow renders a row as "key{fam:qual@ts=value[labels] ...}", cells
// in the order the client returns them, families by name.
func formatRow(r bigtable.Row) string {
	var b strings.Builder
	b.WriteString(r.Key())
	b.WriteString("{")
	fams := make([]string, 0, len(r))
	for f := range r {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	first := true
	for _, f := range fams {
		for _, it := range r[f] {
			if !first {
				b.WriteString(" ")
			}
			first = false
			fmt.Fprintf(&b, "%s@%d=%s", it.Column, it.Timestamp, it.Value)
			if len(it.Labels) > 0 {
				fmt.Fprintf(&b, "%v", it.Labels)
			}
		}
	}
	b.WriteString("}")
	return b.String()
}

// readAll reads rows with the client and renders them, space separated.
func readAll(t *testing.T, ctx context.Context, tbl *bigtable.Table, rs bigtable.RowSet, opts ...bigtable.ReadOption) string {
	t.Helper()
	var out []string
	err := tbl.ReadRows(ctx, rs, func(r bigtable.Row) bool {
		out = append(out, formatRow(r))
		return true
	}, opts...)
	if err != nil {
		t.Fatalf("ReadRows: %v", err)
	}
	return strings.Join(out, " ")
}

// wantCode fails unless err is a gRPC status with code and a message
// containing every one of parts.
func wantCode(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Fatalf("error %q does not mention %q", status.Convert(err).Message(), p)
		}
	}
}

func ts(ms int64) bigtable.Timestamp { return bigtable.Timestamp(ms * 1000) }
