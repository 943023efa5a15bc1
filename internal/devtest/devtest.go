// Package devtest is test support shared by the packages above the server
// (mapreduce, beamio, pipelines): an in-process `tabula dev` with the
// official Cloud Bigtable clients connected to it — the reference those
// tests check their results against — and helpers to load tables and
// compare rows. It is imported only by tests.
package devtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/iam"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster"
)

// Project and Instance are those of the official clients, and of
// Tabula's CLI and client by default.
const (
	Project  = "tabula"
	Instance = "dev"
)

// Server is a tabula dev in this process with the official data and admin
// clients on it.
type Server struct {
	// Addr is the server's gRPC address.
	Addr  string
	Data  *bigtable.Client
	Admin *bigtable.AdminClient

	dev     *cluster.Dev
	conn    *grpc.ClientConn
	tempDir string
}

// Start starts a server with cfg; an empty cfg.Dir is a temporary
// directory that Close removes, an empty Addr a free loopback port, a nil
// Logger discards. Close stops it.
func Start(ctx context.Context, cfg cluster.DevConfig) (_ *Server, err error) {
	return start(ctx, cfg)
}

// start is Start, the official clients dialing with opts besides.
func start(ctx context.Context, cfg cluster.DevConfig, opts ...grpc.DialOption) (_ *Server, err error) {
	s := &Server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if cfg.Dir == "" {
		if s.tempDir, err = os.MkdirTemp("", "tabula-devtest"); err != nil {
			return nil, err
		}
		cfg.Dir = s.tempDir
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.dev, err = cluster.StartDev(ctx, cfg); err != nil {
		return nil, fmt.Errorf("start tabula dev: %w", err)
	}
	s.Addr = s.dev.Addr()
	// The clients dial as the server's peers do: with cfg.TLS.Client
	// (plaintext when nil).
	if s.conn, err = grpc.NewClient(s.Addr, append([]grpc.DialOption{tlsconfig.DialOption(cfg.TLS.Client),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256 << 20))}, opts...)...); err != nil {
		return nil, err
	}
	if s.Data, err = bigtable.NewClientWithConfig(ctx, Project, Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(s.conn)); err != nil {
		return nil, err
	}
	if s.Admin, err = bigtable.NewAdminClient(ctx, Project, Instance, option.WithGRPCConn(s.conn)); err != nil {
		return nil, err
	}
	return s, nil
}

// Main runs a test binary's tests (run, e.g. m.Run or Beam's
// ptest.MainRet) with one server shared by all of them in *shared, and
// returns the exit code; TestMain passes it to os.Exit.
func Main(cfg cluster.DevConfig, shared **Server, run func() int) int {
	s, err := Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	*shared = s
	return run()
}

// Lazy is a server started by the first test or benchmark that asks for
// it (Get) and stopped by Close (from TestMain): for benchmarks that need
// a server of their own configuration, which plain test runs never start.
type Lazy struct {
	cfg  cluster.DevConfig
	once sync.Once
	s    *Server
	err  error
}

// BenchConfig is the configuration of a benchmark's own server: tabula
// dev's defaults but for a 4 MiB memtable, so that a benchmark table keeps
// the tablets it is created with and lies mostly in SSTables, as a table on
// disk does. (A test binary's shared server may split tablets small for a
// split test: a 90 MB benchmark table became 130–160 tablets of 1 MB there,
// and went on splitting while measured.)
var BenchConfig = cluster.DevConfig{MemtableBytes: 4 << 20}

// NewLazy returns a Lazy server of cfg, not started.
func NewLazy(cfg cluster.DevConfig) *Lazy { return &Lazy{cfg: cfg} }

// Get starts the server on the first call and returns it; it fails tb if
// the server did not start (then and on every later call).
func (l *Lazy) Get(tb testing.TB) *Server {
	tb.Helper()
	l.once.Do(func() { l.s, l.err = Start(context.Background(), l.cfg) })
	if l.err != nil {
		tb.Fatalf("starting the server: %v", l.err)
	}
	return l.s
}

// Close stops the server if Get started it.
func (l *Lazy) Close() {
	if l.s != nil {
		_ = l.s.Close()
	}
}

// StartT starts a server for one test, stopped when the test ends; it
// fails the test if the server does not start.
func StartT(t testing.TB, cfg cluster.DevConfig) *Server {
	t.Helper()
	return StartTWithToken(t, cfg, "")
}

// StartTWithToken is StartT with the official clients sending token (a
// bearer token, none if empty) with every call: for a server with
// authentication on (cfg.Auth), the token of a principal allowed what the
// test's setup does.
func StartTWithToken(t testing.TB, cfg cluster.DevConfig, token string) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	var opts []grpc.DialOption
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerToken(token)))
	}
	s, err := start(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Close stops the clients and the server and removes a temporary
// directory Start made.
func (s *Server) Close() error {
	var errs []error
	// The clients share one connection, which a client's Close may close
	// (whether a client closes a connection given with WithGRPCConn
	// varies between versions): closing it again only says so (Canceled).
	closed := func(err error) error {
		if status.Code(err) == codes.Canceled {
			return nil
		}
		return err
	}
	if s.Data != nil {
		errs = append(errs, closed(s.Data.Close()))
	}
	if s.Admin != nil {
		errs = append(errs, closed(s.Admin.Close()))
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.dev != nil {
		errs = append(errs, s.dev.Close())
	}
	if s.tempDir != "" {
		errs = append(errs, os.RemoveAll(s.tempDir))
	}
	return errors.Join(errs...)
}

// HTTPAddr is the server's HTTP address (/metrics, /healthz), empty when
// its DevConfig had no HTTPAddr.
func (s *Server) HTTPAddr() string { return s.dev.HTTPAddr() }

// ClientOptions are the official client's options for a server at addr
// without TLS or credentials (for clients of other projects or instances).
func ClientOptions(addr string) []option.ClientOption {
	return []option.ClientOption{option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

// SessionClient returns an official data client that dials the server
// itself (ClientOptions), as applications outside the emulator mechanism
// do: it sends single-row reads and writes on sessions
// (storage/datasession) once the server's client configuration says so.
// The caller closes it.
func (s *Server) SessionClient(ctx context.Context) (*bigtable.Client, error) {
	return bigtable.NewClientWithConfig(ctx, Project, Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true}, ClientOptions(s.Addr)...)
}

// Context returns a context for one of t's calls, cancelled when t ends
// or after 3 minutes.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// CreateTable creates table with families (no garbage collection) and
// split keys through the official admin client, failing t if it cannot.
func (s *Server) CreateTable(t testing.TB, table string, families []string, splits ...string) {
	t.Helper()
	fams := map[string]bigtable.Family{}
	for _, f := range families {
		fams[f] = bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}
	}
	if err := s.Admin.CreateTableFromConf(Context(t), &bigtable.TableConf{TableID: table, ColumnFamilies: fams, SplitKeys: splits}); err != nil {
		t.Fatalf("create %s: %v", table, err)
	}
}

// WriteRows writes the SetCell mutations of rms through the official
// client, 500 rows a request, failing t if any fails.
func (s *Server) WriteRows(t testing.TB, table string, rms []cell.RowMutation) {
	t.Helper()
	ctx := Context(t)
	tbl := s.Data.Open(table)
	for start := 0; start < len(rms); start += 500 {
		end := min(start+500, len(rms))
		keys := make([]string, 0, end-start)
		muts := make([]*bigtable.Mutation, 0, end-start)
		for _, rm := range rms[start:end] {
			m := bigtable.NewMutation()
			for _, mu := range rm.Mutations {
				m.Set(mu.Family, string(mu.Qualifier), bigtable.Timestamp(mu.Timestamp), mu.Value)
			}
			keys = append(keys, string(rm.Row))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("write %q: %v", keys[i], e)
			}
		}
	}
}

// ReadRows reads rows through the official client (the reference), each
// with its cells in Bigtable order, failing t if the read fails.
func (s *Server) ReadRows(t testing.TB, table string, rs bigtable.RowSet, opts ...bigtable.ReadOption) []cell.Row {
	t.Helper()
	var out []cell.Row
	err := s.Data.Open(table).ReadRows(Context(t), rs, func(r bigtable.Row) bool {
		out = append(out, FromOfficial(r))
		return true
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CellDump is every cell of table with its timestamp, in order, as
// "row|family:qualifier|timestamp|hex value": what "byte-identical"
// compares.
func (s *Server) CellDump(t testing.TB, table string) []string {
	t.Helper()
	rows := s.ReadRows(t, table, bigtable.InfiniteRange(""))
	var out []string
	for _, r := range rows {
		for _, c := range r.Cells {
			out = append(out, fmt.Sprintf("%s|%s:%s|%d|%x", r.Key, c.Family, c.Qualifier, c.Timestamp, c.Value))
		}
	}
	return out
}

// FromOfficial converts a row the official client read, its cells sorted
// in Bigtable order (family, qualifier, newest first).
func FromOfficial(r bigtable.Row) cell.Row {
	cr := cell.Row{Key: []byte(r.Key())}
	for fam, items := range r {
		for _, it := range items {
			q := it.Column[len(fam)+1:]
			cr.Cells = append(cr.Cells, cell.Cell{Family: fam, Qualifier: []byte(q), Timestamp: int64(it.Timestamp), Value: it.Value})
		}
	}
	sort.SliceStable(cr.Cells, func(i, j int) bool { return cell.CompareCells(cr.Cells[i], cr.Cells[j]) < 0 })
	return cr
}

// Digest is a row's identity for comparisons: its key, its cell count and
// a hash of every cell (family, qualifier, timestamp, value), in order.
func Digest(r cell.Row) string {
	h := sha256.New()
	for _, c := range r.Cells {
		fmt.Fprintf(h, "%q %q %d %q;", c.Family, c.Qualifier, c.Timestamp, c.Value)
	}
	return fmt.Sprintf("%s/%d/%s", r.Key, len(r.Cells), hex.EncodeToString(h.Sum(nil))[:16])
}

// Digests are the Digest of each row (as []any, for passert).
func Digests(rows []cell.Row) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = Digest(r)
	}
	return out
}

// SplitKeys returns the n-1 keys splitting rows keys "row%05d" evenly.
func SplitKeys(rows, n int) []string {
	var s []string
	for i := 1; i < n; i++ {
		s = append(s, fmt.Sprintf("row%05d", i*rows/n))
	}
	return s
}

// Rows returns n rows "r%05d" with two versions of f:a, one of f:b and
// (every third row) one of g:c; timestamps are whole milliseconds (tables
// keep millisecond granularity, as Cloud Bigtable's do).
func Rows(n int) []cell.RowMutation {
	out := make([]cell.RowMutation, n)
	for i := range out {
		key := []byte(fmt.Sprintf("r%05d", i))
		ms := []cell.Mutation{
			cell.Set("f", []byte("a"), 1_000_000, []byte(fmt.Sprintf("a-old-%d", i))),
			cell.Set("f", []byte("a"), 2_000_000+1000*int64(i), []byte(fmt.Sprintf("a-new-%d", i))),
			cell.Set("f", []byte("b"), 1_500_000, []byte(fmt.Sprintf("b-%d-%x", i, i*7919))),
		}
		if i%3 == 0 {
			ms = append(ms, cell.Set("g", []byte("c"), 3_000_000, []byte{byte(i), 0, 0xff}))
		}
		out[i] = cell.RowMutation{Row: key, Mutations: ms}
	}
	return out
}

// StartTWithAuth starts, for one test, a server with authentication on: a
// token file with principal root (the superuser, whom the official
// clients act as) and principals, each with token "<principal>-token-" and
// 16 hex digits, and grants cached 1 ms. It returns the server and the
// tokens by principal.
func StartTWithAuth(t testing.TB, cfg cluster.DevConfig, principals ...string) (*Server, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var lines []string
	for _, p := range append([]string{"root"}, principals...) {
		tokens[p] = p + "-token-0123456789abcdef"
		lines = append(lines, tokens[p]+" "+p)
	}
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Config{TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = &cluster.AuthConfig{Authenticator: authn, Superusers: []string{"user:root"}, CacheTTL: time.Millisecond}
	return StartTWithToken(t, cfg, tokens["root"]), tokens
}

// Grant adds member (user:NAME or group:NAME) to role (an IAM role:
// roles/bigtable.reader, roles/bigtable.user, …) on table, failing t if
// it cannot.
func (s *Server) Grant(t testing.TB, table, member, role string) {
	t.Helper()
	ctx := Context(t)
	h := s.Admin.TableIAM(table)
	p, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(member, iam.RoleName(role))
	if err := h.SetPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
}
