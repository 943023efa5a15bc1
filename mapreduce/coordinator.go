package mapreduce

// The coordinator: Run checks the input and output, splits the input,
// and drives the scheduler (package sched) with the workers' reports.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/tabuladb/tabula/mapreduce/sched"
	"github.com/tabuladb/tabula/storage/client"
)

// Run runs job to its end and returns its counters. The input and output
// are checked before any task starts (a missing table, an invalid filter
// or script, an unwritable output directory fail here, having written
// nothing). A task that fails MaxAttempts times fails the job with an
// error naming the task and its last error; a failed or cancelled job
// commits nothing to a file output.
func Run(ctx context.Context, job *Job, cfg Config) (*Result, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LocalWorkers <= 0 {
		cfg.LocalWorkers = 4
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	if cfg.BackupAfter <= 0 {
		cfg.BackupAfter = 5 * time.Second
	}
	started := time.Now()
	spec := JobSpec{
		ID:    newJobID(job.Name),
		Token: newJobToken(),
		Name:  job.Name, Conf: job.Conf,
		Addr:    cfg.Addr,
		Project: cfg.Client.Project, Instance: cfg.Client.Instance,
		ReadTime: started.UnixMilli() * 1000, // Bigtable's millisecond granularity
		Reducers: job.Reducers,
	}
	if len(cfg.Workers) > 0 && job.Name != "" {
		if _, ok := Lookup(job.Name); !ok {
			return nil, fmt.Errorf("job %q is not registered: workers in other processes cannot build it", job.Name)
		}
	} else if len(cfg.Workers) > 0 {
		if _, ok := cfg.Workers[0].(*LocalWorker); !ok {
			return nil, errors.New("an unnamed job runs only on in-process workers: register it (mapreduce.Register) to use remote ones")
		}
	}
	pool := NewClientPool(cfg.Client)
	defer pool.Close()

	// Check the input and output and split the input, before any task.
	var splits []Split
	switch in := job.Input.(type) {
	case *TableInput:
		c, err := pool.Get(addrOr(in.Addr, spec.Addr))
		if err != nil {
			return nil, err
		}
		if err := checkTableInput(ctx, c, in, spec.ReadTime); err != nil {
			return nil, err
		}
		if splits, err = tableSplits(ctx, c, in); err != nil {
			return nil, err
		}
		if in.NoReadTime {
			spec.ReadTime = 0
		}
	case *FileInput:
		var err error
		if splits, err = fileSplits(ctx, in); err != nil {
			return nil, err
		}
	}
	spec.Maps = len(splits)
	switch p := job.Partition.(type) {
	case TotalOrderPartitioner:
		spec.PartitionBounds = p.Bounds
	case *TotalOrderPartitioner:
		spec.PartitionBounds = p.Bounds
	}
	switch out := job.Output.(type) {
	case *TableOutput:
		c, err := pool.Get(addrOr(out.Addr, spec.Addr))
		if err != nil {
			return nil, err
		}
		if _, err := c.Tablets(ctx, out.Table); err != nil {
			return nil, fmt.Errorf("output table %q: %w", out.Table, err)
		}
	case *FileOutput:
		if err := checkFileOutput(ctx, out, spec.ID); err != nil {
			return nil, err
		}
	}
	if job.Check != nil {
		if err := job.Check(ctx, func(addr string) (*client.Client, error) { return pool.Get(addrOr(addr, spec.Addr)) }); err != nil {
			return nil, err
		}
	}
	if job.Reducers == 0 {
		spec.Timestamp = job.Timestamp
		if spec.Timestamp == 0 {
			spec.Timestamp = started.UnixMilli() * 1000
		}
	}

	workers := cfg.Workers
	if len(workers) == 0 {
		dir := cfg.TempDir
		if dir == "" {
			dir = os.TempDir()
		}
		fetcher := &workerFetcher{workers: map[string]Worker{}}
		host, _ := os.Hostname()
		for i := range cfg.LocalWorkers {
			w := NewLocalWorker(LocalWorkerConfig{
				Name: fmt.Sprintf("local-%d", i), Host: host, Slots: 1, Dir: dir,
				SortMemory: cfg.SortMemory, Fetcher: fetcher, Clients: pool.Get, Logger: cfg.Logger,
				Resolve: func(s JobSpec) (*Job, error) {
					if s.ID == spec.ID {
						return job, nil
					}
					return Build(s.Name, s.Conf)
				},
			})
			fetcher.workers[w.Name()] = w
			workers = append(workers, w)
		}
	}
	co := &coordinator{
		cfg: cfg, job: job, spec: spec, splits: splits, workers: map[string]Worker{},
		started: started, events: make(chan event, 64), attempts: map[sched.AttemptID]*runningAttempt{},
		committed: map[sched.TaskID]TaskResult{}, committedWorker: map[sched.TaskID]string{},
	}
	for _, w := range workers {
		co.workers[w.Name()] = w
	}
	hosts := make([]string, len(splits))
	for i, s := range splits {
		hosts[i] = s.Host
	}
	co.s = sched.New(sched.Config{
		MapHosts: hosts, Reducers: job.Reducers, MaxAttempts: cfg.MaxAttempts,
		Speculation: !cfg.NoSpeculation, MinBackupAge: cfg.BackupAfter, WaitForWorkers: cfg.WaitForWorkers || cfg.Discover != nil,
	})
	// Every call to a worker (RunTask carries the token in the task;
	// cleanup and kills in their context) proves the job's token.
	res, err := co.run(ContextWithJobToken(ctx, spec.Token))
	if cfg.Metrics != nil {
		outcome := "succeeded"
		if err != nil {
			outcome = "failed"
		}
		cfg.Metrics.Jobs.WithLabelValues(job.Name, outcome).Inc()
		if res != nil {
			for k, v := range res.Counters {
				cfg.Metrics.Counters.WithLabelValues(k).Add(float64(v))
			}
		}
	}
	return res, err
}

func newJobID(name string) string {
	if name == "" {
		name = "job"
	}
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s_%s_%s", name, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b[:]))
}

// newJobToken returns a fresh job token (JobSpec.Token): 256 random bits.
func newJobToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type jobTokenKey struct{}

// ContextWithJobToken returns ctx carrying a job's token, which the remote
// workers' clients present on the calls they make for the job
// (FetchPartition, KillAttempt, ForgetJob). Run sets it on the context of
// every call to its workers.
func ContextWithJobToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, jobTokenKey{}, token)
}

// JobTokenFromContext returns the job token ContextWithJobToken stored, ""
// if none.
func JobTokenFromContext(ctx context.Context) string {
	s, _ := ctx.Value(jobTokenKey{}).(string)
	return s
}

// workerFetcher fetches from the coordinator's in-process workers by name.
type workerFetcher struct {
	workers map[string]Worker
}

func (f *workerFetcher) Fetch(ctx context.Context, worker string, a AttemptID, partition int) (io.ReadCloser, error) {
	w, ok := f.workers[worker]
	if !ok {
		return nil, fmt.Errorf("%w: unknown worker %s", ErrNoMapOutput, worker)
	}
	return w.FetchPartition(ctx, a, partition)
}

// NewLocalWorkers returns n in-process workers (named local-0, …) that
// fetch map outputs from each other; cfg's Name and Fetcher are set for
// each.
func NewLocalWorkers(n int, cfg LocalWorkerConfig) []*LocalWorker {
	fetcher := &workerFetcher{workers: map[string]Worker{}}
	var out []*LocalWorker
	for i := range n {
		c := cfg
		c.Name, c.Fetcher = fmt.Sprintf("local-%d", i), fetcher
		w := NewLocalWorker(c)
		fetcher.workers[c.Name] = w
		out = append(out, w)
	}
	return out
}

type event struct {
	ev     sched.Event
	result *TaskResult // AttemptSucceeded
	// lost is the worker a WorkerLost event is about: a stale event about
	// a worker since replaced by a new member of its name is dropped.
	lost Worker
}

func isLost(w Worker) bool {
	select {
	case <-w.Lost():
		return true
	default:
		return false
	}
}

// workerOf returns the worker an attempt ran on, from its report.
func (co *coordinator) workerOf(a sched.AttemptID) Worker {
	return co.workers[co.attemptWorker[a]]
}

type runningAttempt struct {
	id       AttemptID
	worker   string
	cancel   context.CancelFunc
	mu       sync.Mutex
	progress Counters
}

type coordinator struct {
	cfg     Config
	job     *Job
	spec    JobSpec
	splits  []Split
	workers map[string]Worker
	s       *sched.Scheduler
	started time.Time
	events  chan event
	wg      sync.WaitGroup

	mu              sync.Mutex // guards attempts' map (progress reads it)
	attempts        map[sched.AttemptID]*runningAttempt
	results         map[sched.AttemptID]TaskResult // succeeded, awaiting Commit/Discard
	committed       map[sched.TaskID]TaskResult
	committedWorker map[sched.TaskID]string
	timestampSet    bool
	attemptWorker   map[sched.AttemptID]string
	starts          [2]int // attempts started, by kind
}

func (co *coordinator) attemptID(a sched.AttemptID) AttemptID {
	k := MapTask
	if a.Task.Kind == sched.Reduce {
		k = ReduceTask
	}
	return AttemptID{Job: co.spec.ID, Kind: k, Task: a.Task.Index, Attempt: a.Attempt}
}

func (co *coordinator) run(ctx context.Context) (*Result, error) {
	runCtx, cancelAll := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAll()
	co.results = map[sched.AttemptID]TaskResult{}
	co.attemptWorker = map[sched.AttemptID]string{}
	log := co.cfg.Logger.With("job", co.spec.ID)
	log.Info("job started", "maps", len(co.splits), "reducers", co.job.Reducers, "workers", len(co.workers))
	watchDone := make(chan struct{})
	defer close(watchDone)
	watch := func(w Worker) {
		go func() {
			select {
			case <-w.Lost():
				select {
				case co.events <- event{ev: sched.WorkerLost{Name: w.Name()}, lost: w}:
				case <-watchDone:
				}
			case <-watchDone:
			}
		}()
	}
	for _, w := range co.workers {
		watch(w)
	}
	var acts []sched.Action
	now := time.Now()
	for _, name := range sortedNames(co.workers) {
		w := co.workers[name]
		acts = append(acts, co.s.Step(now, sched.WorkerJoined{Name: w.Name(), Host: w.Host(), Slots: w.Slots()})...)
	}
	if len(co.workers) == 0 {
		return nil, errors.New("no workers to run the job")
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	progress := time.NewTicker(co.cfg.ProgressInterval)
	defer progress.Stop()
	var jobErr error
	done := false
	for {
		for _, a := range acts {
			switch a := a.(type) {
			case sched.Start:
				co.start(runCtx, a)
			case sched.Kill:
				co.mu.Lock()
				if ra := co.attempts[a.Attempt]; ra != nil {
					ra.cancel()
				}
				co.mu.Unlock()
				log.Info("attempt killed", "attempt", co.attemptID(a.Attempt), "reason", a.Reason)
				co.metricAttempt(a.Attempt.Task.Kind, "killed")
			case sched.Commit:
				co.committed[a.Attempt.Task] = co.results[a.Attempt]
				co.committedWorker[a.Attempt.Task] = a.Worker
				delete(co.results, a.Attempt)
			case sched.Discard:
				delete(co.results, a.Attempt)
			case sched.JobDone:
				done = true
			case sched.JobFailed:
				done, jobErr = true, a.Err
			}
		}
		acts = nil
		if done {
			break
		}
		select {
		case ev := <-co.events:
			if ev.lost != nil && co.workers[ev.lost.Name()] != ev.lost {
				break // that worker was already replaced (and reported lost)
			}
			if s, ok := ev.ev.(sched.AttemptSucceeded); ok && ev.result != nil {
				co.results[s.Attempt] = *ev.result
			}
			// An attempt that failed because its worker was lost — or,
			// a reduce, because the worker holding the map output it
			// fetched was — must not count as a failure: report the
			// loss first if the watcher's event has not arrived yet.
			if f, ok := ev.ev.(sched.AttemptFailed); ok {
				if w := co.workerOf(f.Attempt); w != nil && isLost(w) {
					acts = append(acts, co.s.Step(time.Now(), sched.WorkerLost{Name: w.Name()})...)
				}
				if f.FetchFailedMap >= 0 {
					holder := co.workers[co.committedWorker[sched.TaskID{Kind: sched.Map, Index: f.FetchFailedMap}]]
					if holder != nil && isLost(holder) {
						acts = append(acts, co.s.Step(time.Now(), sched.WorkerLost{Name: holder.Name()})...)
					}
				}
			}
			acts = append(acts, co.s.Step(time.Now(), ev.ev)...)
		case <-tick.C:
			if co.cfg.Discover != nil {
				for _, w := range co.cfg.Discover() {
					// A known name is skipped unless that worker was lost
					// and the pool has a new member of the name (it answers
					// again): the scheduler takes it as a fresh worker.
					if known, ok := co.workers[w.Name()]; (ok && (known == w || !isLost(known))) || isLost(w) {
						continue
					}
					if known, ok := co.workers[w.Name()]; ok {
						// Report the old member's loss before the new one
						// joins, so that its attempts and map outputs are
						// given up first (its own event, later, is stale).
						acts = append(acts, co.s.Step(time.Now(), sched.WorkerLost{Name: known.Name()})...)
					}
					co.workers[w.Name()] = w
					watch(w)
					log.Info("worker joined", "worker", w.Name())
					acts = append(acts, co.s.Step(time.Now(), sched.WorkerJoined{Name: w.Name(), Host: w.Host(), Slots: w.Slots()})...)
				}
			}
			acts = append(acts, co.s.Step(time.Now(), sched.Tick{})...)
		case <-progress.C:
			if co.cfg.Progress != nil {
				co.cfg.Progress(co.status(false))
			}
		case <-ctx.Done():
			done, jobErr = true, ctx.Err()
		}
	}
	// Stop whatever still runs and wait for it: nothing may write after
	// the job has ended.
	co.s.Stop()
	cancelAll()
	co.drain()
	res := &Result{JobID: co.spec.ID, Counters: co.counters(), Timestamp: co.spec.Timestamp, Elapsed: time.Since(co.started)}
	for _, k := range []sched.Kind{sched.Map, sched.Reduce} {
		n := len(co.splits)
		if k == sched.Reduce {
			n = co.job.Reducers
		}
		for i := range n {
			if r, ok := co.committed[sched.TaskID{Kind: k, Index: i}]; ok && r.Report != nil {
				res.Reports = append(res.Reports, TaskReport{Kind: co.attemptID(sched.AttemptID{Task: sched.TaskID{Kind: k, Index: i}}).Kind, Task: i, Data: r.Report})
			}
		}
	}
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	defer func() {
		for _, w := range co.workers {
			w.Cleanup(cleanupCtx, co.spec.ID)
		}
	}()
	if out, ok := co.job.Output.(*FileOutput); ok {
		if jobErr == nil {
			var files []string
			for _, id := range co.outputTasks() {
				files = append(files, co.committed[id].Output...)
			}
			final, err := commitFileOutput(cleanupCtx, out, Manifest{JobID: co.spec.ID, Job: co.job.Name, Counters: res.Counters}, files)
			if err != nil {
				jobErr = fmt.Errorf("commit of the output: %w", err)
			}
			res.Files = final
		}
		if jobErr != nil {
			abortFileOutput(cleanupCtx, out, co.spec.ID)
		}
	}
	if co.cfg.Progress != nil {
		co.cfg.Progress(co.status(true))
	}
	if jobErr != nil {
		log.Info("job failed", "err", jobErr)
		return res, fmt.Errorf("job %s failed: %w", co.spec.ID, jobErr)
	}
	log.Info("job succeeded", "elapsed", res.Elapsed)
	return res, nil
}

// outputTasks are the tasks that write the job's output, in order.
func (co *coordinator) outputTasks() []sched.TaskID {
	var ids []sched.TaskID
	if co.job.Reducers > 0 {
		for i := range co.job.Reducers {
			ids = append(ids, sched.TaskID{Kind: sched.Reduce, Index: i})
		}
	} else {
		for i := range co.splits {
			ids = append(ids, sched.TaskID{Kind: sched.Map, Index: i})
		}
	}
	return ids
}

// drain waits for the attempts' goroutines. Their last events still go
// to the scheduler, whose actions no longer matter (the job's end cleans
// every worker up): a straggler killed when its backup won may report
// only now, after the job ended, and the job's counters count it killed.
func (co *coordinator) drain() {
	finished := make(chan struct{})
	go func() { co.wg.Wait(); close(finished) }()
	for {
		select {
		case ev := <-co.events:
			co.s.Step(time.Now(), ev.ev)
		case <-finished:
			// Events sent before their goroutines ended.
			for {
				select {
				case ev := <-co.events:
					co.s.Step(time.Now(), ev.ev)
				default:
					return
				}
			}
		}
	}
}

func (co *coordinator) start(ctx context.Context, a sched.Start) {
	w := co.workers[a.Worker]
	id := co.attemptID(a.Attempt)
	t := Task{Job: co.spec, Attempt: id}
	if a.Attempt.Task.Kind == sched.Map {
		sp := co.splits[a.Attempt.Task.Index]
		t.Split = &sp
	} else {
		if !co.timestampSet {
			co.spec.Timestamp = co.outputTimestamp()
			co.timestampSet = true
			t.Job = co.spec
		}
		t.Partition = a.Attempt.Task.Index
		for _, m := range a.MapOutputs {
			t.MapOutputs = append(t.MapOutputs, MapOutputLocation{Map: m.Map, Attempt: co.attemptID(m.Attempt), Worker: m.Worker})
		}
	}
	co.attemptWorker[a.Attempt] = a.Worker
	co.starts[a.Attempt.Task.Kind]++
	actx, cancel := context.WithCancel(ctx)
	ra := &runningAttempt{id: id, worker: a.Worker, cancel: cancel}
	co.mu.Lock()
	co.attempts[a.Attempt] = ra
	co.mu.Unlock()
	kind := a.Attempt.Task.Kind.String()
	if co.cfg.Metrics != nil {
		co.cfg.Metrics.Running.WithLabelValues(kind).Inc()
	}
	co.cfg.Logger.Debug("attempt started", "attempt", id, "worker", a.Worker, "speculative", a.Speculative)
	co.wg.Add(1)
	go func() {
		defer co.wg.Done()
		defer cancel()
		res, err := w.RunTask(actx, t, func(c Counters) {
			ra.mu.Lock()
			ra.progress = c
			ra.mu.Unlock()
		})
		co.mu.Lock()
		delete(co.attempts, a.Attempt)
		co.mu.Unlock()
		if co.cfg.Metrics != nil {
			co.cfg.Metrics.Running.WithLabelValues(kind).Dec()
		}
		var ev event
		if err == nil {
			ev = event{ev: sched.AttemptSucceeded{Attempt: a.Attempt}, result: &res}
			co.metricAttempt(a.Attempt.Task.Kind, "succeeded")
		} else {
			fetchMap := -1
			var fe *FetchError
			if errors.As(err, &fe) {
				fetchMap = fe.Map
			}
			if actx.Err() == nil {
				co.cfg.Logger.Warn("attempt failed", "attempt", id, "worker", a.Worker, "err", err)
				co.metricAttempt(a.Attempt.Task.Kind, "failed")
			}
			ev = event{ev: sched.AttemptFailed{Attempt: a.Attempt, Err: fmt.Errorf("%s on %s: %w", id, a.Worker, err), FetchFailedMap: fetchMap}}
		}
		co.events <- ev
	}()
}

func (co *coordinator) metricAttempt(k sched.Kind, outcome string) {
	if co.cfg.Metrics != nil {
		co.cfg.Metrics.Attempts.WithLabelValues(k.String(), outcome).Inc()
	}
}

// outputTimestamp is the job's output timestamp for the reduces: the
// job's own, else the newest input cell's (so that a re-run over the same
// input writes the same cells), else the read time.
func (co *coordinator) outputTimestamp() int64 {
	if co.job.Timestamp != 0 {
		return co.job.Timestamp
	}
	var ts int64
	for id, r := range co.committed {
		if id.Kind == sched.Map {
			ts = max(ts, r.MaxInputTimestamp)
		}
	}
	if ts == 0 {
		ts = co.spec.ReadTime
	}
	return ts
}

// counters sums the committed attempts' counters and adds the attempt
// outcomes.
func (co *coordinator) counters() Counters {
	c := Counters{}
	for _, r := range co.committed {
		c.Add(r.Counters)
	}
	c[CounterFailedAttempts] = int64(co.s.Failed)
	c[CounterKilledAttempts] = int64(co.s.Killed)
	c[CounterSpeculativeStarts] = int64(co.s.Backups)
	c[CounterMapAttempts] = int64(co.starts[sched.Map])
	c[CounterReduceAttempts] = int64(co.starts[sched.Reduce])
	return c
}

// status is the job's snapshot: committed counters plus the running
// attempts' progress.
func (co *coordinator) status(final bool) Status {
	c := co.counters()
	co.mu.Lock()
	for _, ra := range co.attempts {
		ra.mu.Lock()
		c.Add(ra.progress)
		ra.mu.Unlock()
	}
	co.mu.Unlock()
	var est int64
	for _, s := range co.splits {
		est += s.EstimatedBytes
	}
	conv := func(p sched.Status) PhaseStatus {
		return PhaseStatus{Total: p.Total, Done: p.Done, Running: p.Running, Failed: p.Failed}
	}
	return Status{
		JobID: co.spec.ID, Name: co.job.Name, Started: co.started, Elapsed: time.Since(co.started),
		Map: conv(co.s.Phase(sched.Map)), Reduce: conv(co.s.Phase(sched.Reduce)),
		Counters: c, InputBytesEstimate: est, Done: final,
	}
}

func sortedNames(m map[string]Worker) []string {
	return slices.Sorted(maps.Keys(m))
}
