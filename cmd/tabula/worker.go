package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/internal/advertise"
	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/coord"
)

// workerFlags are the flags of the MapReduce worker's execution, shared by
// `tabula worker` and `tabula tabletserver --worker`.
type workerFlags struct {
	dir        string
	host       string
	slots      int
	sortMemory int64
}

// tempWorkerDir is the default of a worker's directory outside tabula dev.
const tempWorkerDir = "a new directory under the system's temporary directory"

// register adds the flags, their names prefixed; zeroSlotsDisables says
// that --PREFIXslots 0 means no worker (tabula dev's, on by default);
// dirDefault says where the worker's files go without --PREFIXdir.
func (w *workerFlags) register(cmd *cobra.Command, prefix string, zeroSlotsDisables bool, dirDefault string) {
	f := cmd.Flags()
	f.StringVar(&w.dir, prefix+"dir", "", "directory for map outputs and spills (default: "+dirDefault+")")
	f.StringVar(&w.host, prefix+"host", "", "host name matched against the tablet servers' hosts to run map tasks next to their data (default: the host of the listen address)")
	slotsHelp := "task attempts run at once"
	if zeroSlotsDisables {
		slotsHelp += " (0: no worker)"
	}
	f.IntVar(&w.slots, prefix+"slots", runtime.NumCPU(), slotsHelp)
	f.Int64Var(&w.sortMemory, prefix+"sort-memory", mapreduce.DefaultSortMemory, "each map attempt's sort buffer in bytes; output beyond it spills to --"+prefix+"dir")
}

// config checks the flags and returns the worker's execution settings.
func (w *workerFlags) config(prefix string) (mapreduce.LocalWorkerConfig, error) {
	if w.slots < 1 {
		return mapreduce.LocalWorkerConfig{}, fmt.Errorf("--%sslots: %d is below 1", prefix, w.slots)
	}
	if w.sortMemory < 1<<20 {
		return mapreduce.LocalWorkerConfig{}, fmt.Errorf("--%ssort-memory: %d is below the minimum of 1 MiB", prefix, w.sortMemory)
	}
	dir := w.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "tabula-worker-"); err != nil {
			return mapreduce.LocalWorkerConfig{}, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return mapreduce.LocalWorkerConfig{}, fmt.Errorf("--%sdir: %w", prefix, err)
	}
	// A probe file: an unwritable directory is refused at start, not at
	// the first task.
	probe, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return mapreduce.LocalWorkerConfig{}, fmt.Errorf("--%sdir: %s is not writable: %w", prefix, dir, err)
	}
	probe.Close()
	_ = os.Remove(probe.Name())
	abs, _ := filepath.Abs(dir)
	return mapreduce.LocalWorkerConfig{Dir: abs, Host: w.host, Slots: w.slots, SortMemory: w.sortMemory}, nil
}

// defaultWorkerAddr is where `tabula worker` listens by default.
const defaultWorkerAddr = "127.0.0.1:8088"

func newWorkerCommand() *cobra.Command {
	var r roleFlags
	var wf workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a MapReduce worker: runs task attempts for `tabula mr` jobs and serves their map output",
		Long: `worker runs one MapReduce worker of a Tabula cluster. It registers in
Consul under the cluster's workers/ prefix for as long as it runs; the
coordinator of a job (the process running ` + "`tabula mr run --workers-consul`" + `)
hands it task attempts over gRPC, at most --slots at once, and reducers on
other workers fetch the map output it keeps in --dir. Jobs are found by name
in the registry compiled into this binary. When it serves it prints "ready
<addr>" on stdout. It exits non-zero when its Consul session lapses
(coordinators then count it dead and re-run its work); SIGTERM or SIGINT
stops it, unregistering at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log, err := r.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			lw, err := wf.config("")
			if err != nil {
				return err
			}
			if wf.dir == "" {
				defer os.RemoveAll(lw.Dir) // the temporary directory config made
			}
			if r.transport, err = r.tls.role(log); err != nil {
				return err
			}
			r.tls.exportClientEnv()
			if r.authConfig, err = r.auth.config(log, "worker", r.addr); err != nil {
				return err
			}
			svc, err := r.coord()
			if err != nil {
				return err
			}
			defer svc.Close()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			lw.Logger = log
			guarded, err := r.authConfig.WorkerServerOptions(log, reg)
			if err != nil {
				return err
			}
			w, err := remote.StartWorker(ctx, remote.WorkerConfig{
				Addr: r.addr, AdvertiseAddr: r.advertise, Coord: svc, SessionTTL: r.sessionTTL, LockDelay: r.lockDelay,
				Worker: lw, Registerer: reg, Logger: log, TLS: r.transport, ServerOptions: guarded,
			})
			if err != nil {
				return err
			}
			defer w.Close()
			if r.http != "" {
				lis, err := net.Listen("tcp", r.http)
				if err != nil {
					return fmt.Errorf("--http: %w", err)
				}
				srv := &http.Server{Handler: cluster.OpsHandler(reg, workerStatus(w), w.Err), ReadHeaderTimeout: 10 * time.Second}
				go func() { _ = srv.Serve(opsListener(lis, r.transport)) }()
				defer srv.Close()
				fmt.Fprintf(cmd.OutOrStdout(), "http %s\n", lis.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ready %s\n", w.Addr())
			select {
			case <-ctx.Done():
				return nil
			case <-w.Done():
				if err := w.Err(); err != nil {
					return err
				}
				return errors.New("worker stopped")
			}
		},
	}
	r.registerCoord(cmd)
	// Not the tablet servers' default port: a worker often runs beside one.
	r.addr = defaultWorkerAddr
	cmd.Flags().Lookup("addr").DefValue = defaultWorkerAddr
	wf.register(cmd, "", false, tempWorkerDir)
	return cmd
}

// devWorker puts a MapReduce worker on tabula dev's gRPC port (through
// cfg.RegisterServices), so that `tabula mr run --addr DEV` runs its tasks in
// the dev process, next to the data, rather than pulling every row into the
// command's own process. Its map outputs and spills go under --dir/mr unless
// --worker-dir says otherwise. --worker-slots 0 turns it off. It returns
// what stops the worker's attempts.
func devWorker(cfg *cluster.DevConfig, wf *workerFlags) (stop func(), err error) {
	return devWorkerWithMetrics(cfg, wf, nil)
}

// devWorkerWithMetrics is devWorker with the worker's metrics registered
// with reg (nil: none; tabula dev's registry is its own).
func devWorkerWithMetrics(cfg *cluster.DevConfig, wf *workerFlags, reg prometheus.Registerer) (stop func(), err error) {
	if wf.slots == 0 {
		return func() {}, nil
	}
	if wf.dir == "" && cfg.Dir != "" {
		// Checked here, so that a bad --dir is named as the user gave it,
		// not as a --worker-dir they never set.
		wf.dir = filepath.Join(cfg.Dir, "mr")
		if err := os.MkdirAll(wf.dir, 0o755); err != nil {
			return nil, fmt.Errorf("--dir: %w", err)
		}
	}
	lw, err := wf.config("worker-")
	if err != nil {
		return nil, err
	}
	lw.Name = remote.NewWorkerName("dev")
	lw.Logger = cfg.Logger
	if lw.Host == "" {
		lw.Host = remote.HostOf(cfg.Addr)
	}
	svc, err := remote.NewService(remote.ServiceConfig{Worker: lw, Registerer: reg, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	prev := cfg.RegisterServices
	cfg.RegisterServices = func(g *grpc.Server) {
		if prev != nil {
			prev(g)
		}
		svc.Register(g)
	}
	return func() { _ = svc.Close() }, nil
}

// tabletServerWorker is `tabula tabletserver --worker`: a MapReduce worker in
// the tablet server's process, on a port of its own (--worker-addr),
// registered in Consul like a `tabula worker`, its host the tablet server's
// so that the map tasks of the tablets served there run there.
type tabletServerWorker struct {
	enabled bool
	addr    string
	wf      workerFlags
}

func (t *tabletServerWorker) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&t.enabled, "worker", false, "also run a MapReduce worker in this process (see tabula worker)")
	f.StringVar(&t.addr, "worker-addr", "", "the worker's gRPC listen address (default: the tablet server's host, port picked)")
	t.wf.register(cmd, "worker-", false, tempWorkerDir)
}

// start starts the worker beside the tablet server at serverAddr, unless
// --worker is off; the worker stops with the returned function, and its
// Done tells of a lost registration.
func (t *tabletServerWorker) start(ctx context.Context, r *roleFlags, svc coord.Service, serverAddr string, reg prometheus.Registerer, log *slog.Logger) (*remote.Worker, error) {
	if !t.enabled {
		return nil, nil
	}
	r.tls.exportClientEnv()
	lw, err := t.wf.config("worker-")
	if err != nil {
		return nil, err
	}
	if lw.Host == "" {
		lw.Host = remote.HostOf(serverAddr)
	}
	lw.Logger = log
	// By default the worker listens where the server does, on a port of
	// its own, and is dialed at the host the server is known by
	// (--advertise-addr's, if given).
	addr, advertised := t.addr, ""
	serverHost, _, _ := net.SplitHostPort(serverAddr)
	if addr == "" {
		listenHost, _, _ := net.SplitHostPort(r.addr)
		addr = net.JoinHostPort(listenHost, "0")
	}
	if listenHost, _, err := net.SplitHostPort(addr); err == nil && advertise.Wildcard(listenHost) || t.addr == "" {
		advertised = net.JoinHostPort(serverHost, "0")
	}
	guarded, err := r.authConfig.WorkerServerOptions(log, reg)
	if err != nil {
		return nil, err
	}
	return remote.StartWorker(ctx, remote.WorkerConfig{
		Addr: addr, AdvertiseAddr: advertised, Coord: svc, SessionTTL: r.sessionTTL, LockDelay: r.lockDelay,
		Worker: lw, Registerer: reg, Logger: log, TLS: r.transport, ServerOptions: guarded,
	})
}

// workerStatus serves a worker's /status: who it is and how busy, as JSON.
func workerStatus(w *remote.Worker) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		svc := w.Service()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{
			"name": svc.Name(), "addr": w.Addr(), "host": svc.Host(), "slots": svc.Slots(), "running": svc.Running(),
		})
	})
}
