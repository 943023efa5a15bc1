package master

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/meta"
)

// fakeTableHost records what the master asks of the tablet servers and keeps
// the schema each open table was last given.
type fakeTableHost struct {
	mu    sync.Mutex
	calls []string
	open  map[meta.TableID]meta.Table
	// fail, when set, makes the named method ("OpenTable", ...) fail.
	fail map[string]error
}

func newFakeTableHost() *fakeTableHost {
	return &fakeTableHost{open: make(map[meta.TableID]meta.Table), fail: make(map[string]error)}
}

func (f *fakeTableHost) record(method string, t meta.Table, extra string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s%s", method, t.ID, extra))
	return f.fail[method]
}

func (f *fakeTableHost) OpenTable(_ context.Context, t meta.Table) error {
	if err := f.record("OpenTable", t, ""); err != nil {
		return err
	}
	f.mu.Lock()
	f.open[t.ID] = t
	f.mu.Unlock()
	return nil
}

func (f *fakeTableHost) DropTable(_ context.Context, t meta.Table) error {
	if err := f.record("DropTable", t, ""); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.open, t.ID)
	f.mu.Unlock()
	return nil
}

func (f *fakeTableHost) UpdateSchema(_ context.Context, t meta.Table) error {
	if err := f.record("UpdateSchema", t, ""); err != nil {
		return err
	}
	f.mu.Lock()
	f.open[t.ID] = t
	f.mu.Unlock()
	return nil
}

func (f *fakeTableHost) DropRowRange(_ context.Context, t meta.Table, prefix []byte) error {
	return f.record("DropRowRange", t, fmt.Sprintf(" %q", prefix))
}

func (f *fakeTableHost) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeTableHost) Open(id meta.TableID) (meta.Table, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.open[id]
	return t, ok
}

func (f *fakeTableHost) setFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

// env is an AdminService on a real gRPC server on loopback, with the
// official admin client and the extension's client connected to it.
type env struct {
	ctx     context.Context
	store   blob.Store
	catalog meta.Catalog
	control *fakeTableHost
	svc     *AdminService
	admin   *bigtable.AdminClient
	ext     adminextpb.LocalityGroupsClient
	conn    *grpc.ClientConn
}

const (
	testProject  = "proj"
	testInstance = "inst"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newEnv(t *testing.T) *env {
	t.Helper()
	store := blob.NewMemory()
	return newEnvOn(t, store, newFakeTableHost(), Options{})
}

// newEnvOn starts a service over store and control; opts supplies the
// remaining options (opts.Host, when set, stands in front of control).
func newEnvOn(t *testing.T, store blob.Store, control *fakeTableHost, opts Options) *env {
	t.Helper()
	ctx := context.Background()
	opts.Catalog = NewBlobCatalog(store, "catalog")
	if opts.Host == nil {
		opts.Host = control
	}
	opts.Store = store
	opts.Logger = quietLogger()
	svc, err := NewAdminService(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	admin, err := bigtable.NewAdminClient(ctx, testProject, testInstance, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, store: store, catalog: opts.Catalog, control: control, svc: svc, admin: admin,
		ext: adminextpb.NewLocalityGroupsClient(conn), conn: conn}
}

func tableFullName(table string) string {
	return "projects/" + testProject + "/instances/" + testInstance + "/tables/" + table
}

// wantCode fails the test unless err is a gRPC status with code c.
func wantCode(t *testing.T, what string, err error, c codes.Code) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, c)
	}
}

func optionConn(e *env) option.ClientOption { return option.WithGRPCConn(e.conn) }
