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

	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

func newDevCommand() *cobra.Command {
	var cfg cluster.DevConfig
	var logFormat string
	var wf workerFlags
	var tf serverTLSFlags
	var af serverAuthFlags
	def := cell.DefaultLimits()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Tabula in one process: data and admin API on one port, a local directory as the store",
		Long: `dev runs the whole of Tabula in one process: the cluster's roles — the
master with the table admin API (google.bigtable.admin.v2) and Tabula's
locality group extension, and one tablet server with the Cloud Bigtable data
API (google.bigtable.v2), to which the master assigns every tablet — on one
gRPC port, keeping everything under --dir: SSTables and tablet states in
--dir/store, the lock service's keys (the table catalog among them) in
--dir/coord.json, the commit log in --dir/logs. (A --dir of an older dev,
with the catalog in --dir/store/catalog and the log in --dir/log, is moved
to this layout at start.)

Point the official clients at it with BIGTABLE_EMULATOR_HOST=<addr>. When it
serves it prints one line "ready <addr>" on stdout. SIGTERM or SIGINT stops
it cleanly. Started again on the same --dir (after a clean stop or kill -9)
it brings back every acknowledged write and every table's schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var h slog.Handler
			switch logFormat {
			case "json":
				h = slog.NewJSONHandler(cmd.ErrOrStderr(), nil)
			case "text":
				h = slog.NewTextHandler(cmd.ErrOrStderr(), nil)
			default:
				return fmt.Errorf("--log-format: %q is neither json nor text", logFormat)
			}
			cfg.Logger = slog.New(h)
			var err error
			if cfg.TLS, err = tf.role(cfg.Logger); err != nil {
				return err
			}
			tf.exportClientEnv() // for the in-process MapReduce worker's tasks
			if cfg.Auth, err = af.config(cfg.Logger, "dev", cfg.Addr); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopWorker, err := devWorker(&cfg, &wf)
			if err != nil {
				return err
			}
			defer stopWorker()
			return runDev(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory for all data (required)")
	f.StringVar(&cfg.Addr, "addr", defaultAddr, "gRPC listen address host:port (port 0 picks a free port)")
	f.StringVar(&cfg.HTTPAddr, "http", "", "HTTP listen address for /metrics, /debug/pprof/ and /healthz (off when empty)")
	f.Int64Var(&cfg.MemtableBytes, "memtable-size", 64<<20, "memtable size in bytes that triggers a minor compaction")
	f.Int64Var(&cfg.MemtableBudget, "memtable-budget", tabletserver.DefaultMemtableBudget, memtableBudgetHelp)
	f.Int64Var(&cfg.CompactionRate, "compaction-rate", pacing.DefaultMinRate, compactionRateHelp)
	f.DurationVar(&cfg.MajorInterval, "major-compaction-interval", cluster.DefaultMajorInterval, majorIntervalHelp)
	f.DurationVar(&cfg.IdleMergeAfter, "idle-merge-after", cluster.DefaultIdleMergeAfter, idleMergeHelp)
	f.Int64Var(&cfg.SplitBytes, "split-size", tabletserver.DefaultSplitBytes, "tablet size in bytes past which a tablet splits")
	f.Int64Var(&cfg.BlockCacheBytes, "block-cache-size", 0, blockCacheHelp)
	f.Int64Var(&cfg.ScanCacheBytes, "scan-cache-size", cluster.DefaultScanCacheBytes, "scan cache in bytes (negative: none)")
	f.BoolVar(&cfg.InstanceAgnostic, "instance-agnostic", false, "serve every project and instance from one namespace")
	f.BoolVar(&cfg.ClassicOnly, "classic-only", false, classicOnlyHelp)
	f.DurationVar(&cfg.LogTruncateInterval, "log-truncate-interval", tabletserver.DefaultLogTruncateInterval, "how often the commit log drops what every tablet has flushed")
	f.DurationVar(&cfg.SweepInterval, "sweep-interval", cluster.DefaultGCInterval, "how often SSTables no tablet references any more are deleted")
	f.DurationVar(&cfg.SweepGrace, "sweep-grace", cluster.DefaultGCGrace, "files younger than this are never swept (a compaction may be writing them)")
	f.DurationVar(&cfg.UndeleteRetention, "undelete-retention", master.DefaultUndeleteRetention, "how long a deleted table stays restorable by UndeleteTable (tabula undelete); its name stays taken meanwhile (0: delete at once)")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cluster.DefaultStopTimeout, "how long a stop waits for requests in flight")
	f.IntVar(&cfg.Limits.MaxRowKeyBytes, "max-row-key-bytes", def.MaxRowKeyBytes, "largest row key")
	f.IntVar(&cfg.Limits.MaxQualifierBytes, "max-qualifier-bytes", def.MaxQualifierBytes, "largest column qualifier")
	f.IntVar(&cfg.Limits.MaxValueBytes, "max-value-bytes", def.MaxValueBytes, "largest cell value")
	f.IntVar(&cfg.Limits.MaxMutations, "max-mutations", def.MaxMutations, "most mutations in one request")
	f.StringVar(&logFormat, "log-format", "json", "log format on stderr: json or text")
	wf.register(cmd, "worker-", true, "DIR/mr, under --dir")
	tf.register(f)
	af.register(f)
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// runDev serves until ctx is done (a signal), then stops cleanly.
func runDev(ctx context.Context, cfg cluster.DevConfig, out io.Writer) error {
	d, err := cluster.StartDev(ctx, cfg)
	if err != nil {
		return err
	}
	// The one line scripts and tests wait for, with the real address.
	fmt.Fprintf(out, "ready %s\n", d.Addr())
	select {
	case <-ctx.Done():
		return d.Close()
	case err := <-d.Err():
		return errors.Join(err, d.Close())
	}
}

// memtableBudgetHelp documents --memtable-budget (tabula dev and tabula
// tabletserver).
const memtableBudgetHelp = "bytes the memtables of all the server's tablets may hold together: past it, the largest are flushed early, and at twice it writes wait for the flushes (negative: no budget)"

// classicOnlyHelp is --classic-only's help, for tabula dev and tabletserver.
const classicOnlyHelp = "keep clients on the classic data API: do not send the official clients' single-row reads and writes to sessions (they use sessions only when they dial the server themselves, not through BIGTABLE_EMULATOR_HOST)"

// compactionRateHelp documents --compaction-rate (tabula dev and tabula
// tabletserver).
const compactionRateHelp = "bytes per second the tablets' own flushes and merging compactions write at while requests are served (faster under pressure, unpaced when idle; negative: never paced)"

// majorIntervalHelp documents --major-compaction-interval (tabula dev and
// tabula tabletserver).
const majorIntervalHelp = "how often each tablet rewrites its SSTables into one on its own (paced), reclaiming deleted and collected data; each wait is drawn between half this and this (negative: never)"

// idleMergeHelp documents --idle-merge-after (tabula dev and tabula
// tabletserver, where it is on by default).
const idleMergeHelp = "how long the server must serve no request before its tablets merge the SSTables that piled up (size-tiered; paced once requests return), so that reads after a burst of writes consult fewer files (0 or negative: never)"

// blockCacheHelp documents --block-cache-size (tabula dev and tabula
// tabletserver).
const blockCacheHelp = "SSTable block cache in bytes (0: an eighth of the machine's memory, 256 MiB to 4 GiB; negative: none)"
