package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tabuladb/tabula/internal/advertise"
	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/coord"
)

// Register adds the service to a gRPC server (a worker's own, a tablet
// server's, or tabula dev's).
func (s *Service) Register(g *grpc.Server) { workerpb.RegisterWorkerServer(g, s) }

// NewWorkerName returns a name for a worker serving at addr that no other
// worker process has had: the address plus a random suffix.
func NewWorkerName(addr string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return addr + "/" + hex.EncodeToString(b[:])
}

// HostOf is the host part of addr, or the machine's name when addr's host
// is empty or unspecified (0.0.0.0, ::): what a worker matches against the
// tablet servers' hosts for locality.
func HostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			return host
		}
	}
	h, _ := os.Hostname()
	return h
}

// WorkerConfig configures a worker process's service (StartWorker).
type WorkerConfig struct {
	// Addr is the gRPC listen address (port 0 picks one).
	Addr string
	// AdvertiseAddr is the address the worker registers and is dialed at
	// when not the listener's: host[:port], a missing or 0 port taking
	// the listener's (advertise.Addr). Required when Addr is a wildcard.
	AdvertiseAddr string
	// Coord, when set, is the cluster's lock service (with the cluster's
	// prefix): the worker registers under PrefixWorkers for as long as it
	// runs. Without it, coordinators must be given its address.
	Coord coord.Service
	// SessionTTL and LockDelay configure the registration's session;
	// zero takes the service's defaults.
	SessionTTL, LockDelay time.Duration
	// Worker configures the attempts' execution (Dir, Slots, SortMemory,
	// Host…); Name and Host default to NewWorkerName and HostOf of the
	// listen address.
	Worker     mapreduce.LocalWorkerConfig
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// TLS secures the worker's port (TLS.Server) and its calls to other
	// workers for map output (TLS.Client); the zero value is plaintext.
	TLS tlsconfig.Role
	// ServerOptions are added to the worker's gRPC server (the guard's
	// interceptors when authentication is on).
	ServerOptions []grpc.ServerOption
}

// Worker is a running worker process's service: a gRPC server with the
// worker service and health, registered in the lock service when
// configured. It stops by itself (Done) when its registration is lost:
// coordinators then count it dead and re-run its work, so it kills its
// attempts rather than compete with the re-runs.
type Worker struct {
	svc  *Service
	lis  net.Listener
	addr string // advertised
	grpc *grpc.Server
	reg  *Registered
	log  *slog.Logger

	once sync.Once
	done chan struct{}
	err  error
}

// StartWorker starts a worker and returns once it serves and, with a lock
// service, is registered.
func StartWorker(ctx context.Context, cfg WorkerConfig) (_ *Worker, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{done: make(chan struct{}), log: cfg.Logger}
	defer func() {
		if err != nil {
			// Through once: the gRPC server may already be serving,
			// and its goroutine calls stop when shutdown stops it.
			w.once.Do(func() {
				w.err = err
				w.shutdown()
				close(w.done)
			})
		}
	}()
	if w.lis, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	if w.addr, err = advertise.Addr(cfg.AdvertiseAddr, w.lis.Addr()); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	addr := w.addr
	if cfg.Worker.Name == "" {
		cfg.Worker.Name = NewWorkerName(addr)
	}
	if cfg.Worker.Host == "" {
		cfg.Worker.Host = HostOf(addr)
	}
	if cfg.Worker.Dir != "" {
		if err := os.MkdirAll(cfg.Worker.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("remote: worker directory: %w", err)
		}
	}
	w.log = cfg.Logger.With("worker", cfg.Worker.Name)
	if w.svc, err = NewService(ServiceConfig{Worker: cfg.Worker, Registerer: cfg.Registerer, Logger: cfg.Logger, TLS: cfg.TLS.Client}); err != nil {
		return nil, err
	}
	w.grpc = grpc.NewServer(append(tlsconfig.ServerOptions(cfg.TLS.Server), cfg.ServerOptions...)...)
	tlsconfig.WarnPlaintext(w.log, "worker", addr, cfg.TLS.Server)
	w.svc.Register(w.grpc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(w.grpc, hs)
	go func() {
		if err := w.grpc.Serve(w.lis); err != nil {
			w.stop(fmt.Errorf("remote: serving gRPC: %w", err))
		}
	}()
	if cfg.Coord != nil {
		reg := Registration{Name: w.svc.Name(), Addr: addr, Host: w.svc.Host(), Slots: w.svc.Slots()}
		if w.reg, err = Register(ctx, cfg.Coord, reg, RegisterOptions{TTL: cfg.SessionTTL, LockDelay: cfg.LockDelay}); err != nil {
			return nil, err
		}
		go func() {
			select {
			case <-w.reg.Lost():
				w.stop(errors.New("remote: worker registration lost (session lapsed or key deleted): coordinators count this worker dead"))
			case <-w.done:
			}
		}()
	}
	w.log.Info("worker started", "addr", addr, "host", w.svc.Host(), "slots", w.svc.Slots(), "registered", cfg.Coord != nil)
	return w, nil
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.svc.Name() }

// Addr is the gRPC address coordinators dial.
func (w *Worker) Addr() string { return w.addr }

// Service is the worker's service.
func (w *Worker) Service() *Service { return w.svc }

// Done is closed when the worker stopped (Close, or by itself); Err then
// says why it stopped by itself.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err is why the worker stopped by itself; nil after Close or while it runs.
func (w *Worker) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

func (w *Worker) stop(err error) {
	w.once.Do(func() {
		w.err = err
		w.log.Error("worker stopping", "err", err)
		w.shutdown()
		close(w.done)
	})
}

// Close stops the worker: its attempts are killed and it unregisters at
// once, so coordinators re-run its work without waiting for a timeout.
func (w *Worker) Close() error {
	w.once.Do(func() {
		w.shutdown()
		close(w.done)
	})
	return nil
}

func (w *Worker) shutdown() {
	if w.reg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.reg.Close(ctx)
		cancel()
	}
	if w.svc != nil {
		_ = w.svc.Close()
	}
	if w.grpc != nil {
		w.grpc.Stop()
	}
	if w.lis != nil {
		_ = w.lis.Close()
	}
}
