package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/authview"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// Defaults of DevConfig (the cache sizes are the tablet server's too: see
// ServerConfig).
const (
	// DefaultBlockCacheBytes sizes the SSTable block cache of a server.
	DefaultBlockCacheBytes = 256 << 20
	// DefaultScanCacheBytes sizes the scan cache (recently read cells).
	DefaultScanCacheBytes = 64 << 20
	// DefaultStopTimeout bounds a graceful stop.
	DefaultStopTimeout = 10 * time.Second
	// DevAgnosticInstance is the one instance of --instance-agnostic.
	DevAgnosticInstance = "dev"
)

// DevConfig configures StartDev. Zero values take the documented defaults.
type DevConfig struct {
	// Dir holds everything: Dir/store (SSTables, tablet states, backups),
	// Dir/coord.json (the lock service's keys, the table catalog among
	// them: DevCoordFile) and Dir/log (the commit log). A Dir written by
	// an older dev, with the catalog in Dir/store/catalog, has it moved
	// into the lock service at start. Required.
	Dir string
	// Addr is the gRPC listen address (port 0 picks one: see Addr()).
	Addr string
	// HTTPAddr, when set, serves /metrics, /debug/pprof/ and /healthz.
	HTTPAddr string
	// MemtableBytes and SplitBytes are the tablets' minor compaction and
	// split thresholds (the engine's defaults when zero).
	MemtableBytes int64
	SplitBytes    int64
	// BlockCacheBytes and ScanCacheBytes size the caches shared by all
	// tablets; default 256 MiB and 64 MiB, negative disables.
	BlockCacheBytes int64
	ScanCacheBytes  int64
	// Limits validate writes; zero means cell.DefaultLimits().
	Limits cell.Limits
	// InstanceAgnostic maps every instance to one, so that clients
	// configured with any project and instance see the same tables.
	InstanceAgnostic bool
	// StopTimeout bounds the graceful stop of Close before in-flight
	// requests are cut; default 10 s.
	StopTimeout time.Duration
	// LogTruncateInterval is how often the commit log is truncated to the
	// oldest redo point of the tablets; default
	// tabletserver.DefaultLogTruncateInterval.
	LogTruncateInterval time.Duration
	// SweepInterval is how often the SSTables no tablet references any
	// more are deleted, and SweepGrace spares younger files (a compaction
	// may be writing one); defaults DefaultGCInterval and DefaultGCGrace,
	// the cluster master's.
	SweepInterval, SweepGrace time.Duration
	// UndeleteRetention keeps deleted tables restorable by UndeleteTable
	// this long (master.Options.UndeleteRetention); zero: deleted at once.
	UndeleteRetention time.Duration
	// Logger is the structured log; default JSON on stderr.
	Logger *slog.Logger
	// Auth, when set, requires credentials and enforces the tables'
	// grants on every RPC (AuthConfig); nil: everyone may do everything.
	Auth *AuthConfig
	// RegisterServices, when set, registers more gRPC services on the
	// server's port before it serves (the MapReduce worker of `tabula
	// dev`, say); they get the same interceptors as the data API.
	RegisterServices func(*grpc.Server)
	// TLS secures the gRPC and HTTP ports (TLS.Server) and the calls to
	// other servers (TLS.Client); the zero value is plaintext.
	TLS tlsconfig.Role
}

// Dev is the whole of Tabula in one process: the tablet server (a
// tabletserver.Host and its data API), the master's admin API and its
// locality group extension over the same Host, on one gRPC server, with
// metrics, pprof and a health check over HTTP.
type Dev struct {
	cfg      DevConfig
	log      *slog.Logger
	lock     *os.File
	kv       *coord.Local
	commit   *commitlog.Log
	store    blob.Store
	states   tablet.StateStore
	swept    prometheus.Counter
	host     *tabletserver.Host
	grpc     *grpc.Server
	lis      net.Listener
	http     *http.Server
	httpLis  net.Listener
	serving  atomic.Bool
	health   *health.Server
	serveErr chan error

	// The periodic work (commit-log truncation, the file sweep) runs in
	// goroutines started by every; closing stopBackground ends them and
	// background waits for them.
	stopBackground     chan struct{}
	stopBackgroundOnce sync.Once
	background         sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// StartDev assembles and starts a dev server on cfg.Dir: it recovers every
// table of the catalog (replaying the commit log) before it listens, so
// that once Addr answers, every acknowledged write is readable. Close stops
// it.
func StartDev(ctx context.Context, cfg DevConfig) (_ *Dev, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("dev: --dir is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.BlockCacheBytes == 0 {
		cfg.BlockCacheBytes = DefaultBlockCacheBytes
	}
	if cfg.ScanCacheBytes == 0 {
		cfg.ScanCacheBytes = DefaultScanCacheBytes
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.Limits == (cell.Limits{}) {
		cfg.Limits = cell.DefaultLimits()
	}
	if cfg.LogTruncateInterval <= 0 {
		cfg.LogTruncateInterval = tabletserver.DefaultLogTruncateInterval
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultGCInterval
	}
	if cfg.SweepGrace <= 0 {
		cfg.SweepGrace = DefaultGCGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	d := &Dev{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 2), stopBackground: make(chan struct{})}
	defer func() {
		if err != nil {
			d.abort()
		}
	}()

	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if d.lock, err = lockDir(cfg.Dir); err != nil {
		return nil, err
	}
	if d.store, err = blob.NewLocal(filepath.Join(cfg.Dir, "store")); err != nil {
		return nil, err
	}
	store := d.store
	if d.kv, err = openDevCoord(ctx, cfg.Dir, store, d.log); err != nil {
		return nil, err
	}
	d.states = tablet.NewBlobStateStore(store, "state")
	logOpts := commitlog.Options{Dir: filepath.Join(cfg.Dir, "log")}
	if d.commit, err = commitlog.Open(ctx, logOpts); err != nil {
		return nil, fmt.Errorf("dev: opening the commit log: %w", err)
	}
	var scanCache *tablet.ScanCache
	if cfg.ScanCacheBytes > 0 {
		if scanCache, err = tablet.NewScanCache(cfg.ScanCacheBytes); err != nil {
			return nil, err
		}
	}
	reg := prometheus.NewRegistry()
	d.swept = prometheus.NewCounter(prometheus.CounterOpts{Name: "tabula_dev_swept_files_total", Help: "SSTables no tablet referenced any more, deleted by the periodic sweep."})
	reg.MustRegister(d.swept)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.host, err = tabletserver.NewHost(ctx, tabletserver.HostOptions{
		Store:         store,
		Log:           d.commit,
		LogOptions:    logOpts,
		Cache:         sstable.NewCache(max(cfg.BlockCacheBytes, 0)),
		ScanCache:     scanCache,
		StateStore:    d.states,
		Limits:        cfg.Limits,
		MemtableBytes: cfg.MemtableBytes,
		SplitBytes:    cfg.SplitBytes,
		Logger:        d.log,
		Registerer:    reg,
		// The Host's own truncation could run while recovery has opened
		// some tables but not others, and drop log records that the
		// others still need; the dev server truncates itself, once every
		// table is open (truncateLog).
		LogTruncateInterval: neverInterval,
	})
	if err != nil {
		return nil, err
	}
	catalog := NewCoordCatalog(d.kv)
	adminOpts := master.Options{
		Catalog: catalog,
		Host:    d.host,
		Store:   store,
		States:  d.states,
		Limits:  cfg.Limits,
		Logger:  d.log,
		// Restored tables reference files in other tables' directories.
		LiveFiles:         d.liveFiles,
		UndeleteRetention: cfg.UndeleteRetention,
	}
	if cfg.InstanceAgnostic {
		adminOpts.Instance = DevAgnosticInstance
	}
	admin, err := master.NewAdminService(adminOpts)
	if err != nil {
		return nil, err
	}
	// Recover before listening: a client that reaches the server finds
	// every table open and every acknowledged write replayed. Only then
	// may the commit log be truncated (truncateLog): before, it holds
	// records of tables not yet open.
	start := time.Now()
	if err := admin.Start(ctx); err != nil {
		return nil, err
	}
	d.log.Info("recovered", "dir", cfg.Dir, "took", time.Since(start).String())
	d.every(cfg.LogTruncateInterval, d.truncateLog)
	d.every(cfg.SweepInterval, d.sweepFiles)

	unary := []grpc.UnaryServerInterceptor{d.host.UnaryInterceptor()}
	stream := []grpc.StreamServerInterceptor{d.host.StreamInterceptor()}
	if cfg.InstanceAgnostic {
		unary = append(unary, agnosticUnary(DevAgnosticInstance))
		stream = append(stream, agnosticStream(DevAgnosticInstance))
	}
	// After the instance mapping: the guard checks the names the services see.
	guard, err := newGuard(cfg.Auth, catalog, adminOpts.Instance, nil, false, d.log, reg)
	if err != nil {
		return nil, err
	}
	if guard != nil {
		unary = append(unary, guard.UnaryInterceptor())
		stream = append(stream, guard.StreamInterceptor())
	}
	d.grpc = newGRPCServer(unary, stream, tlsconfig.ServerOptions(cfg.TLS.Server)...)
	bigtablepb.RegisterBigtableServer(d.grpc, authview.Wrap(tabletserver.NewDataService(d.host, tabletserver.DataOptions{Logger: d.log}),
		authview.Options{Catalog: catalog, Instance: adminOpts.Instance}))
	scriptpb.RegisterScriptsServer(d.grpc, tabletserver.NewScriptService(d.host, tabletserver.ScriptOptions{Logger: d.log}))
	admin.Register(d.grpc)
	if cfg.RegisterServices != nil {
		cfg.RegisterServices(d.grpc)
	}
	// The standard health service (for load balancers and Kubernetes
	// probes) and reflection (for grpcurl and friends).
	d.health = health.NewServer()
	healthpb.RegisterHealthServer(d.grpc, d.health)
	reflection.Register(d.grpc)

	if d.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "" {
		if d.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, err
		}
		d.http = &http.Server{Handler: d.httpHandler(reg), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := d.http.Serve(opsListener(d.httpLis, cfg.TLS)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.serveErr <- fmt.Errorf("dev: http: %w", err)
			}
		}()
	}
	go func() {
		if err := d.grpc.Serve(d.lis); err != nil {
			d.serveErr <- fmt.Errorf("dev: grpc: %w", err)
		}
	}()
	tlsconfig.WarnPlaintext(d.log, "dev", d.Addr(), cfg.TLS.Server)
	d.serving.Store(true)
	d.log.Info("serving", "addr", d.Addr(), "http", d.HTTPAddr(), "dir", cfg.Dir)
	return d, nil
}

// Addr returns the gRPC address the server listens on.
func (d *Dev) Addr() string { return d.lis.Addr().String() }

// HTTPAddr returns the HTTP address, "" without --http.
func (d *Dev) HTTPAddr() string {
	if d.httpLis == nil {
		return ""
	}
	return d.httpLis.Addr().String()
}

// Err returns a channel that receives an error if serving fails.
func (d *Dev) Err() <-chan error { return d.serveErr }

func (d *Dev) httpHandler(reg *prometheus.Registry) http.Handler {
	return OpsHandler(reg, nil, func() error {
		if !d.serving.Load() {
			return errors.New("stopping")
		}
		return nil
	})
}

// Close stops the server: it stops accepting requests, waits up to
// StopTimeout for those in flight, then closes the tablets (they flush
// their memtables, so the next start replays little) and the commit log.
// It is safe to call more than once.
func (d *Dev) Close() error {
	d.closeOnce.Do(func() {
		d.serving.Store(false)
		d.health.Shutdown() // NOT_SERVING, so that balancers move away first
		d.log.Info("stopping")
		done := make(chan struct{})
		go func() {
			d.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(d.cfg.StopTimeout):
			d.log.Warn("graceful stop timed out; cutting requests", "timeout", d.cfg.StopTimeout.String())
			d.grpc.Stop()
			<-done
		}
		var errs []error
		if d.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			errs = append(errs, d.http.Shutdown(ctx))
			cancel()
		}
		d.stopBackgroundWork()
		errs = append(errs, d.host.Close(), d.commit.Close(), d.kv.Close())
		if d.lock != nil {
			errs = append(errs, d.lock.Close())
		}
		d.closeErr = errors.Join(errs...)
		d.log.Info("stopped", "err", d.closeErr)
	})
	return d.closeErr
}

// neverInterval is a ticker period that never comes (about 146 years).
const neverInterval = time.Duration(1 << 62)

// every runs fn every interval in a goroutine until stopBackgroundWork; fn's
// context is cancelled then.
func (d *Dev) every(interval time.Duration, fn func(context.Context)) {
	d.background.Add(1)
	go func() {
		defer d.background.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-d.stopBackground
			cancel()
		}()
		for {
			select {
			case <-d.stopBackground:
				return
			case <-tick.C:
				fn(ctx)
			}
		}
	}()
}

// stopBackgroundWork stops the periodic work and waits for it, so that the
// log is not truncated, nor files swept, while the server closes.
func (d *Dev) stopBackgroundWork() {
	d.stopBackgroundOnce.Do(func() {
		close(d.stopBackground)
		d.background.Wait()
	})
}

// truncateLog truncates the commit log to the oldest redo point of the open
// tablets. It runs only after recovery has opened every table; tables
// created later start at the log's end, so they need nothing older.
func (d *Dev) truncateLog(ctx context.Context) {
	if err := d.host.TruncateLog(ctx); err != nil && ctx.Err() == nil {
		d.log.Error("commit log truncation failed", "err", err)
	}
}

// sweepFiles deletes the SSTables no tablet references any more (inputs of
// finished compactions) with the cluster's policy (master.SweepFiles): the
// states of every tablet the host serves are read first, then the store is
// listed.
func (d *Dev) sweepFiles(ctx context.Context) {
	referenced, err := d.liveFiles(ctx)
	if err == nil {
		var deleted []string
		deleted, err = master.SweepFiles(ctx, d.store, meta.TableDirPrefix, referenced, d.cfg.SweepGrace, time.Now())
		d.swept.Add(float64(len(deleted)))
		if len(deleted) > 0 {
			d.log.Info("swept unreferenced files", "files", len(deleted))
		}
	}
	if err != nil && ctx.Err() == nil {
		d.log.Warn("sweeping unreferenced files", "err", err)
	}
}

// liveFiles returns the files the tablets the host serves reference, with
// their split descendants.
func (d *Dev) liveFiles(ctx context.Context) ([]assign.TabletFiles, error) {
	var ids []string
	for _, table := range d.host.Tables() {
		for _, ti := range d.host.TableTablets(table) {
			ids = append(ids, ti.ID)
		}
	}
	return master.ReferencedFiles(ctx, d.states, ids)
}

// abort releases what a failed StartDev acquired.
func (d *Dev) abort() {
	if d.grpc != nil {
		d.grpc.Stop()
	}
	if d.lis != nil {
		d.lis.Close()
	}
	if d.httpLis != nil {
		d.httpLis.Close()
	}
	d.stopBackgroundWork()
	if d.host != nil {
		_ = d.host.Close()
	}
	if d.commit != nil {
		_ = d.commit.Close()
	}
	if d.kv != nil {
		_ = d.kv.Close()
	}
	if d.lock != nil {
		d.lock.Close()
	}
}

// lockDir takes an exclusive lock on dir/LOCK, so that two servers never
// write one directory. The kernel drops the lock when the process dies, so
// a restart after kill -9 gets it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("dev: %s is in use by another server (%w)", dir, err)
	}
	return f, nil
}

// --- instance-agnostic names ---

// withInstance rewrites projects/P/instances/I/tables/T... to instance.
func withInstance(name, instance string) string {
	p := strings.SplitN(name, "/", 5)
	if len(p) < 4 || p[0] != "projects" || p[2] != "instances" {
		return name // malformed: the service reports it
	}
	p[3] = instance
	return strings.Join(p, "/")
}

// rewriteTableName maps the table_name field of a data API request to the
// one instance. The admin API maps instances itself (master.Options).
func rewriteTableName(m any, instance string) {
	pm, ok := m.(proto.Message)
	if !ok {
		return
	}
	r := pm.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("table_name")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return
	}
	if name := r.Get(fd).String(); name != "" {
		r.Set(fd, protoreflect.ValueOfString(withInstance(name, instance)))
	}
}

// rewritesTableName reports whether requests of method carry a table_name
// the --instance-agnostic mode rewrites: the data API and the scripts
// service (the admin API maps instances itself).
func rewritesTableName(method string) bool {
	return strings.HasPrefix(method, "/google.bigtable.v2.Bigtable/") || strings.HasPrefix(method, "/tabula.scripts.v1.Scripts/")
}

func agnosticUnary(instance string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if rewritesTableName(info.FullMethod) {
			rewriteTableName(req, instance)
		}
		return handler(ctx, req)
	}
}

func agnosticStream(instance string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if rewritesTableName(info.FullMethod) {
			ss = &agnosticServerStream{ServerStream: ss, instance: instance}
		}
		return handler(srv, ss)
	}
}

type agnosticServerStream struct {
	grpc.ServerStream
	instance string
}

func (s *agnosticServerStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rewriteTableName(m, s.instance)
	return nil
}

// newGRPCServer returns the gRPC server of a tablet server role (the
// cluster's and `tabula dev`'s): messages up to the request limit, the
// interceptors given (the Host's first), and more options.
func newGRPCServer(unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(tabletserver.MaxRequestBytes),
		grpc.MaxSendMsgSize(tabletserver.MaxRequestBytes),
		tabletserver.ServerCodec(), // ReadRows responses encoded without copying values
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		// Handle requests on long-lived workers rather than a goroutine
		// each: a fresh goroutine grows its stack for every write, which
		// cost a tenth of the server's CPU on single-row writes.
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
	}, opts...)...)
}
