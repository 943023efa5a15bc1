package remote

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// chunkSize is the size of the chunks a partition is streamed in: large
// enough that per-message cost is small, well under gRPC's 4 MiB limit.
const chunkSize = 256 << 10

// ServiceConfig configures a worker service.
type ServiceConfig struct {
	// Worker configures the in-process worker that runs the attempts; its
	// Name must be unique per process start (NewWorkerName), and its
	// Fetcher is set by the server (map outputs on other workers are
	// fetched over the worker protocol, this worker's own directly).
	Worker mapreduce.LocalWorkerConfig
	// Registerer receives the worker's metrics; nil: none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// TLS is the client config the worker fetches map output from other
	// workers with; nil is plaintext.
	TLS *tls.Config
}

// Service is the worker service: it runs the attempts coordinators send on
// an in-process mapreduce.LocalWorker, at most Slots at once (the others
// wait for a slot), and serves the map outputs that worker keeps on its
// local disk. Register adds it to a gRPC server.
type Service struct {
	workerpb.UnimplementedWorkerServer

	name, host string
	slots      int
	local      *mapreduce.LocalWorker
	fetch      *peerFetcher
	log        *slog.Logger
	metrics    *serverMetrics
	sem        chan struct{}

	mu      sync.Mutex
	running map[string]context.CancelFunc // by attempt id
	// jobs holds the token of every job an attempt of which this worker
	// admitted (JobSpec.Token), until the job is forgotten.
	jobs map[string]string
}

// JobTokenKey is the gRPC metadata key of the job token
// (mapreduce.JobSpec.Token) on FetchPartition, KillAttempt and ForgetJob:
// a worker serves a job's map outputs, kills its attempts and forgets it
// only for a caller presenting the token the job's attempts brought.
const JobTokenKey = "tabula-job-token"

// NewService returns the service of a worker configured by cfg.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Worker.Name == "" {
		return nil, errors.New("remote: worker needs a name")
	}
	if cfg.Worker.Slots <= 0 {
		cfg.Worker.Slots = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		name: cfg.Worker.Name, slots: cfg.Worker.Slots, log: cfg.Logger.With("worker", cfg.Worker.Name),
		sem: make(chan struct{}, cfg.Worker.Slots), running: map[string]context.CancelFunc{}, jobs: map[string]string{},
	}
	m, err := newServerMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.fetch = &peerFetcher{tls: cfg.TLS, self: s.name, book: newAddrBook(), conns: map[string]*grpc.ClientConn{}, metrics: m}
	cfg.Worker.Fetcher = s.fetch
	if cfg.Worker.Logger == nil {
		cfg.Worker.Logger = s.log
	}
	s.local = mapreduce.NewLocalWorker(cfg.Worker)
	s.fetch.local = s.local
	s.host = s.local.Host()
	return s, nil
}

// Name is the worker's name.
func (s *Service) Name() string { return s.name }

// Host is the worker's host.
func (s *Service) Host() string { return s.host }

// Slots is how many attempts run at once.
func (s *Service) Slots() int { return s.slots }

// Running returns how many attempts run or wait for a slot.
func (s *Service) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// KillAll kills every attempt: what a worker does when it learns it was
// declared lost, so that nothing it still runs competes with the re-runs.
func (s *Service) KillAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.running {
		cancel()
	}
}

// Close kills every attempt and closes the connections to other workers.
func (s *Service) Close() error {
	s.KillAll()
	return s.fetch.close()
}

// RunTask implements workerpb.WorkerServer.
func (s *Service) RunTask(req *workerpb.RunTaskRequest, stream grpc.ServerStreamingServer[workerpb.RunTaskEvent]) error {
	var t mapreduce.Task
	if err := json.Unmarshal(req.Task, &t); err != nil {
		return status.Errorf(codes.InvalidArgument, "task: not a JSON mapreduce.Task: %v", err)
	}
	if got := t.Attempt.String(); got != req.Attempt {
		return status.Errorf(codes.InvalidArgument, "attempt: %q does not match the task's attempt %q", req.Attempt, got)
	}
	if err := s.admitJob(t.Job, t.Attempt); err != nil {
		return err
	}
	interval := time.Duration(req.HeartbeatIntervalMs) * time.Millisecond
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	for name, addr := range req.WorkerAddrs {
		s.fetch.book.add(name, addr)
	}
	ctx, cancel := context.WithCancel(asSubmitter(stream.Context(), t.Job.Token))
	defer cancel()
	s.mu.Lock()
	if _, dup := s.running[req.Attempt]; dup {
		s.mu.Unlock()
		return status.Errorf(codes.AlreadyExists, "attempt %s already runs on worker %s", req.Attempt, s.name)
	}
	s.running[req.Attempt] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, req.Attempt)
		s.mu.Unlock()
	}()
	log := s.log.With("attempt", req.Attempt)
	tick := time.NewTicker(interval)
	defer tick.Stop()

	// Wait for a slot, telling the coordinator we live meanwhile.
	for acquired := false; !acquired; {
		select {
		case s.sem <- struct{}{}:
			acquired = true
		case <-tick.C:
			if err := stream.Send(&workerpb.RunTaskEvent{Event: &workerpb.RunTaskEvent_Heartbeat{Heartbeat: &workerpb.Heartbeat{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	defer func() { <-s.sem }()
	if err := stream.Send(&workerpb.RunTaskEvent{Event: &workerpb.RunTaskEvent_Started{Started: &workerpb.Started{Worker: s.name}}}); err != nil {
		return err
	}
	kind := t.Attempt.Kind.String()
	s.metrics.running.WithLabelValues(kind).Inc()
	defer s.metrics.running.WithLabelValues(kind).Dec()
	if t.Split != nil {
		log.Info("attempt started", "table", t.Split.Table, "start", string(t.Split.Start), "end", string(t.Split.End), "file", t.Split.File)
	} else {
		log.Info("attempt started", "partition", t.Partition, "map_outputs", len(t.MapOutputs))
	}
	start := time.Now()

	var (
		pmu      sync.Mutex
		counters mapreduce.Counters
		fresh    bool
	)
	progress := func(c mapreduce.Counters) {
		pmu.Lock()
		counters, fresh = c.Clone(), true
		pmu.Unlock()
	}
	type outcome struct {
		res mapreduce.TaskResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.local.RunTask(ctx, t, progress)
		done <- outcome{res, err}
	}()
	for {
		select {
		case <-tick.C:
			hb := &workerpb.Heartbeat{}
			pmu.Lock()
			if fresh {
				hb.Counters, _ = json.Marshal(counters)
				fresh = false
			}
			pmu.Unlock()
			if err := stream.Send(&workerpb.RunTaskEvent{Event: &workerpb.RunTaskEvent_Heartbeat{Heartbeat: hb}}); err != nil {
				// The coordinator is gone: the attempt is killed, and its
				// end is waited for so that it leaves nothing running.
				cancel()
				<-done
				s.metrics.attempts.WithLabelValues(kind, "killed").Inc()
				log.Info("attempt killed: coordinator gone", "err", err)
				return err
			}
		case o := <-done:
			fin := &workerpb.Finished{}
			outcomeLabel := "succeeded"
			switch {
			case o.err == nil:
				fin.Result, _ = json.Marshal(o.res)
			case ctx.Err() != nil:
				fin.Error, fin.Killed, outcomeLabel = o.err.Error(), true, "killed"
			default:
				fin.Error, outcomeLabel = o.err.Error(), "failed"
				var fe *mapreduce.FetchError
				if errors.As(o.err, &fe) {
					fin.FetchFailure = &workerpb.FetchFailure{Map: int32(fe.Map), Worker: fe.Worker}
				}
			}
			s.metrics.attempts.WithLabelValues(kind, outcomeLabel).Inc()
			if o.err != nil {
				log.Warn("attempt "+outcomeLabel, "err", o.err, "took", time.Since(start))
			} else {
				log.Info("attempt succeeded", "took", time.Since(start))
			}
			return stream.Send(&workerpb.RunTaskEvent{Event: &workerpb.RunTaskEvent_Finished{Finished: fin}})
		}
	}
}

// admitJob records the token of a job's first attempt here, and refuses
// an attempt of a known job that brings another token (PERMISSION_DENIED)
// or a task without one (INVALID_ARGUMENT).
func (s *Service) admitJob(job mapreduce.JobSpec, a mapreduce.AttemptID) error {
	if job.ID != a.Job {
		return status.Errorf(codes.InvalidArgument, "task: job %q does not match the attempt's job %q", job.ID, a.Job)
	}
	if job.Token == "" {
		return status.Errorf(codes.InvalidArgument, "task: job %s has no job token (JobSpec.Token; coordinators issue one per run)", job.ID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	known, ok := s.jobs[job.ID]
	if !ok {
		s.jobs[job.ID] = job.Token
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(known), []byte(job.Token)) != 1 {
		s.log.Warn("attempt refused: not the job's token", "audit", "refused", "attempt", a.String())
		return status.Errorf(codes.PermissionDenied, "attempt %s: the task's job token is not job %s's", a, job.ID)
	}
	return nil
}

// checkJobToken checks the job token a call presents (JobTokenKey) for
// job: known reports whether this worker admitted an attempt of the job
// (an unknown job has nothing here); err is PERMISSION_DENIED when the
// token is missing or not the job's.
func (s *Service) checkJobToken(ctx context.Context, method, job string) (known bool, err error) {
	s.mu.Lock()
	want, known := s.jobs[job]
	s.mu.Unlock()
	if !known {
		return false, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(JobTokenKey)
	if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(want)) != 1 {
		s.log.Warn("request refused: no or wrong job token", "audit", "refused", "method", method, "job", job, "token_given", len(got) > 0)
		return true, status.Errorf(codes.PermissionDenied, "%s of job %s needs the job's token (%s metadata): only its coordinator and its reducers hold it", method, job, JobTokenKey)
	}
	return true, nil
}

// KillAttempt implements workerpb.WorkerServer. A running attempt is
// killed only for a caller with its job's token.
func (s *Service) KillAttempt(ctx context.Context, req *workerpb.KillAttemptRequest) (*workerpb.KillAttemptResponse, error) {
	a, err := mapreduce.ParseAttemptID(req.Attempt)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "attempt: %v", err)
	}
	if _, err := s.checkJobToken(ctx, "KillAttempt", a.Job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	cancel, ok := s.running[req.Attempt]
	s.mu.Unlock()
	if ok {
		cancel()
		s.log.Info("attempt kill requested", "attempt", req.Attempt)
	}
	return &workerpb.KillAttemptResponse{WasRunning: ok}, nil
}

// FetchPartition implements workerpb.WorkerServer: a job's map output only
// for a caller with the job's token (its coordinator and reducers).
func (s *Service) FetchPartition(req *workerpb.FetchPartitionRequest, stream grpc.ServerStreamingServer[workerpb.Chunk]) error {
	a, err := mapreduce.ParseAttemptID(req.Attempt)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "attempt: %v", err)
	}
	if a.Kind != mapreduce.MapTask {
		return status.Errorf(codes.InvalidArgument, "attempt: %s is not a map attempt", req.Attempt)
	}
	if req.Partition < 0 {
		return status.Errorf(codes.InvalidArgument, "partition: %d is negative", req.Partition)
	}
	if req.Offset < 0 {
		return status.Errorf(codes.InvalidArgument, "offset: %d is negative", req.Offset)
	}
	known, err := s.checkJobToken(stream.Context(), "FetchPartition", a.Job)
	if err != nil {
		return err
	}
	if !known {
		return status.Errorf(codes.NotFound, "%v: no attempt of job %s ran on worker %s", mapreduce.ErrNoMapOutput, a.Job, s.name)
	}
	rc, err := s.local.FetchPartition(stream.Context(), a, int(req.Partition))
	if err != nil {
		if errors.Is(err, mapreduce.ErrNoMapOutput) {
			return status.Error(codes.NotFound, err.Error())
		}
		return status.Error(codes.Internal, err.Error())
	}
	defer rc.Close()
	if req.Offset > 0 {
		if sk, ok := rc.(io.Seeker); ok {
			var size int64
			if size, err = sk.Seek(0, io.SeekEnd); err == nil {
				if req.Offset > size {
					return status.Errorf(codes.OutOfRange, "offset: %d is past the partition's end (%d bytes)", req.Offset, size)
				}
				_, err = sk.Seek(req.Offset, io.SeekStart)
			}
		} else {
			_, err = io.CopyN(io.Discard, rc, req.Offset)
		}
		if err != nil {
			return status.Errorf(codes.OutOfRange, "offset: %d is past the partition's end: %v", req.Offset, err)
		}
	}
	buf := make([]byte, chunkSize)
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if serr := stream.Send(&workerpb.Chunk{Data: buf[:n]}); serr != nil {
				return serr
			}
			s.metrics.served.Add(float64(n))
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Internal, "reading %s partition %d: %v", req.Attempt, req.Partition, err)
		}
	}
}

// Heartbeat implements workerpb.WorkerServer.
func (s *Service) Heartbeat(context.Context, *workerpb.HeartbeatRequest) (*workerpb.HeartbeatResponse, error) {
	return &workerpb.HeartbeatResponse{Worker: s.name, Host: s.host, Slots: int32(s.slots), Running: int32(s.Running())}, nil
}

// ForgetJob implements workerpb.WorkerServer: only for a caller with the
// job's token; a job this worker ran nothing of holds nothing to forget.
func (s *Service) ForgetJob(ctx context.Context, req *workerpb.ForgetJobRequest) (*workerpb.ForgetJobResponse, error) {
	if req.Job == "" {
		return nil, status.Error(codes.InvalidArgument, "job: empty")
	}
	known, err := s.checkJobToken(ctx, "ForgetJob", req.Job)
	if err != nil {
		return nil, err
	}
	if !known {
		return &workerpb.ForgetJobResponse{}, nil
	}
	if err := s.local.Cleanup(ctx, req.Job); err != nil {
		return nil, status.Errorf(codes.Internal, "cleanup of job %s: %v", req.Job, err)
	}
	s.mu.Lock()
	delete(s.jobs, req.Job)
	s.mu.Unlock()
	s.log.Info("job forgotten", "job", req.Job)
	return &workerpb.ForgetJobResponse{}, nil
}

// peerFetcher is the server's mapreduce.Fetcher: its own map outputs are
// read from the local worker, others' fetched from their workers at the
// addresses the reduce task carried.
type peerFetcher struct {
	tls     *tls.Config // dials other workers (nil: plaintext)
	self    string
	local   *mapreduce.LocalWorker
	book    *addrBook
	metrics *serverMetrics

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (f *peerFetcher) Fetch(ctx context.Context, worker string, a mapreduce.AttemptID, partition int) (io.ReadCloser, error) {
	if worker == f.self {
		return f.local.FetchPartition(ctx, a, partition)
	}
	addr, ok := f.book.lookup(worker)
	if !ok {
		return nil, fmt.Errorf("%w: worker %s has no known address", mapreduce.ErrNoMapOutput, worker)
	}
	conn, err := f.conn(addr)
	if err != nil {
		return nil, err
	}
	return openFetch(ctx, workerpb.NewWorkerClient(conn), worker, a, partition, func(n int) { f.metrics.fetched.Add(float64(n)) })
}

func (f *peerFetcher) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, tlsconfig.DialOption(f.tls))
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

func (f *peerFetcher) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for c := range maps.Values(f.conns) {
		errs = append(errs, c.Close())
	}
	f.conns = map[string]*grpc.ClientConn{}
	return errors.Join(errs...)
}

// serverMetrics are a worker's Prometheus metrics.
type serverMetrics struct {
	running         *prometheus.GaugeVec
	attempts        *prometheus.CounterVec
	served, fetched prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer, s *Service) (*serverMetrics, error) {
	m := &serverMetrics{
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tabula", Subsystem: "mr_worker", Name: "attempts_running",
			Help: "Task attempts running on this worker, by kind (m, r).",
		}, []string{"kind"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tabula", Subsystem: "mr_worker", Name: "attempts_total",
			Help: "Task attempts ended on this worker, by kind (m, r) and outcome (succeeded, failed, killed).",
		}, []string{"kind", "outcome"}),
		served: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tabula", Subsystem: "mr_worker", Name: "served_bytes_total",
			Help: "Map output bytes this worker served to reducers.",
		}),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tabula", Subsystem: "mr_worker", Name: "fetched_bytes_total",
			Help: "Map output bytes this worker's reducers fetched from other workers.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	slots := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tabula", Subsystem: "mr_worker", Name: "slots",
		Help: "Attempts this worker runs at once.",
	}, func() float64 { return float64(s.slots) })
	for _, c := range []prometheus.Collector{m.running, m.attempts, m.served, m.fetched, slots} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("remote: registering metrics: %w", err)
		}
	}
	return m, nil
}

// asSubmitter returns ctx whose outgoing calls carry the bearer token the
// task came with (the submitter's, which the coordinator sends with every
// call to its workers) and the job's token: a task reads and writes
// tables, and fetches other workers' map outputs, with its submitter's
// rights, checked by the servers it calls, and proves to the workers it
// fetches from that it is one of the job's. Whatever else the worker's own
// server put in the outgoing metadata (a guard's forwarding statement) is
// not the task's and is dropped.
func asSubmitter(ctx context.Context, jobToken string) context.Context {
	out := metadata.Pairs(JobTokenKey, jobToken)
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		out.Set("authorization", v[0])
	}
	return metadata.NewOutgoingContext(ctx, out)
}
