package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/advertise"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/authview"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/gateway"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// logOptions describes the commit log of server (this one or a dead one):
// files under LocalLogDir with ServerConfig.LogDir, else objects in the
// store under LogPrefix.
func (s *TabletServer) logOptions(server string) commitlog.Options {
	if s.cfg.LogDir != "" {
		return commitlog.Options{Dir: LocalLogDir(s.cfg.LogDir, server)}
	}
	// Two PUTs in flight: single-row writers' group commits ran 1.43×
	// (1.09–2.11) against one at a time into MinIO on two shared cores,
	// 100-row writers within the noise (BENCHMARKS.md, the commit log in
	// the object store).
	return commitlog.Options{Store: s.cfg.Store, Prefix: LogPrefix(server), FlushConcurrency: 2}
}

// Defaults of the roles' session settings: Consul's minimum TTL, and a
// lock-delay long enough for a cut-off holder to notice its lapse (it
// lapses one TTL after its last renewal, Consul expires it after two) yet
// short enough to keep failover well under 30 s.
const (
	DefaultSessionTTL = 10 * time.Second
	DefaultLockDelay  = 3 * time.Second
)

// ServerConfig configures a tablet server. Coord and Store are required.
type ServerConfig struct {
	// Coord is the lock service, with the cluster's prefix.
	Coord coord.Service
	// Store holds SSTables, tablet states and commit logs.
	Store blob.Store
	// LogDir, when set, keeps the servers' commit logs as files in this
	// directory instead of objects in Store: this server's in
	// LocalLogDir(LogDir, name), a dead server's found there by its name
	// (for the recovery of its tablets). It is for the servers of one
	// machine sharing the directory (`tabula dev`'s commit log has always
	// been local files: one write and fsync per group commit rather than
	// an object PUT); the master collects the logs there when its
	// MasterConfig.LogDir names the same directory. A local log is not
	// sorted (ListLogSegments refuses it): a recovery replays it whole.
	LogDir string
	// ClassicOnly is DevConfig.ClassicOnly: clients stay on the
	// classic data API.
	ClassicOnly bool
	// Addr is the gRPC listen address (host:port; port 0 picks one).
	Addr string
	// AdvertiseAddr is the address the server is known by — its name in
	// Consul and METADATA, what clients and other servers dial and find
	// in its certificate — when not the listener's: host[:port], a
	// missing or 0 port taking the listener's (advertise.Addr). Required
	// when Addr is a wildcard (0.0.0.0, [::]).
	AdvertiseAddr string
	// HTTPAddr, when set, serves /metrics, /debug/pprof/, /healthz and
	// /status.
	HTTPAddr string
	// Cluster names the cluster on the status page.
	Cluster string
	// MemtableBytes and SplitBytes tune the tablets (defaults of
	// tabletserver.HostOptions).
	MemtableBytes, SplitBytes int64
	// MemtableBudget bounds the memtables of all the server's tablets
	// together (tabletserver.HostOptions.MemtableBudget: its default when
	// zero, none when negative).
	MemtableBudget int64
	// MajorInterval is how often each tablet runs a major compaction on
	// its own (tablet.Options.MajorInterval; DefaultMajorInterval when
	// zero, never when negative).
	MajorInterval time.Duration
	// IdleMergeAfter is how long the server must serve nothing before
	// its tablets merge the SSTables that piled up
	// (tabletserver.HostOptions.IdleMergeAfter; never when zero or
	// negative). tabula dev and tabula tabletserver set
	// DefaultIdleMergeAfter unless told otherwise.
	IdleMergeAfter time.Duration
	// CompactionRate is the rate, in bytes per second, at which the
	// tablets' own flushes and merging compactions write while requests
	// are served and nothing presses them (pacing.Config.MinRate; they
	// speed up under pressure and run unpaced when the server is idle).
	// Zero means pacing.DefaultMinRate; negative turns pacing off.
	CompactionRate int64
	// FileCommitWindow: a new SSTable not in a saved state this long after
	// its writing began is written again (tablet.Options.FileCommitWindow);
	// it must stay below the master's GCGrace. Default DefaultGCGrace/2.
	FileCommitWindow time.Duration
	// MetadataSplitBytes is the split size of METADATA's tablets other
	// than the root, which never splits (default
	// tabletserver.DefaultMetadataSplitBytes).
	MetadataSplitBytes int64
	// MetadataLogRelease is how long a METADATA tablet's redo point may
	// stay behind the commit log's tail (tabletserver.HostOptions'
	// MetadataLogRelease; default
	// tabletserver.DefaultMetadataLogRelease, negative: off).
	MetadataLogRelease time.Duration
	// BlockCacheBytes and ScanCacheBytes size the caches shared by the
	// server's tablets; default DefaultBlockCacheBytes() and
	// DefaultScanCacheBytes (as `tabula dev`), negative disables.
	BlockCacheBytes, ScanCacheBytes int64
	// SessionTTL and LockDelay configure the server's session; defaults
	// DefaultSessionTTL and DefaultLockDelay.
	SessionTTL, LockDelay time.Duration
	Logger                *slog.Logger
	// TLS secures the gRPC and HTTP ports (TLS.Server) and the calls to
	// other servers (TLS.Client); the zero value is plaintext.
	TLS tlsconfig.Role
	// Auth, when set, requires credentials and enforces the tables'
	// grants (AuthConfig); nil: everyone may do everything.
	Auth *AuthConfig
	// Limits validate writes; zero means cell.DefaultLimits().
	Limits cell.Limits
	// LogTruncateInterval is how often the commit log is truncated to the
	// oldest redo point of the server's tablets; default
	// tabletserver.DefaultLogTruncateInterval.
	LogTruncateInterval time.Duration
	// Lease is the server's own lease, shorter than the TTL (coord's
	// SessionOptions.Lease, server_lease.go): it stops serving Lease after
	// the start of its last successful renewal, and the master waits only
	// that long (plus a tenth) after ending its session. Default
	// DefaultServerLease; negative: the TTL.
	Lease time.Duration

	// LockDir is a directory of this host, kept across the server's
	// restarts, where it locks a file named after its advertised address
	// for as long as it runs (successionLock). A server restarted on the
	// same address finds there that its predecessor exited, and the
	// master recovers the predecessor's tablets without waiting out its
	// Lease. Empty: no lock, and the master always waits.
	LockDir string

	// inProc, set only by StartDev, runs the server in one process with
	// the master (see inProcess).
	inProc *inProcess
}

// TabletServer is a running tablet server: it holds its key under servers/
// while its session lives, serves the tablets the master gives it, and
// stops by itself (Done) when its lease lapses or its key is gone.
type TabletServer struct {
	cfg   ServerConfig
	name  string
	addr  string
	log   *slog.Logger
	start time.Time

	lis     net.Listener
	httpLis net.Listener
	grpc    *grpc.Server
	http    *http.Server
	sess    coord.Session
	lock    coord.Lock
	// succession is this address's lock on this host (ServerConfig.LockDir;
	// nil without one), released last in shutdown.
	succession *successionLock
	commit     *commitlog.Log
	host       *tabletserver.Host
	data       *tabletserver.DataService
	gateway    *gateway.Gateway
	conns      *conns
	self       *grpc.ClientConn
	cl         *client.Client
	cache      *client.LocationCache
	src        client.MetadataSource
	blocks     *sstable.Cache
	scans      *tablet.ScanCache
	registry   *prometheus.Registry

	stopOnce sync.Once
	done     chan struct{}
	stopping chan struct{} // closed when shutdown begins (beginStopping)
	stopped  sync.Once     // closes stopping
	err      error
}

// beginStopping closes stopping, once: the long-lived streams (point
// reads between servers, clients' sessions) end.
func (s *TabletServer) beginStopping() {
	s.stopped.Do(func() { close(s.stopping) })
}

// StartTabletServer starts a tablet server and returns once it listens and
// holds its key. It runs until Close, or until it stops by itself (Done).
func StartTabletServer(ctx context.Context, cfg ServerConfig) (_ *TabletServer, err error) {
	if cfg.Coord == nil || cfg.Store == nil {
		return nil, errors.New("cluster: ServerConfig needs Coord and Store")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultServerLease
	}
	if cfg.BlockCacheBytes == 0 {
		cfg.BlockCacheBytes = DefaultBlockCacheBytes()
	}
	if cfg.ScanCacheBytes == 0 {
		cfg.ScanCacheBytes = DefaultScanCacheBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	s := &TabletServer{cfg: cfg, start: time.Now(), done: make(chan struct{}), stopping: make(chan struct{}), conns: newConns(cfg.TLS.Client, cfg.Auth.serverDialOptions()...), registry: prometheus.NewRegistry()}
	in := cfg.inProc
	if in != nil {
		s.registry = in.registry
	}
	defer func() {
		if err != nil {
			// Through stopOnce: the gRPC server may already be serving,
			// and its goroutine, once shutdown stops it, calls stop —
			// which must not shut down a second time (closing stopping
			// twice panicked when --http's port turned out taken).
			s.stopOnce.Do(func() {
				s.err = err
				s.shutdown(false)
				close(s.done)
			})
		}
	}()
	if in != nil {
		s.addr = in.addr()
	} else {
		if s.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, err
		}
		if s.addr, err = advertise.Addr(cfg.AdvertiseAddr, s.lis.Addr()); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	s.name = NewServerName(s.addr)
	s.log = cfg.Logger.With("server", s.name)
	record := coord.ServerRecord{Addr: s.addr}
	if cfg.LockDir != "" && in == nil {
		s.succession, record.Succeeds, err = takeSuccessionLock(cfg.LockDir, s.addr, s.name)
		switch {
		case errors.Is(err, errLockHeld):
			// The process that held the address is still alive: the
			// master waits out its lease, as for any unreachable server.
			s.log.Warn("succession lock held by another process: a predecessor at this address is still running", "lock_dir", cfg.LockDir)
			err = nil
		case err != nil:
			return nil, err
		case record.Succeeds != "":
			s.log.Info("succeeding an exited server at this address", "predecessor", record.Succeeds)
		}
	}

	if s.sess, err = cfg.Coord.NewSession(ctx, coord.SessionOptions{Name: "tabletserver " + s.name, TTL: cfg.SessionTTL, LockDelay: cfg.LockDelay, Lease: max(cfg.Lease, 0)}); err != nil {
		return nil, fmt.Errorf("cluster: session: %w", err)
	}
	if s.lock, err = s.sess.TryLock(ctx, coord.ServerKey(s.name), record.Encode()); err != nil {
		return nil, fmt.Errorf("cluster: locking %s: %w", coord.ServerKey(s.name), err)
	}
	if s.commit, err = commitlog.Open(ctx, s.logOptions(s.name)); err != nil {
		return nil, fmt.Errorf("cluster: commit log: %w", err)
	}
	if in != nil {
		s.self = in.conn
		s.conns.alias(s.addr, in.conn)
	} else if s.self, err = grpc.NewClient(s.addr, append([]grpc.DialOption{tlsconfig.DialOption(cfg.TLS.Client),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize), grpc.MaxCallSendMsgSize(client.MaxMessageSize))}, cfg.Auth.serverDialOptions()...)...); err != nil {
		return nil, err
	}
	s.src = coordSource{kv: cfg.Coord, inner: client.NewMetadataSource(s.self, s.conns.get)}
	s.cache = client.NewLocationCache(client.LocationCacheOptions{})
	// Split commits to METADATA fail fast on "not serving", as before
	// (FailFastNotServing): the Host retries a failed commit with its own
	// backoff (HostOptions.OnSplit), and serving never waits for it.
	s.cl = client.New(s.self, client.Options{Metadata: s.src, TLS: cfg.TLS.Client, Token: cfg.Auth.serverToken(), FailFastNotServing: true})

	if in == nil {
		s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		registerLocateMetrics(s.registry, "gateway", s.cache.Stats)
	}
	s.blocks = sstable.NewCache(max(cfg.BlockCacheBytes, 0))
	if cfg.ScanCacheBytes > 0 {
		if s.scans, err = tablet.NewScanCache(cfg.ScanCacheBytes); err != nil {
			return nil, err
		}
	}
	if s.host, err = tabletserver.NewHost(ctx, tabletserver.HostOptions{
		Store:               cfg.Store,
		Log:                 s.commit,
		Cache:               s.blocks,
		ScanCache:           s.scans,
		StateStore:          tablet.NewBlobStateStore(cfg.Store, StatePrefix),
		Limits:              cfg.Limits,
		MemtableBytes:       cfg.MemtableBytes,
		MemtableBudget:      cfg.MemtableBudget,
		MajorInterval:       cfg.MajorInterval,
		IdleMergeAfter:      cfg.IdleMergeAfter,
		Pacer:               newPacer(cfg.CompactionRate),
		FileCommitWindow:    cmp.Or(cfg.FileCommitWindow, DefaultGCGrace/2),
		SplitBytes:          cfg.SplitBytes,
		MetadataSplitBytes:  cfg.MetadataSplitBytes,
		MetadataLogRelease:  cfg.MetadataLogRelease,
		LogTruncateInterval: cfg.LogTruncateInterval,
		Logger:              s.log,
		Registerer:          s.registry,
		Lease:               s.sess,
		Partial:             true,
		OnSplit:             s.commitSplit,
	}); err != nil {
		return nil, err
	}
	// Both servers this data API is registered on use the tablet
	// server's codec (newGRPCServer's, or proxyCodec around it), which
	// sends encoded responses as they are.
	s.data = tabletserver.NewDataService(s.host, tabletserver.DataOptions{Logger: s.log, EncodedResponses: true})
	if in != nil {
		// StartDev serves the services on its one gRPC server, the data
		// API straight from this Host, which serves every tablet there
		// (no gateway: nothing to forward to).
		go s.watchLease()
		s.log.Info("tablet server started", "addr", s.addr, "name", s.name)
		return s, nil
	}
	guard, err := newGuard(cfg.Auth, NewCoordCatalog(cfg.Coord), "", relayedToMaster, false, nil, s.log, s.registry)
	if err != nil {
		return nil, err
	}
	if s.gateway, err = gateway.New(s.data, gateway.Options{
		Self: s.addr, Locator: gateway.ClientLocator{Cache: s.cache, Source: s.src}, Dial: s.conns.get, Registerer: s.registry, Logger: s.log,
		// The shared point-read stream carries one identity: only
		// without authentication.
		PointReads: guard == nil,
	}); err != nil {
		return nil, err
	}
	fenceUnary, fenceStream := leaseFence(s.sess)
	unary, stream := []grpc.UnaryServerInterceptor{fenceUnary, s.host.UnaryInterceptor()}, []grpc.StreamServerInterceptor{fenceStream, s.host.StreamInterceptor()}
	if guard != nil {
		unary, stream = append(unary, guard.UnaryInterceptor()), append(stream, guard.StreamInterceptor())
	}
	s.grpc = newGRPCServer(unary, stream,
		append([]grpc.ServerOption{
			grpc.ForceServerCodecV2(proxyCodec{}),
			// The admin API (and anything else not served here) goes to
			// the active master.
			grpc.UnknownServiceHandler(forwardUnknown(s.masterConn, cfg.Auth.serverToken() != "")),
		}, tlsconfig.ServerOptions(cfg.TLS.Server)...)...,
	)
	data := authview.Wrap(s.gateway, authview.Options{Catalog: NewCoordCatalog(cfg.Coord)})
	s.register(s.grpc, withSessions(data, sessionLoad(cfg.ClassicOnly), unary, stream, s.stopping, s.registry))
	if guard == nil {
		gateway.RegisterPointReads(s.grpc, data.ReadRows, func() error {
			if s.sess.Valid() {
				return nil
			}
			return status.Error(codes.Unavailable, tabletserver.ErrLeaseLapsed.Error()+": this tablet server no longer serves")
		}, s.stopping)
	}
	clusterpb.RegisterLocatorServer(s.grpc, &locatorService{kv: cfg.Coord})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, hs)
	go reportHealth(hs, s.sess.Valid, s.stopping, s.log)
	go func() {
		if err := s.grpc.Serve(s.lis); err != nil {
			s.stop(fmt.Errorf("cluster: serving gRPC: %w", err))
		}
	}()
	if cfg.HTTPAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, err
		}
		s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = s.http.Serve(opsListener(s.httpLis, cfg.TLS)) }()
	}
	tlsconfig.WarnPlaintext(s.log, "tabletserver", s.addr, cfg.TLS.Server)
	go s.watchLease()
	go s.followRoot()
	s.log.Info("tablet server started", "addr", s.addr, "name", s.name)
	return s, nil
}

// healthPoll is how often reportHealth looks at the lease.
const healthPoll = 100 * time.Millisecond

// reportHealth keeps the gRPC health service's overall status ("") in
// step with the server's ability to serve: SERVING while its lease is
// valid, NOT_SERVING while it is not (the lock service unreachable for a
// whole lease: every call is refused until a renewal succeeds) and from
// the moment it begins stopping. Clients that check health — those of
// storage/gateways, round-robin over every tablet server — then send
// their calls to the others meanwhile.
// valid is the lease's Valid, stopping closes when the server begins
// stopping.
func reportHealth(hs *health.Server, valid func() bool, stopping <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	serving := true
	for {
		select {
		case <-stopping:
			hs.Shutdown()
			return
		case <-t.C:
		}
		if ok := valid(); ok != serving {
			serving = ok
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				st = healthpb.HealthCheckResponse_SERVING
			}
			hs.SetServingStatus("", st)
			log.Info("health", "serving", ok)
		}
	}
}

// followRoot keeps the root's location in the server's location caches —
// its client's (split commits, METADATA writes) and its gateway's —
// current until the server stops: it watches the lock service's root key
// and hands each new location to both. A cached location is otherwise
// dropped only once a call to it fails: after a paused root holder's
// death, a split commit here kept going to it until its RPC timed out
// (1.5 s), although the master had recorded the recovered root's new
// server seconds before (session 31).
func (s *TabletServer) followRoot() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopping
		cancel()
	}()
	events, err := s.cfg.Coord.WatchKey(ctx, coord.KeyRoot)
	if err != nil {
		s.log.Warn("not following the root's location (its moves are learned when a call fails)", "err", err)
		return
	}
	for ev := range events {
		if ev.Kind != coord.EventPut {
			continue
		}
		var l meta.Location
		if err := json.Unmarshal(ev.Entry.Value, &l); err != nil || !l.IsRoot() || l.Server == "" {
			continue
		}
		s.cl.CacheLocations(l)
		s.cache.Insert(l)
	}
}

// register registers on srv the tablet server's services: data (the data
// API, as the caller wraps it), the scripts service, TabletControl (the
// master's) and TabletOps.
func (s *TabletServer) register(srv grpc.ServiceRegistrar, data bigtablepb.BigtableServer) {
	bigtablepb.RegisterBigtableServer(srv, data)
	scriptpb.RegisterScriptsServer(srv, tabletserver.NewScriptService(s.host, tabletserver.ScriptOptions{Logger: s.log}))
	clusterpb.RegisterTabletControlServer(srv, newTabletControlService(s))
	clusterpb.RegisterTabletOpsServer(srv, &tabletOpsService{s: s})
}

// Name returns the server's name (its key under servers/).
func (s *TabletServer) Name() string { return s.name }

// Addr returns the gRPC address clients dial.
func (s *TabletServer) Addr() string { return s.addr }

// HTTPAddr returns the HTTP listen address, "" without one.
func (s *TabletServer) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Done is closed when the server stopped: Close, or by itself because its
// lease lapsed or its key is gone; Err then says why.
func (s *TabletServer) Done() <-chan struct{} { return s.done }

// Err returns why the server stopped by itself, nil after Close or while
// it runs.
func (s *TabletServer) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// watchLease stops the server as soon as its lease may have lapsed, its
// commit log failed, or its lock is lost (the master deleted its key): from then on another server
// may serve its tablets, so it must not serve even reads, as the paper's
// tablet server kills itself.
func (s *TabletServer) watchLease() {
	select {
	case <-s.sess.Lapsed():
		// Err says which: no renewal for a whole TTL (ErrSessionLapsed)
		// or the lock service no longer knows the session (ErrSessionGone).
		err := s.sess.Err()
		if err == nil {
			err = coord.ErrSessionLapsed
		}
		s.stop(fmt.Errorf("cluster: lease lapsed: %w", err))
	case <-s.lock.Lost():
		s.stop(errors.New("cluster: lost the server lock (key deleted or taken)"))
	case <-s.commit.Failed():
		// Every write would fail from now on: stop, ending the session,
		// so that the master reassigns the tablets at once and their new
		// servers replay what the log made durable (the paper's tablet
		// server that cannot write its log kills itself).
		s.stop(errors.New("cluster: the commit log failed"))
	case <-s.done:
	}
}

// stop ends the server abruptly because of err.
func (s *TabletServer) stop(err error) {
	s.stopOnce.Do(func() {
		s.err = err
		s.log.Error("tablet server stopping", "err", err)
		s.shutdown(false)
		close(s.done)
	})
}

// Close stops the server cleanly: every tablet is unloaded (compacted, so
// that the next server replays nothing), then the key is released without
// lock-delay, which tells the master at once.
func (s *TabletServer) Close() error {
	s.stopOnce.Do(func() {
		s.shutdown(true)
		close(s.done)
	})
	return nil
}

func (s *TabletServer) shutdown(clean bool) {
	s.beginStopping() // ends the long-lived point-read streams and sessions, which GracefulStop would wait for
	if s.grpc != nil {
		if clean {
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				s.grpc.Stop()
			}
		} else {
			s.grpc.Stop()
		}
	}
	if s.http != nil {
		_ = s.http.Close()
	}
	if s.host != nil {
		if clean {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			for _, t := range s.host.ServedTablets() {
				if err := s.host.UnloadTablet(ctx, t.ID); err != nil {
					s.log.Warn("unload at shutdown", "tablet", t.ID, "err", err)
				}
			}
			cancel()
		}
		_ = s.host.Close()
	}
	if s.commit != nil {
		_ = s.commit.Close()
	}
	if s.sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if clean && s.lock != nil {
			_ = s.lock.Release(ctx)
		}
		_ = s.sess.Destroy(ctx)
		cancel()
	}
	if s.cl != nil {
		_ = s.cl.Close()
	}
	if s.self != nil && s.cfg.inProc == nil {
		_ = s.self.Close()
	}
	s.conns.close()
	if s.lis != nil {
		_ = s.lis.Close()
	}
	// Last: the lock tells a successor at this address that this server
	// serves no more (successionLock).
	s.succession.release()
}

// masterConn returns a connection to the active master (coord's master
// key names its address).
func (s *TabletServer) masterConn(ctx context.Context) (grpc.ClientConnInterface, error) {
	e, err := s.cfg.Coord.Get(ctx, coord.KeyMaster)
	if err != nil || e.Session == "" || len(e.Value) == 0 {
		return nil, status.Error(codes.Unavailable, "no active master")
	}
	return s.conns.get(string(e.Value))
}

// commitSplit records a split in METADATA (tabletserver.HostOptions.OnSplit),
// the children located here with the parent's epoch, as the paper's
// tablet server commits a split: the commit point is one row write. First
// the rows of the children whose end rows are new (all but the last) are
// added, each recording the parent (commitSplitNew): the first of these
// commits the split. Then the parent's row, which has the last child's end
// row, becomes the last child's, if it still names the parent
// (commitSplitLast). In between METADATA shows the parent overlapping its
// left children, never a gap: the master assigns none of them while they
// overlap, and if this server dies in between, the master's next read of
// METADATA finishes the split from the tablets' saved states (see
// metadataStore.finishSplits), locating the missing children here, where
// their recent writes are logged. Every step is idempotent, and a row
// describing the last child already means the split is in METADATA (an
// earlier attempt or the master finished it). The master is told last.
func (s *TabletServer) commitSplit(ctx context.Context, table meta.TableID, parent string, children []tabletserver.TabletInfo) error {
	if len(children) == 0 {
		return nil
	}
	cs := make([]splitChild, len(children))
	for i, c := range children {
		cs[i] = splitChild{ID: c.ID, Start: c.Start, End: c.End}
	}
	now := time.Now()
	created := children[0].TableCreated
	epoch, finished, err := commitSplitNew(ctx, s.cl, s.name, table, parent, cs, now)
	if err != nil {
		return s.splitCommitError(ctx, table, created, err)
	}
	if !finished {
		if err := commitSplitLast(ctx, s.cl, s.name, table, parent, cs[len(cs)-1], epoch, now); err != nil {
			return s.splitCommitError(ctx, table, created, err)
		}
	}
	s.log.Info("split committed", "table", table.String(), "parent", parent, "children", len(children))
	if cc, err := s.masterConn(ctx); err == nil {
		ids := make([]string, len(children))
		for i, c := range children {
			ids[i] = c.ID
		}
		_, _ = clusterpb.NewServerReportsClient(cc).ReportSplit(ctx, &clusterpb.ReportSplitRequest{ServerId: s.name, Table: table.String(), ParentId: parent, ChildIds: ids})
	}
	return nil
}

// splitCommitError is err, a failed commit of a split of table (created
// at created, as the server served it when it split), marked
// tabletserver.ErrTableGone when that table was deleted meanwhile: the
// catalog has no entry for it, or one created at another time (deleted
// and created again under the name, its METADATA rows those of the new
// table's tablets). Otherwise — the parent's own split not yet in
// METADATA, METADATA or the catalog unreadable — err is returned as it
// is, and the commit retried.
func (s *TabletServer) splitCommitError(ctx context.Context, table meta.TableID, created time.Time, err error) error {
	cur, gerr := NewCoordCatalog(s.cfg.Coord).Get(ctx, table)
	switch {
	case errors.Is(gerr, meta.ErrTableNotFound):
	case gerr == nil && !created.IsZero() && !cur.Created.Equal(created):
	default:
		return err
	}
	return fmt.Errorf("%w: %s (%v)", tabletserver.ErrTableGone, table, err)
}

func (s *TabletServer) httpHandler() http.Handler {
	return OpsHandler(s.registry, s.statusHandler(), func() error {
		select {
		case <-s.done:
			return errors.New("stopped")
		default:
		}
		if !s.sess.Valid() {
			return errors.New("lease not valid")
		}
		return nil
	})
}

// DefaultIdleMergeAfter is the ServerConfig.IdleMergeAfter tabula dev and
// tabula tabletserver run with by default.
const DefaultIdleMergeAfter = tabletserver.DefaultIdleMergeAfter

// DefaultMajorInterval is the default of ServerConfig.MajorInterval.
const DefaultMajorInterval = tablet.DefaultMajorInterval

// newPacer returns the Pacer of ServerConfig.CompactionRate: nil (no
// pacing) when it is negative.
func newPacer(rate int64) *pacing.Pacer {
	if rate < 0 {
		return nil
	}
	return pacing.New(pacing.Config{MinRate: float64(rate)})
}
