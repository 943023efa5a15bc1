package cluster

import (
	"bytes"
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
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabuladb/tabula/internal/bufpool"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/authview"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/gateway"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Defaults of DevConfig (the cache sizes are the tablet server's too: see
// ServerConfig).
const (
	// MinBlockCacheBytes and MaxBlockCacheBytes bound the default size
	// of a server's SSTable block cache (DefaultBlockCacheBytes).
	MinBlockCacheBytes = 256 << 20
	MaxBlockCacheBytes = 4 << 30
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
	// them: DevCoordFile) and Dir/logs (each run's commit log, in
	// LocalLogDir(Dir, its server's name)). A Dir written by an older dev,
	// with the catalog in Dir/store/catalog and one log in Dir/log, is
	// moved to this layout at start. Required.
	Dir string
	// Addr is the gRPC listen address (port 0 picks one: see Addr()).
	Addr string
	// HTTPAddr, when set, serves /metrics, /debug/pprof/ and /healthz.
	HTTPAddr string
	// MemtableBytes and SplitBytes are the tablets' minor compaction and
	// split thresholds (the engine's defaults when zero).
	MemtableBytes int64
	SplitBytes    int64
	// MemtableBudget is ServerConfig.MemtableBudget.
	MemtableBudget int64
	// MajorInterval is ServerConfig.MajorInterval.
	MajorInterval time.Duration
	// IdleMergeAfter is ServerConfig.IdleMergeAfter: zero, never (the
	// tests' default); tabula dev's flag sets DefaultIdleMergeAfter.
	IdleMergeAfter time.Duration
	// CompactionRate is ServerConfig.CompactionRate.
	CompactionRate int64
	// BlockCacheBytes and ScanCacheBytes size the caches shared by all
	// tablets; default 256 MiB and 64 MiB, negative disables.
	BlockCacheBytes int64
	ScanCacheBytes  int64
	// Limits validate writes; zero means cell.DefaultLimits().
	Limits cell.Limits
	// InstanceAgnostic maps every instance to one, so that clients
	// configured with any project and instance see the same tables.
	InstanceAgnostic bool
	// ClassicOnly keeps clients on the classic data API: the server's
	// GetClientConfiguration does not send them to sessions
	// (storage/datasession), which otherwise carry the official clients'
	// single-row reads and writes.
	ClassicOnly bool
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

	// orphanAfter, when set (by tests), is the master loop's
	// LoopOptions.OrphanAfter.
	orphanAfter time.Duration
	// beforeLoad and afterLoad, when set (by tests), run before the tablet
	// server loads each tablet of a table other than METADATA, and after it
	// has loaded one, before it answers the master (which records the
	// location only then): slow loads and slow records, on demand.
	beforeLoad, afterLoad func(table meta.TableID, tabletID string)
}

// Dev is the whole of Tabula in one process: the cluster's two roles — a
// master (StartMaster) and one tablet server (StartTabletServer) — over
// the in-process lock service kept in a file (coord.OpenLocal), the local
// directory as the object store (blob.Local) and commit logs as files
// (ServerConfig.LogDir), with every service of both roles on one gRPC
// server and one listener, and metrics, pprof and a health check over HTTP.
type Dev struct {
	cfg      DevConfig
	log      *slog.Logger
	lock     *os.File
	kv       *coord.Local
	store    blob.Store
	states   tablet.StateStore
	swept    prometheus.Counter // the master's count of swept files
	master   *Master
	server   *TabletServer
	host     *tabletserver.Host // the tablet server's
	conn     *grpc.ClientConn   // the roles' in-memory connection (inProcess)
	inner    *grpc.Server       // serves conn
	innerLis *bufconn.Listener
	grpc     *grpc.Server
	lis      net.Listener
	http     *http.Server
	httpLis  net.Listener
	serving  atomic.Bool
	health   *health.Server
	// serveErr has room for one error from each of its four senders
	// (the in-process and the client gRPC servers, HTTP, the tablet
	// server), so that none blocks when nobody reads Err.
	serveErr chan error

	closeOnce sync.Once
	closeErr  error
}

// inProcess is what StartDev gives the roles it runs in one process
// (MasterConfig.inProc, ServerConfig.inProc): they take their address
// from its listener, leave serving to StartDev (which registers their
// services on its gRPC server), share its metrics registry, and reach each
// other — the master the tablet server's TabletControl, the server the
// master's ServerReports, both METADATA — over conn, an in-memory
// connection to a second gRPC server with the same services and no
// authentication: the roles have no credentials of their own, and calls
// between them never leave the process.
type inProcess struct {
	lis      net.Listener
	conn     *grpc.ClientConn
	registry *prometheus.Registry
	// instance, when set, makes the admin API instance-agnostic
	// (master.Options.Instance).
	instance string
	// tableHost, when set, returns the admin API's TableHost over the
	// master's (clusterTableHost).
	tableHost func(*Master) master.TableHost
	// metadataReadTimeout bounds the master loop's read of METADATA in a
	// round (boundedMetadata).
	metadataReadTimeout time.Duration
	// liveFiles are the files every tablet references
	// (master.Options.LiveFiles): the admin API deletes a dropped table's
	// files at once in one process, but for those.
	liveFiles func(context.Context) ([]assign.TabletFiles, error)
	// beforeLoad and afterLoad are DevConfig's.
	beforeLoad, afterLoad func(table meta.TableID, tabletID string)
	// orphanAfter is DevConfig's.
	orphanAfter time.Duration
}

func (in *inProcess) addr() string { return in.lis.Addr().String() }

// Timing of dev's roles. Their sessions never lapse (coord.Local renews
// them without I/O), so what remains is how long a restart waits for the
// locks its previous run held: nothing — the one process that held them
// is gone, which the directory's LOCK file guarantees.
const (
	devLockDelay = -1 // none (coord: a negative lock-delay is none)
	// devServerTTL is how long the master waits before it takes the key of
	// a server it finds released at start (MasterConfig.ServerTTL): the
	// previous run's, whose process is gone.
	devServerTTL = time.Millisecond
	// devMetadataReadTimeout bounds a round's read of METADATA: in one
	// process it takes milliseconds, but at a restart the previous run's
	// address answers nothing and each round that reads a tablet still
	// located there waits this long (boundedMetadata).
	devMetadataReadTimeout = 300 * time.Millisecond
	// devWaitPoll is how often StartDev and CreateTable look whether the
	// master has assigned the tablets they wait for.
	devWaitPoll = 2 * time.Millisecond
	// devAssignTimeout bounds that wait.
	devAssignTimeout = time.Minute
)

// StartDev assembles and starts a dev server on cfg.Dir: it starts the
// master and the tablet server and returns once the master has assigned
// every tablet of every table of the catalog to the server, which has
// loaded it (replaying the commit log of the previous run, if it did not
// stop cleanly), so that once Addr answers, every acknowledged write is
// readable. A Dir written by an older dev (its catalog in the store, its
// commit log in Dir/log) is moved to this layout first (openDevCoord,
// flushLegacyLog). Close stops it.
func StartDev(ctx context.Context, cfg DevConfig) (_ *Dev, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("dev: --dir is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.BlockCacheBytes == 0 {
		cfg.BlockCacheBytes = DefaultBlockCacheBytes()
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
	d := &Dev{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 4)}
	defer func() {
		if err != nil {
			d.abort()
		}
	}()
	start := time.Now()

	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if d.lock, err = lockDir(cfg.Dir); err != nil {
		return nil, err
	}
	if d.store, err = blob.NewLocal(filepath.Join(cfg.Dir, "store")); err != nil {
		return nil, err
	}
	d.states = tablet.NewBlobStateStore(d.store, StatePrefix)
	if d.kv, err = openDevCoord(ctx, cfg.Dir, d.store, d.log); err != nil {
		return nil, err
	}
	catalog := NewCoordCatalog(d.kv)
	if err := flushLegacyLog(ctx, cfg.Dir, d.store, d.states, catalog, d.log); err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if d.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	d.innerLis = bufconn.Listen(1 << 20)
	// Named as the listener (its Target is the address the roles' names
	// carry), so that their clients take it for the server's own
	// connection rather than dialing the port.
	if d.conn, err = grpc.NewClient(d.lis.Addr().String(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return d.innerLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize), grpc.MaxCallSendMsgSize(client.MaxMessageSize))); err != nil {
		return nil, err
	}
	in := &inProcess{lis: d.lis, conn: d.conn, registry: reg, metadataReadTimeout: devMetadataReadTimeout, liveFiles: d.liveFiles, beforeLoad: cfg.beforeLoad, afterLoad: cfg.afterLoad,
		orphanAfter: cfg.orphanAfter,
		tableHost:   func(m *Master) master.TableHost { return &devTableHost{d: d, cluster: m.tableHost} }}
	if cfg.InstanceAgnostic {
		in.instance = DevAgnosticInstance
	}
	if d.master, err = StartMaster(ctx, MasterConfig{
		Coord: d.kv, Store: d.store, Cluster: "dev", SplitBytes: cfg.SplitBytes,
		LockDelay: devLockDelay, ServerTTL: devServerTTL, LogDir: cfg.Dir,
		GCInterval: cfg.SweepInterval, GCGrace: cfg.SweepGrace, UndeleteRetention: cfg.UndeleteRetention,
		Logger: d.log, TLS: cfg.TLS, Limits: cfg.Limits, inProc: in,
	}); err != nil {
		return nil, err
	}
	d.swept = d.master.gcDeleted
	if d.server, err = StartTabletServer(ctx, ServerConfig{
		Coord: d.kv, Store: d.store, LogDir: cfg.Dir, Cluster: "dev",
		MemtableBytes: cfg.MemtableBytes, MemtableBudget: cfg.MemtableBudget, SplitBytes: cfg.SplitBytes, CompactionRate: cfg.CompactionRate, MajorInterval: cfg.MajorInterval, IdleMergeAfter: cfg.IdleMergeAfter,
		FileCommitWindow: cfg.SweepGrace / 2, // a file slower to commit could be swept
		BlockCacheBytes:  cfg.BlockCacheBytes, ScanCacheBytes: cfg.ScanCacheBytes,
		LockDelay: devLockDelay, Logger: d.log, TLS: cfg.TLS,
		Limits: cfg.Limits, LogTruncateInterval: cfg.LogTruncateInterval, inProc: in,
	}); err != nil {
		return nil, err
	}
	d.host = d.server.host

	// The roles' own server, on the in-memory connection: every service,
	// no authentication (nothing outside the process reaches it).
	d.inner = newGRPCServer(nil, nil)
	d.server.register(d.inner, d.server.data)
	d.master.register(d.inner)
	healthpb.RegisterHealthServer(d.inner, health.NewServer())
	go func() {
		if err := d.inner.Serve(d.innerLis); err != nil {
			d.serveErr <- fmt.Errorf("dev: in-process grpc: %w", err)
		}
	}()

	// The one server clients reach: both roles' services behind the
	// instance mapping and the guard.
	unary := []grpc.UnaryServerInterceptor{d.host.UnaryInterceptor()}
	stream := []grpc.StreamServerInterceptor{d.host.StreamInterceptor()}
	if cfg.InstanceAgnostic {
		unary = append(unary, agnosticUnary(DevAgnosticInstance))
		stream = append(stream, agnosticStream(DevAgnosticInstance))
	}
	// After the instance mapping: the guard checks the names the services see.
	guard, err := newGuard(cfg.Auth, catalog, in.instance, nil, false, d.master.admin, d.log, reg)
	if err != nil {
		return nil, err
	}
	if guard != nil {
		unary = append(unary, guard.UnaryInterceptor())
		stream = append(stream, guard.StreamInterceptor())
	}
	unary = append(unary, notServingUnary, missingTableUnary(catalog, in.instance))
	stream = append(stream, notServingStream, missingTableStream(catalog, in.instance))
	d.grpc = newGRPCServer(unary, stream, tlsconfig.ServerOptions(cfg.TLS.Server)...)
	data := authview.Wrap(d.server.data, authview.Options{Catalog: catalog, Instance: in.instance})
	d.server.register(d.grpc, withSessions(data, sessionLoad(cfg.ClassicOnly), unary, stream, d.server.stopping, reg))
	d.master.register(d.grpc)
	if cfg.RegisterServices != nil {
		cfg.RegisterServices(d.grpc)
	}
	// The standard health service (for load balancers and Kubernetes
	// probes) and reflection (for grpcurl and friends).
	d.health = health.NewServer()
	healthpb.RegisterHealthServer(d.grpc, d.health)
	reflection.Register(d.grpc)

	// The master campaigns (at once: no lock-delay), assigns the root and
	// METADATA tablets, then the tables'; only once the server has loaded
	// every tablet does the port serve.
	d.master.run()
	if err := d.adoptLegacyTables(ctx, catalog); err != nil {
		return nil, err
	}
	if err := d.waitAllServed(ctx, catalog); err != nil {
		return nil, err
	}
	d.log.Info("recovered", "dir", cfg.Dir, "took", time.Since(start).String())

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
	go func() {
		// The tablet server stops by itself only when it must not serve
		// any more (its commit log failed): so does dev.
		<-d.server.Done()
		if err := d.server.Err(); err != nil {
			d.serveErr <- fmt.Errorf("dev: tablet server: %w", err)
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
// StopTimeout for those in flight, then stops the master and closes the
// tablet server, whose tablets are unloaded (they flush their memtables,
// so the next start replays little). It is safe to call more than once.
func (d *Dev) Close() error {
	d.closeOnce.Do(func() {
		d.serving.Store(false)
		d.health.Shutdown()      // NOT_SERVING, so that balancers move away first
		d.server.beginStopping() // sessions end, which GracefulStop would wait for
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
		// The master first, so that it does not reassign the tablets the
		// server unloads.
		d.master.Close()
		errs = append(errs, d.server.Close())
		d.inner.Stop()
		errs = append(errs, d.conn.Close(), d.kv.Close())
		if d.lock != nil {
			errs = append(errs, d.lock.Close())
		}
		d.closeErr = errors.Join(errs...)
		d.log.Info("stopped", "err", d.closeErr)
	})
	return d.closeErr
}

// waitAllServed waits until the tablet server serves every tablet of
// METADATA and of every table of the catalog.
func (d *Dev) waitAllServed(ctx context.Context, catalog meta.Catalog) error {
	tables, err := catalog.List(ctx, "")
	if err != nil {
		return fmt.Errorf("dev: listing the catalog: %w", err)
	}
	ids := []meta.TableID{meta.MetadataTable}
	for _, t := range tables {
		ids = append(ids, t.ID)
	}
	for _, id := range ids {
		if err := d.waitServed(ctx, id); err != nil {
			return err
		}
	}
	// The master records each load in METADATA after it: wait for that
	// too, so that METADATA names this server for every table's tablet.
	for _, t := range tables {
		if err := d.waitRecorded(ctx, t.ID); err != nil {
			return err
		}
	}
	return nil
}

// waitRecorded waits until every METADATA row of table id locates its
// tablet at the tablet server.
func (d *Dev) waitRecorded(ctx context.Context, id meta.TableID) error {
	ctx, cancel := context.WithTimeout(ctx, devAssignTimeout)
	defer cancel()
	for {
		rows, err := d.master.md.tableRows(ctx, id)
		recorded := err == nil && len(rows) > 0
		for _, l := range rows {
			recorded = recorded && l.Server == d.server.Name()
		}
		if recorded {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "dev: the tablets of %s were not all recorded in METADATA within %v (%v): %v", id, devAssignTimeout, err, ctx.Err())
		case <-d.server.Done():
			return fmt.Errorf("dev: the tablet server stopped: %w", d.server.Err())
		case <-time.After(devWaitPoll):
		}
	}
}

// waitServed waits until the tablet server serves tablets of table id
// covering all its rows: the master has assigned them (it is poked to do
// so at once) and the server has loaded them.
func (d *Dev) waitServed(ctx context.Context, id meta.TableID) error {
	ctx, cancel := context.WithTimeout(ctx, devAssignTimeout)
	defer cancel()
	lastPoke := time.Now()
	for !coversTable(d.host.TableTablets(id)) {
		if time.Since(lastPoke) > 100*devWaitPoll {
			d.master.loop.Poke()
			lastPoke = time.Now()
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.Unavailable, "dev: the tablets of %s were not all assigned within %v: %v", id, devAssignTimeout, ctx.Err())
		case <-d.server.Done():
			return fmt.Errorf("dev: the tablet server stopped: %w", d.server.Err())
		case <-time.After(devWaitPoll):
		}
	}
	return nil
}

// coversTable reports whether tablets, in key order, cover every row
// (from "" to the unbounded end, without gaps).
func coversTable(tablets []tabletserver.TabletInfo) bool {
	if len(tablets) == 0 || len(tablets[0].Start) != 0 {
		return false
	}
	for i := 1; i < len(tablets); i++ {
		if !bytes.Equal(tablets[i-1].End, tablets[i].Start) {
			return false
		}
	}
	return len(tablets[len(tablets)-1].End) == 0
}

// devTableHost is dev's TableHost: the cluster's (a new table's tablets
// become METADATA rows, a dropped table loses them and is unloaded,
// schema changes go to the server), whose WaitServing (which the admin
// API's CreateTable, RestoreTable and UndeleteTable call) also waits for
// the one server to serve every tablet; rows are dropped by the one Host
// that serves every tablet.
type devTableHost struct {
	d       *Dev
	cluster *clusterTableHost
}

func (h *devTableHost) OpenTable(ctx context.Context, t meta.Table) error {
	return h.cluster.OpenTable(ctx, t)
}

// WaitServing waits until the server serves every tablet of t and
// METADATA records it there (master.ServingWaiter), so that a table is
// ready for reads and writes, through any client, once CreateTable (or a
// restore) returns.
func (h *devTableHost) WaitServing(ctx context.Context, t meta.Table) error {
	h.d.master.loop.Poke()
	if err := h.d.waitServed(ctx, t.ID); err != nil {
		return err
	}
	return h.cluster.WaitServing(ctx, t)
}

var _ master.ServingWaiter = (*devTableHost)(nil)

func (h *devTableHost) DropTable(ctx context.Context, t meta.Table) error {
	err := h.cluster.DropTable(ctx, t)
	// A round now, so that the master's picture of what the server
	// serves (which the sweep keeps files for) drops the table's tablets
	// without waiting for the next tick.
	h.d.master.loop.Poke()
	return err
}

func (h *devTableHost) UpdateSchema(ctx context.Context, t meta.Table) error {
	return h.cluster.UpdateSchema(ctx, t)
}

func (h *devTableHost) DropRowRange(ctx context.Context, t meta.Table, prefix []byte) error {
	return h.d.host.DropRowRange(ctx, t, prefix)
}

// FlushTableStates flushes the table on the one Host that serves every
// tablet, for a backup (master.BackupHost).
func (h *devTableHost) FlushTableStates(ctx context.Context, t meta.Table) ([]tabletdesc.State, error) {
	return h.d.host.FlushTableStates(ctx, t)
}

var _ master.BackupHost = (*devTableHost)(nil)

// liveFiles returns the files the tablets the host serves reference, with
// their split descendants: in dev, every tablet's (master.Options.LiveFiles:
// restored tables reference files in other tables' directories).
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
	if d.master != nil {
		d.master.Close()
	}
	if d.server != nil {
		d.server.stop(errors.New("dev: start failed"))
	}
	if d.inner != nil {
		d.inner.Stop()
	}
	if d.conn != nil {
		_ = d.conn.Close()
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
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("dev: %s is in use by another server (%w)", dir, err)
	}
	return f, nil
}

// notServingUnary and notServingStream answer the data API's clients of
// tabula dev as a cluster's gateway answers its callers: a tablet not
// served for a moment (its merge or move under way) is UNAVAILABLE,
// which the official clients retry, not the FAILED_PRECONDITION they
// take as final (gateway.NotServingAsUnavailable; Tabula's own client
// keys on the detail, kept). Dev serves the data API without the gateway
// (every tablet is local), so it converts here, outside the NOT_FOUND of
// a missing table (missingTableUnary), which stays; a MutateRows entry's
// status too (notServingEntries).
func notServingUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil && isDataAPI(info.FullMethod) && !locatesItself(ctx) {
		err = gateway.NotServingAsUnavailable(err)
	}
	return resp, err
}

func notServingStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !isDataAPI(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	if info.FullMethod == "/google.bigtable.v2.Bigtable/MutateRows" && !locatesItself(ctx) {
		ss = notServingEntries{ss}
	}
	err := handler(srv, ss)
	if err != nil && !locatesItself(ctx) {
		err = gateway.NotServingAsUnavailable(err)
	}
	return err
}

// notServingEntries converts the "not serving" statuses of the entries of
// the MutateRows responses sent through it, as the gateway does for its
// callers: the official client retries an entry answered UNAVAILABLE and
// gives up on one answered FAILED_PRECONDITION.
type notServingEntries struct{ grpc.ServerStream }

func (s notServingEntries) SendMsg(m any) error {
	if r, ok := m.(*bigtablepb.MutateRowsResponse); ok {
		for _, e := range r.GetEntries() {
			// Only failed entries are replaced (the OK status is shared).
			if st := e.GetStatus(); st.GetCode() == int32(codes.FailedPrecondition) {
				e.Status = status.Convert(gateway.NotServingAsUnavailable(status.FromProto(st).Err())).Proto()
			}
		}
	}
	return s.ServerStream.SendMsg(m)
}

// isDataAPI reports whether method is one of google.bigtable.v2.Bigtable,
// the service the official clients call.
func isDataAPI(method string) bool { return strings.HasPrefix(method, "/google.bigtable.v2.Bigtable/") }

// locatesItself reports whether the caller is Tabula's own client (its
// user agent, client.UserAgent), which takes "not serving" as "not
// applied, look again": converted, a write of it would become one of
// unknown outcome.
func locatesItself(ctx context.Context) bool {
	for _, ua := range metadata.ValueFromIncomingContext(ctx, "user-agent") {
		if ua == client.UserAgent || strings.HasPrefix(ua, client.UserAgent+" ") {
			return true
		}
	}
	return false
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

// --- tables that do not exist ---

// The tablet server's Host answers "not serving" for a table it serves no
// tablet of: in a cluster the table may be elsewhere, and the caller must
// look it up again. Dev's one server serves every tablet, so there it means
// the table does not exist — if the catalog says so, the caller gets
// NOT_FOUND, as from the emulator.

// tableNameOf returns the table_name field of a request message, "" if it
// has none.
func tableNameOf(m any) string {
	pm, ok := m.(proto.Message)
	if !ok {
		return ""
	}
	r := pm.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("table_name")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return r.Get(fd).String()
}

// notFoundIfMissing turns err, a "not serving" answer to a request for
// table name, into NOT_FOUND when the catalog has no such table or its
// entry is Restoring.
func notFoundIfMissing(ctx context.Context, catalog meta.Catalog, instance, name string, err error) error {
	if name == "" || !tabletpb.IsNotServing(err) {
		return err
	}
	id, perr := meta.ParseTableName(name)
	if perr != nil {
		return err
	}
	if instance != "" {
		id.Instance = instance
	}
	if t, gerr := catalog.Get(ctx, id); errors.Is(gerr, meta.ErrTableNotFound) || (gerr == nil && t.Restoring) {
		// A table being restored exists once its operation is done.
		return status.Errorf(codes.NotFound, "table %q not found", name)
	}
	return err
}

func missingTableUnary(catalog meta.Catalog, instance string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil && rewritesTableName(info.FullMethod) {
			err = notFoundIfMissing(ctx, catalog, instance, tableNameOf(req), err)
		}
		return resp, err
	}
}

func missingTableStream(catalog meta.Catalog, instance string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !rewritesTableName(info.FullMethod) {
			return handler(srv, ss)
		}
		ts := &tableNameStream{ServerStream: ss}
		err := handler(srv, ts)
		if err != nil {
			err = notFoundIfMissing(ss.Context(), catalog, instance, ts.name, err)
		}
		return err
	}
}

// tableNameStream remembers the table_name of the first request received.
type tableNameStream struct {
	grpc.ServerStream
	name string
}

func (s *tableNameStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.name == "" {
		// Written only when found: a session's messages name no table,
		// and its stream is read by a goroutine of its own, which may
		// still be receiving when the handler returns and this
		// interceptor reads name (storage/datasession).
		if name := tableNameOf(m); name != "" {
			s.name = name
		}
	}
	return nil
}

// streamWorkers is how many requests a server handles on long-lived
// goroutines at once (grpc.NumStreamWorkers); more run on fresh goroutines.
// With 4 per core, 32 concurrent point reads on 2 cores ran three quarters
// of their calls on fresh goroutines, and growing their stacks
// (runtime.newstack) took a tenth of the server's CPU (BENCHMARKS.md, "The
// point-read path"). Idle workers cost a small stack each.
const streamWorkers = 256

// newGRPCServer returns the gRPC server of a tablet server role (the
// cluster's and `tabula dev`'s): messages up to the request limit, the
// interceptors given (the Host's first), and more options.
func newGRPCServer(unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(tabletserver.MaxRequestBytes),
		grpc.MaxSendMsgSize(tabletserver.MaxRequestBytes),
		tabletserver.ServerCodec(), // ReadRows responses encoded without copying values
		// Scans send megabytes: with gRPC's 32 KiB write buffer a 1 MiB
		// response left in 32 write(2)s (an export's CPU fell 2–3%
		// with one; BENCHMARKS.md). Shared: the buffer goes back to a
		// pool after each flush, so an idle connection holds none.
		grpc.WriteBufferSize(1 << 20), grpc.SharedWriteBuffer(true),
		// Received frames read into buffers that are not cleared
		// first (gRPC's default pool clears each: as many bytes as
		// bulk writes send).
		experimental.BufferPool(bufpool.Frames),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		// Handle requests on long-lived workers rather than a goroutine
		// each: a fresh goroutine grows its stack for every request, which
		// cost a tenth of the server's CPU on single-row writes and point
		// reads. gRPC falls back to a fresh goroutine when every worker is
		// busy, so there must be as many as requests in flight.
		grpc.NumStreamWorkers(uint32(max(streamWorkers, 4*runtime.GOMAXPROCS(0)))),
	}, opts...)...)
}
