package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/advertise"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// Defaults of MasterConfig.
const (
	DefaultGCInterval = time.Minute
	// DefaultGCGrace spares files younger than this: a compaction may be
	// writing a file nobody has reported yet. It must exceed the longest
	// compaction.
	DefaultGCGrace = 15 * time.Minute
)

// DefaultMasterLease is MasterConfig.MasterLease's default: with the
// lock-delay raised to 4.4s and a standby ending an unresponsive master's
// session after 2s, a standby leads about 7s after the active master dies
// or stops, instead of the 20s Consul takes to expire a 10s session.
const DefaultMasterLease = 4 * time.Second

// MasterConfig configures a master. Coord and Store are required.
type MasterConfig struct {
	Coord coord.Service
	Store blob.Store
	// Addr is the gRPC listen address; the advertised address (see
	// AdvertiseAddr) is also the master lock's value, which tablet
	// servers forward admin calls to.
	Addr string
	// AdvertiseAddr is the address the master is known by when not the
	// listener's, as ServerConfig.AdvertiseAddr.
	AdvertiseAddr string
	HTTPAddr      string
	Cluster       string
	// SplitBytes is the tablet servers' split size, which the planner
	// uses to weigh tablets (0: its default).
	SplitBytes int64
	// MergeBelow, when positive, has the master merge adjacent tablets of
	// a table both smaller than this (see storage/master/merge.go); 0
	// merges only on request (the admin API's TabletOperations).
	MergeBelow int64
	// SessionTTL and LockDelay configure the master's lease.
	SessionTTL, LockDelay time.Duration
	// MasterLease is the active master's own lease, shorter than the
	// session's TTL (master.LoopOptions.Lease; the lock-delay is raised
	// past it); default DefaultMasterLease, negative: the TTL.
	// TakeoverAfter is how long a standby lets the active master fail its
	// health probes before ending its session (default 2s; negative: wait
	// for the lock service to expire it).
	MasterLease, TakeoverAfter time.Duration
	// Tick is the assignment loop's period; default 1s.
	Tick time.Duration
	// ServerTTL is the longest session TTL of the tablet servers: how long
	// a new master waits before taking the key of a server it finds
	// released (master.LoopOptions.ServerTTL); default the master's own
	// SessionTTL.
	ServerTTL time.Duration
	// LogDir is the directory of the tablet servers' commit logs when
	// they keep them as files (ServerConfig.LogDir); the master deletes
	// dead servers' logs there as it does in Store. Empty: none.
	LogDir string
	// GCInterval is how often the active master collects garbage files
	// (DefaultGCInterval); GCGrace spares young files (DefaultGCGrace).
	GCInterval, GCGrace time.Duration
	// UndeleteRetention keeps deleted tables restorable by UndeleteTable
	// this long (master.Options.UndeleteRetention); zero: deleted at once.
	UndeleteRetention time.Duration
	Logger            *slog.Logger
	// TLS secures the gRPC and HTTP ports (TLS.Server) and the calls to
	// other servers (TLS.Client); the zero value is plaintext.
	TLS tlsconfig.Role
	// Auth, when set, requires credentials and enforces the tables'
	// grants on the admin API (AuthConfig); nil: everyone may do
	// everything.
	Auth *AuthConfig
	// Limits bound split keys and row key prefixes of the admin API; zero
	// means cell.DefaultLimits().
	Limits cell.Limits

	// inProc, set only by StartDev, runs the master in one process with a
	// tablet server (see inProcess).
	inProc *inProcess
}

// Master is a running master: it serves the admin API, campaigns for the
// master lock and, while it holds it, runs the assignment loop and collects
// garbage files.
type Master struct {
	cfg       MasterConfig
	addr      string
	log       *slog.Logger
	lis       net.Listener
	httpLis   net.Listener
	grpc      *grpc.Server
	http      *http.Server
	conns     *conns
	self      *grpc.ClientConn
	cl        *client.Client
	md        *metadataStore
	loop      *master.Loop
	states    tablet.StateStore
	registry  *prometheus.Registry
	events    *eventRing
	gcDeleted prometheus.Counter
	logs      *logGC // dead servers' commit logs, with their ages

	admin     *master.AdminService
	tableHost *clusterTableHost

	runCtx context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartMaster starts a master: it listens at once (a standby serves the
// admin API too) and campaigns in the background.
func StartMaster(ctx context.Context, cfg MasterConfig) (_ *Master, err error) {
	m, err := newMaster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.cfg.inProc != nil {
		// StartDev serves the services on its one gRPC server and starts
		// the loops (run) once it does.
		return m, nil
	}
	guard, err := newGuard(cfg.Auth, m.catalog(), "", nil, true, m.admin, m.log, m.registry)
	if err != nil {
		return nil, err
	}
	m.grpc = grpc.NewServer(append(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(tabletserver.MaxRequestBytes), grpc.MaxSendMsgSize(tabletserver.MaxRequestBytes)}, tlsconfig.ServerOptions(cfg.TLS.Server)...), guardOptions(guard)...)...)
	m.register(m.grpc)
	healthpb.RegisterHealthServer(m.grpc, masterHealth{Server: health.NewServer(), leading: m.Leading})
	go func() { _ = m.grpc.Serve(m.lis) }()
	if cfg.HTTPAddr != "" {
		if m.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, err
		}
		m.http = &http.Server{Handler: m.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = m.http.Serve(opsListener(m.httpLis, cfg.TLS)) }()
	}
	m.run()
	tlsconfig.WarnPlaintext(m.log, "master", m.addr, cfg.TLS.Server)
	m.log.Info("master started", "addr", m.addr)
	return m, nil
}

// newMaster builds a master (its admin API, its view of METADATA, its
// loop) without serving or campaigning: StartMaster and StartDev do that.
func newMaster(ctx context.Context, cfg MasterConfig) (_ *Master, err error) {
	if cfg.Coord == nil || cfg.Store == nil {
		return nil, errors.New("cluster: MasterConfig needs Coord and Store")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	switch {
	case cfg.MasterLease == 0:
		cfg.MasterLease = DefaultMasterLease
	case cfg.MasterLease < 0:
		cfg.MasterLease = 0
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.GCGrace <= 0 {
		cfg.GCGrace = DefaultGCGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	m := &Master{cfg: cfg, conns: newConns(cfg.TLS.Client, cfg.Auth.serverDialOptions()...), registry: prometheus.NewRegistry(), events: newEventRing(200),
		states: tablet.NewBlobStateStore(cfg.Store, StatePrefix),
		logs:   newLogGC(cfg.Store, cfg.Coord, cfg.GCGrace)}
	if cfg.inProc != nil {
		m.registry = cfg.inProc.registry
	}
	if cfg.LogDir != "" {
		if m.logs.local, err = blob.NewLocal(cfg.LogDir); err != nil {
			return nil, fmt.Errorf("cluster: the commit logs' directory: %w", err)
		}
	}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if cfg.inProc != nil {
		m.addr = cfg.inProc.addr()
		m.self = cfg.inProc.conn
		m.conns.alias(m.addr, cfg.inProc.conn)
	} else {
		if m.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, err
		}
		if m.addr, err = advertise.Addr(cfg.AdvertiseAddr, m.lis.Addr()); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if m.self, err = grpc.NewClient(m.addr, append([]grpc.DialOption{tlsconfig.DialOption(cfg.TLS.Client)}, cfg.Auth.serverDialOptions()...)...); err != nil {
			return nil, err
		}
	}
	m.log = cfg.Logger.With("master", m.addr)
	// FailFastNotServing: a METADATA tablet that answers "not serving"
	// waits for this master's next round; a round's reads and writes of
	// METADATA must not wait for it.
	m.cl = client.New(m.self, client.Options{TLS: cfg.TLS.Client, Token: cfg.Auth.serverToken(), Metadata: coordSource{kv: cfg.Coord, inner: client.NewMetadataSource(m.self, m.conns.get)},
		FailFastNotServing: true})
	m.md = newMetadataStore(cfg.Coord, m.cl)
	m.md.log = m.log
	m.md.states = m.states // to finish splits a crash cut short
	catalog := m.catalog()
	servers := &serverClient{conns: m.conns, catalog: catalog}
	md := loopMetadata{metadataStore: m.md, catalog: catalog}
	var orphanAfter time.Duration // the loop's default
	if cfg.inProc != nil {
		md.timeout = cfg.inProc.metadataReadTimeout
		orphanAfter = cfg.inProc.orphanAfter
	}
	if m.loop, err = master.NewLoop(master.LoopOptions{
		Coord:     cfg.Coord,
		Servers:   &eventServers{inner: servers, events: m.events},
		Metadata:  md,
		Name:      m.addr,
		Tick:      cfg.Tick,
		ServerTTL: cfg.ServerTTL,
		Plan:      assign.Config{SplitSize: cfg.SplitBytes, MergeBelow: cfg.MergeBelow},
		AutoMerge: cfg.MergeBelow > 0,
		// A deleted table's tablets its deletion did not reach.
		OrphanAfter: orphanAfter,
		Session:     coord.SessionOptions{Name: "master " + m.addr, TTL: cfg.SessionTTL, LockDelay: cfg.LockDelay},
		Logger:      m.log,
		// Fast takeover (storage/master/takeover.go): a standby ends an
		// unresponsive active master's session; the master's own lease and
		// the lock-delay fence it.
		Lease:         cfg.MasterLease,
		ProbeMaster:   m.probeMaster,
		TakeoverAfter: cfg.TakeoverAfter,
		// Creations a predecessor's crash cut short (table_repair.go),
		// and deletions.
		Repair: func(ctx context.Context) error {
			_, err := repairTables(ctx, catalog, m.md, m.states, repairRestores, m.log)
			if _, ferr := m.admin.FinishDeletions(ctx, CreationInProgressFor); ferr != nil {
				m.log.Warn("finishing interrupted table deletions", "err", ferr)
			}
			return err
		},
	}); err != nil {
		return nil, err
	}
	// A connection to a server that breaks (its process died) asks for a
	// round now: the failure is counted from then, not from the next
	// Tick.
	m.conns.notifyBreaks(m.loop.Poke)
	m.tableHost = &clusterTableHost{kv: cfg.Coord, catalog: catalog, md: m.md, servers: servers, poke: m.loop.Poke}
	adminOpts := master.Options{
		Catalog: catalog,
		Host:    m.tableHost,
		Logger:  m.log,
		Limits:  cfg.Limits,
		// Backups' manifests and restored tables' files and states.
		BackupStore:       cfg.Store,
		States:            m.states,
		UndeleteRetention: cfg.UndeleteRetention,
	}
	if in := cfg.inProc; in != nil {
		// One process: a dropped table's files go at once (no other
		// server may still read them once its tablets are unloaded).
		adminOpts.Store = cfg.Store
		adminOpts.Instance = in.instance
		// Restored tables reference files in other tables' directories.
		adminOpts.LiveFiles = in.liveFiles
		if in.tableHost != nil {
			adminOpts.Host = in.tableHost(m)
		}
	}
	if m.admin, err = master.NewAdminService(adminOpts); err != nil {
		return nil, err
	}
	if cfg.inProc == nil {
		m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	registerLocateMetrics(m.registry, "master", m.cl.LocateStats)
	m.registerMetrics()
	return m, nil
}

// catalog is the master's table catalog, in the lock service.
func (m *Master) catalog() meta.Catalog { return NewCoordCatalog(m.cfg.Coord) }

// register registers the master's services on srv: the admin API (with
// the locality group extension and long-running operations), the tablet
// servers' split reports and the tablet operations extension.
func (m *Master) register(srv grpc.ServiceRegistrar) {
	m.admin.Register(srv)
	clusterpb.RegisterServerReportsServer(srv, &serverReportsService{m: m})
	adminextpb.RegisterTabletOperationsServer(srv, &masterTabletOps{m: m})
}

// run starts the assignment loop (which campaigns for the master lock)
// and the garbage collector, until Close.
func (m *Master) run() {
	runCtx, cancel := context.WithCancel(context.Background())
	m.runCtx, m.cancel = runCtx, cancel
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		if err := m.loop.Run(runCtx); err != nil && runCtx.Err() == nil {
			m.log.Error("assignment loop ended", "err", err)
		}
	}()
	go func() {
		defer m.wg.Done()
		m.gcLoop(runCtx)
	}()
}

// Addr returns the master's gRPC address.
func (m *Master) Addr() string { return m.addr }

// HTTPAddr returns the HTTP listen address, "" without one.
func (m *Master) HTTPAddr() string {
	if m.httpLis == nil {
		return ""
	}
	return m.httpLis.Addr().String()
}

// Leading reports whether this master is the active one.
func (m *Master) Leading() bool {
	on, _ := m.loop.Leading()
	return on
}

// Close stops the master; its session is destroyed, so a standby takes
// over after the lock-delay.
func (m *Master) Close() {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
	if m.grpc != nil {
		m.grpc.Stop()
	}
	if m.http != nil {
		_ = m.http.Close()
	}
	if m.cl != nil {
		_ = m.cl.Close()
	}
	if m.self != nil && m.cfg.inProc == nil {
		_ = m.self.Close()
	}
	m.conns.close()
}

// serverReportsService receives the tablet servers' split reports.
type serverReportsService struct {
	clusterpb.UnimplementedServerReportsServer
	m *Master
}

func (s *serverReportsService) ReportSplit(ctx context.Context, req *clusterpb.ReportSplitRequest) (*clusterpb.ReportSplitResponse, error) {
	sp := assign.Split{Server: assign.ServerID(req.GetServerId()), Table: req.GetTable(), Parent: assign.TabletID(req.GetParentId())}
	for _, c := range req.GetChildIds() {
		sp.Children = append(sp.Children, assign.TabletID(c))
	}
	s.m.loop.ReportSplit(sp)
	s.m.events.add(event{Kind: "split", Tablet: req.GetParentId(), Server: req.GetServerId(), Detail: fmt.Sprintf("into %v", req.GetChildIds())})
	return &clusterpb.ReportSplitResponse{}, nil
}

func (m *Master) httpHandler() http.Handler {
	return OpsHandler(m.registry, m.statusHandler(), func() error { return nil })
}

// ActiveMasterHealthService is the gRPC health service a master answers
// SERVING for only while it is the active master (NOT_SERVING as a
// standby). The empty service name answers SERVING whenever the process
// serves. Only Check knows it (Watch and List do not).
const ActiveMasterHealthService = "tabula.master.active"

// masterHealth is the master's health service: the standard one, plus
// ActiveMasterHealthService.
type masterHealth struct {
	*health.Server
	leading func() bool
}

func (h masterHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() != ActiveMasterHealthService {
		return h.Server.Check(ctx, req)
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.leading() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// errNotActive is probeMaster's error for a master that answers as a
// standby.
var errNotActive = errors.New("the master there answers as a standby")

// probeMaster checks that the master at addr answers and leads
// (master.LoopOptions.ProbeMaster): its ActiveMasterHealthService is
// SERVING. A process that answers as a standby fails the probe: the
// lock's session is then one that process gave up (it stood down when its
// lease ran out, and could not destroy the session: Consul was out of its
// reach) or that a process killed and restarted on the same address held.
// Either way nobody acts on the lock, which Consul would keep taken until
// it expired the session (up to twice the TTL), so the standby ends it.
// A master of an earlier version, which does not know the service
// (NOT_FOUND), is probed only for an answer.
func (m *Master) probeMaster(ctx context.Context, addr string) error {
	cc, err := m.conns.get(addr)
	if err != nil {
		return err
	}
	hc := healthpb.NewHealthClient(cc)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: ActiveMasterHealthService})
	if status.Code(err) == codes.NotFound {
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return errNotActive
	}
	return nil
}

// loopMetadata is the assignment loop's view of METADATA: the tablets of
// tables being restored are left out until their creation is finished
// (withoutRestoring), and in `tabula dev` each round's read is bounded by
// timeout: at a restart METADATA names the previous run's server, whose
// address answers nothing; a read of a tablet there is retried until its
// deadline, and the rounds that recover the root, then METADATA, then the
// tables each begin with one.
type loopMetadata struct {
	*metadataStore
	catalog meta.Catalog
	timeout time.Duration // 0: none
}

func (l loopMetadata) Tablets(ctx context.Context) ([]assign.Tablet, error) {
	ts, _, err := l.TabletsWhole(ctx, nil)
	return ts, err
}

// TabletsWhole implements master.WholeReader: Tablets, and whether every
// METADATA tablet was read.
func (l loopMetadata) TabletsWhole(ctx context.Context, dead func(server string) bool) ([]assign.Tablet, bool, error) {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	ts, whole, err := l.metadataStore.read(ctx, dead)
	if err != nil || !anyUnassigned(ts) {
		return ts, whole, err
	}
	restoring, err := restoringTables(ctx, l.catalog)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: reading the catalog for tables being restored: %w", err)
	}
	return withoutRestoring(ts, restoring), whole, nil
}
