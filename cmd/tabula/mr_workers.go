package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/coord"
)

// mrWorkerFlags choose where `tabula mr run` runs its task attempts: on the
// workers registered in a cluster's Consul (--workers-consul), on workers at
// fixed addresses (--worker-addrs), or, by default, on the server --addr
// names when it hosts a worker (tabula dev does) and otherwise in the
// command's own process.
type mrWorkerFlags struct {
	addrs      []string
	consul     string
	consulAuth backendFlags // --workers-consul-token, --workers-consul-ca
	cluster    string
	minWorkers int
	wait       time.Duration
	inProcess  bool
	heartbeat  time.Duration
	lostAfter  time.Duration
	// pool is the remote workers' pool workers chose (nil: in-process):
	// its Workers, asked again during the job, bring in workers that
	// join after it started (mapreduce.Config.Discover).
	pool *remote.Pool
	// tls is what the workers are dialed with (the job's connection's
	// TLS; nil: plaintext).
	tls *tls.Config
	// token is the submitter's bearer token, sent to the workers: their
	// tasks read and write with it.
	token string
}

func (m *mrWorkerFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&m.addrs, "worker-addrs", nil, "run tasks on the tabula workers at these `addresses` (host:port,...)")
	f.StringVar(&m.consul, "workers-consul", "", "run tasks on the workers registered in this Consul agent (host:port) under --workers-cluster")
	f.StringVar(&m.cluster, "workers-cluster", coord.DefaultCluster, "cluster name of --workers-consul: the key prefix tabula/<name>/")
	f.StringVar(&m.consulAuth.consulToken, "workers-consul-token", "", "ACL token of --workers-consul (default $CONSUL_HTTP_TOKEN; @FILE reads it from a file)")
	f.StringVar(&m.consulAuth.consulCA, "workers-consul-ca", "", "speak HTTPS to --workers-consul, verifying it with these PEM CA certificates")
	f.IntVar(&m.minWorkers, "min-workers", 1, "with remote workers, wait until at least this many are up before starting")
	f.DurationVar(&m.wait, "workers-wait", 30*time.Second, "how long to wait for --min-workers")
	f.BoolVar(&m.inProcess, "in-process", false, "run every task in this process, even when --addr hosts a worker")
	f.DurationVar(&m.heartbeat, "worker-heartbeat", remote.DefaultHeartbeatInterval, "how often each remote worker is asked whether it lives")
	f.DurationVar(&m.lostAfter, "worker-lost-after", remote.DefaultLostAfter, "a remote worker silent this long is lost: its attempts are re-run elsewhere")
}

// workers returns the workers the flags choose, and what releases them;
// no workers (nil) means in-process ones. addr is the job's cluster
// address (--addr).
func (m *mrWorkerFlags) workers(ctx context.Context, addr string, log *slog.Logger) ([]mapreduce.Worker, func(), error) {
	noop := func() {}
	chosen := 0
	for _, set := range []bool{len(m.addrs) > 0, m.consul != "", m.inProcess} {
		if set {
			chosen++
		}
	}
	if chosen > 1 {
		return nil, noop, errors.New("--worker-addrs, --workers-consul and --in-process exclude each other")
	}
	if m.minWorkers < 1 {
		return nil, noop, fmt.Errorf("--min-workers: %d is below 1", m.minWorkers)
	}
	if m.heartbeat <= 0 || m.lostAfter < 2*m.heartbeat {
		return nil, noop, fmt.Errorf("--worker-lost-after (%v) must be at least twice --worker-heartbeat (%v), which must be positive", m.lostAfter, m.heartbeat)
	}
	opts := remote.PoolOptions{HeartbeatInterval: m.heartbeat, LostAfter: m.lostAfter, Logger: log, TLS: m.tls}
	if m.token != "" {
		opts.DialOptions = append(opts.DialOptions, grpc.WithPerRPCCredentials(auth.BearerToken(m.token)))
	}
	var pool *remote.Pool
	release := func() {}
	switch {
	case m.inProcess:
		return nil, noop, nil
	case m.consul != "":
		token, err := m.consulAuth.token()
		if err != nil {
			return nil, noop, fmt.Errorf("--workers-consul-token: %w", err)
		}
		svc, err := coord.NewConsul(coord.ConsulConfig{Address: m.consul, Prefix: coord.ClusterPrefix(m.cluster), Token: token, CAFile: m.consulAuth.consulCA})
		if err != nil {
			return nil, noop, fmt.Errorf("--workers-consul: %w", err)
		}
		if pool, err = remote.NewConsulPool(svc, opts); err != nil {
			svc.Close()
			return nil, noop, fmt.Errorf("--workers-consul: %w", err)
		}
		release = func() { pool.Close(); svc.Close() }
	case len(m.addrs) > 0:
		var err error
		if pool, err = remote.NewStaticPool(m.addrs, opts); err != nil {
			return nil, noop, fmt.Errorf("--worker-addrs: %w", err)
		}
		release = func() { pool.Close() }
	default:
		if addr == "" || !hostsWorker(ctx, addr, m.tls, opts.DialOptions...) {
			return nil, noop, nil
		}
		var err error
		if pool, err = remote.NewStaticPool([]string{addr}, opts); err != nil {
			return nil, noop, err
		}
		release = func() { pool.Close() }
		log.Info("running tasks on the worker of the server", "addr", addr)
	}
	ws, err := m.await(ctx, pool)
	if err != nil {
		release()
		return nil, noop, err
	}
	m.pool = pool
	return ws, release, nil
}

func (m *mrWorkerFlags) await(ctx context.Context, pool *remote.Pool) ([]mapreduce.Worker, error) {
	wctx, cancel := context.WithTimeout(ctx, m.wait)
	defer cancel()
	ws, err := pool.WaitWorkers(wctx, m.minWorkers)
	if err != nil {
		return nil, fmt.Errorf("--min-workers: %w (are `tabula worker`s running? see --workers-wait)", err)
	}
	return ws, nil
}

// hostsWorker reports whether the server at addr serves the worker
// protocol (tabula dev does): a tablet server without one answers
// Unimplemented.
func hostsWorker(ctx context.Context, addr string, tc *tls.Config, opts ...grpc.DialOption) bool {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{tlsconfig.DialOption(tc)}, opts...)...)
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = workerpb.NewWorkerClient(conn).Heartbeat(ctx, &workerpb.HeartbeatRequest{})
	return err == nil
}
