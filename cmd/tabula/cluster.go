package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// roleFlags are the flags both cluster roles take.
type roleFlags struct {
	consul, store, addr, cluster, http, logFormat string
	// advertise is --advertise-addr: the address the process is known
	// by when not the listener's (advertise.Addr).
	advertise             string
	sessionTTL, lockDelay time.Duration
	tls                   serverTLSFlags
	backend               backendFlags
	auth                  serverAuthFlags
	// authConfig is the role's authentication, which open builds from
	// auth (nil: off).
	authConfig *cluster.AuthConfig
	// transport is the role's TLS, which open builds from tls.
	transport tlsconfig.Role
}

func (r *roleFlags) register(cmd *cobra.Command) {
	r.registerCoord(cmd)
	cmd.Flags().StringVar(&r.store, "store", "", "object store URL: s3://BUCKET?endpoint=HOST:PORT&secure=false or file:///path (required)")
	_ = cmd.MarkFlagRequired("store")
}

// registerCoord registers the flags of every process that joins a cluster
// through Consul, the store aside (a MapReduce worker has none).
func (r *roleFlags) registerCoord(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&r.consul, "consul", "", "Consul agent address host:port (required)")
	f.StringVar(&r.addr, "addr", defaultAddr, "gRPC listen address host:port (port 0 picks a free port)")
	f.StringVar(&r.advertise, "advertise-addr", "", "the address HOST[:PORT] other processes and clients dial this one at, registered in Consul and checked against its TLS certificate (default --addr; no port or port 0: --addr's); required when --addr listens on every interface (0.0.0.0:PORT, [::]:PORT)")
	f.StringVar(&r.cluster, "cluster", coord.DefaultCluster, "cluster name: the Consul key prefix tabula/<name>/")
	f.StringVar(&r.http, "http", "", "HTTP listen address for /metrics, /debug/pprof/, /healthz and /status (off when empty)")
	f.StringVar(&r.logFormat, "log-format", "json", "log format on stderr: json or text")
	f.DurationVar(&r.sessionTTL, "session-ttl", cluster.DefaultSessionTTL, "Consul session TTL (10s to 24h); give every process of a cluster the same: a new master waits this long before declaring dead a server whose session it finds ended")
	f.DurationVar(&r.lockDelay, "lock-delay", cluster.DefaultLockDelay, "Consul lock-delay after a session ends")
	r.tls.register(f)
	r.auth.register(f)
	r.backend.register(f)
	_ = cmd.MarkFlagRequired("consul")
}

// open returns the logger, the lock service and the store the flags name.
func (r *roleFlags) open(ctx context.Context, stderr io.Writer) (*slog.Logger, coord.Service, blob.Store, error) {
	log, err := r.logger(stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	if r.sessionTTL < 10*time.Second {
		return nil, nil, nil, fmt.Errorf("--session-ttl: %v is below Consul's minimum of 10s", r.sessionTTL)
	}
	if r.transport, err = r.tls.role(log); err != nil {
		return nil, nil, nil, err
	}
	if r.authConfig, err = r.auth.config(log, "server", r.addr); err != nil {
		return nil, nil, nil, err
	}
	store, err := blob.OpenURL(ctx, r.store)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--store: %w", err)
	}
	svc, err := r.coord()
	if err != nil {
		return nil, nil, nil, err
	}
	return log, svc, store, nil
}

// logger returns the logger --log-format names, writing to stderr.
func (r *roleFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	switch r.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, nil)), nil
	case "text":
		return slog.New(slog.NewTextHandler(stderr, nil)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is neither json nor text", r.logFormat)
}

// coord returns the lock service of --consul under --cluster's prefix.
func (r *roleFlags) coord() (coord.Service, error) {
	if r.sessionTTL < 10*time.Second {
		return nil, fmt.Errorf("--session-ttl: %v is below Consul's minimum of 10s", r.sessionTTL)
	}
	token, err := r.backend.token()
	if err != nil {
		return nil, fmt.Errorf("--consul-token: %w", err)
	}
	svc, err := coord.NewConsul(coord.ConsulConfig{Address: r.consul, Prefix: coord.ClusterPrefix(r.cluster), SessionTTL: r.sessionTTL, LockDelay: r.lockDelay,
		Token: token, CAFile: r.backend.consulCA, CertFile: r.backend.consulCert, KeyFile: r.backend.consulKey})
	if err != nil {
		return nil, fmt.Errorf("--consul: %w", err)
	}
	return svc, nil
}

func newMasterCommand() *cobra.Command {
	var r roleFlags
	var splitBytes, mergeBelow int64
	var gcInterval, gcGrace, undeleteRetention time.Duration
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run a cluster master: admin API, tablet assignment, failure detection, garbage collection",
		Long: `master runs one master of a Tabula cluster. Several may run: one holds the
master lock in Consul and acts, the others wait on it and take over when it
dies. Every master serves the table admin API; tablet servers forward admin
calls to the active one. When it listens it prints "ready <addr>" on stdout;
SIGTERM or SIGINT stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log, svc, store, err := r.open(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer svc.Close()
			m, err := cluster.StartMaster(ctx, cluster.MasterConfig{
				Coord: svc, Store: store, Addr: r.addr, AdvertiseAddr: r.advertise, HTTPAddr: r.http, Cluster: r.cluster,
				SplitBytes: splitBytes, MergeBelow: mergeBelow, SessionTTL: r.sessionTTL, LockDelay: r.lockDelay,
				GCInterval: gcInterval, GCGrace: gcGrace, UndeleteRetention: undeleteRetention, Logger: log, TLS: r.transport, Auth: r.authConfig,
			})
			if err != nil {
				return err
			}
			if a := m.HTTPAddr(); a != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "http %s\n", a)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ready %s\n", m.Addr())
			<-ctx.Done()
			m.Close()
			return nil
		},
	}
	r.register(cmd)
	f := cmd.Flags()
	f.Int64Var(&splitBytes, "split-size", tabletserver.DefaultSplitBytes, "the tablet servers' split size, which balancing weighs tablets by")
	f.Int64Var(&mergeBelow, "merge-below", 0, "merge adjacent tablets of a table both smaller than this many bytes (0: merge only on request, tabula mergetablets)")
	f.DurationVar(&gcInterval, "gc-interval", cluster.DefaultGCInterval, "how often unreferenced SSTables are collected")
	f.DurationVar(&gcGrace, "gc-grace", cluster.DefaultGCGrace, "files younger than this are never collected (longer than any compaction)")
	f.DurationVar(&undeleteRetention, "undelete-retention", master.DefaultUndeleteRetention, "how long a deleted table stays restorable by UndeleteTable (tabula undelete); its name stays taken meanwhile (0: delete at once)")
	return cmd
}

func newTabletServerCommand() *cobra.Command {
	var r roleFlags
	var memtableBytes, memtableBudget, splitBytes, metadataSplitBytes, blockCacheBytes, scanCacheBytes, compactionRate int64
	var majorInterval, idleMergeAfter, metadataLogRelease time.Duration
	var serverLease, fileCommitWindow time.Duration
	var classicOnly bool
	var lockDir string
	var tw tabletServerWorker
	cmd := &cobra.Command{
		Use:   "tabletserver",
		Short: "Run a cluster tablet server: serves the tablets the master assigns, and the whole data API",
		Long: `tabletserver runs one tablet server of a Tabula cluster. It registers in
Consul, keeps its commit log and SSTables in the object store, serves the
tablets the master gives it, and answers the whole Cloud Bigtable API:
requests for tablets elsewhere are routed to their servers, admin calls to
the master. Point the official clients at any tablet server with
BIGTABLE_EMULATOR_HOST=<addr>. When it serves it prints "ready <addr>" on
stdout. It exits non-zero when its Consul lease lapses or the master
declares it dead; SIGTERM or SIGINT stops it cleanly, handing its tablets
back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log, svc, store, err := r.open(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer svc.Close()
			s, err := cluster.StartTabletServer(ctx, cluster.ServerConfig{
				Coord: svc, Store: store, Addr: r.addr, AdvertiseAddr: r.advertise, HTTPAddr: r.http, Cluster: r.cluster,
				MemtableBytes: memtableBytes, MemtableBudget: memtableBudget, SplitBytes: splitBytes, CompactionRate: compactionRate, MetadataSplitBytes: metadataSplitBytes, MetadataLogRelease: metadataLogRelease, MajorInterval: majorInterval, IdleMergeAfter: idleMergeAfter,
				BlockCacheBytes: blockCacheBytes, ScanCacheBytes: scanCacheBytes,
				SessionTTL: r.sessionTTL, LockDelay: r.lockDelay, Lease: serverLease, FileCommitWindow: fileCommitWindow, Logger: log, TLS: r.transport, Auth: r.authConfig,
				ClassicOnly: classicOnly, LockDir: lockDir,
			})
			if err != nil {
				return err
			}
			if a := s.HTTPAddr(); a != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "http %s\n", a)
			}
			w, err := tw.start(ctx, &r, svc, s.Addr(), nil, log)
			if err != nil {
				return errors.Join(fmt.Errorf("--worker: %w", err), s.Close())
			}
			if w != nil {
				defer w.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "worker %s\n", w.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ready %s\n", s.Addr())
			select {
			case <-ctx.Done():
				return s.Close()
			case <-s.Done():
				if err := s.Err(); err != nil {
					return err
				}
				return errors.New("tablet server stopped")
			}
		},
	}
	r.register(cmd)
	f := cmd.Flags()
	f.Int64Var(&memtableBytes, "memtable-size", 64<<20, "memtable size in bytes that triggers a minor compaction")
	f.Int64Var(&memtableBudget, "memtable-budget", tabletserver.DefaultMemtableBudget, memtableBudgetHelp)
	f.Int64Var(&compactionRate, "compaction-rate", pacing.DefaultMinRate, compactionRateHelp)
	f.DurationVar(&majorInterval, "major-compaction-interval", cluster.DefaultMajorInterval, majorIntervalHelp)
	f.DurationVar(&idleMergeAfter, "idle-merge-after", cluster.DefaultIdleMergeAfter, idleMergeHelp)
	f.Int64Var(&splitBytes, "split-size", tabletserver.DefaultSplitBytes, "tablet size in bytes past which a tablet splits")
	f.Int64Var(&metadataSplitBytes, "metadata-split-size", tabletserver.DefaultMetadataSplitBytes, "METADATA tablet size in bytes past which a METADATA tablet other than the root splits")
	f.DurationVar(&metadataLogRelease, "metadata-log-release", tabletserver.DefaultMetadataLogRelease, "how long a METADATA tablet's redo point may stay behind the commit log's tail: this often, and at each new log segment, METADATA tablets are flushed (or, idle, given a new redo point), so that recovering the root from this server's log after a crash reads only the log's tail (negative: only when the log is truncated)")
	f.Int64Var(&blockCacheBytes, "block-cache-size", 0, blockCacheHelp)
	f.Int64Var(&scanCacheBytes, "scan-cache-size", cluster.DefaultScanCacheBytes, "scan cache in bytes (negative: none)")
	f.DurationVar(&serverLease, "server-lease", cluster.DefaultServerLease, "the server's own lease, shorter than --session-ttl: it stops serving this long after the start of its last successful session renewal (renewing every quarter of it), and the master reassigns its tablets this long plus a tenth after ending its session (negative: the session TTL)")
	f.DurationVar(&fileCommitWindow, "file-commit-window", cluster.DefaultGCGrace/2, "a new SSTable is written again under a fresh name when saving the tablet state that lists it starts later than this after its name's time; keep it below the master's --gc-grace, which spares files younger than that")
	f.BoolVar(&classicOnly, "classic-only", false, classicOnlyHelp)
	f.StringVar(&lockDir, "lock-dir", os.TempDir(), "a directory of this host, kept across restarts, where the server locks a file named after its advertised address while it runs: restarted on the same address, it finds there that its predecessor exited, and the master recovers that one's tablets at once instead of after --server-lease (empty: no lock)")
	tw.register(cmd)
	return cmd
}
