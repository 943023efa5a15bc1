package mapreduce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/tabuladb/tabula/mapreduce/shuffle"
	"github.com/tabuladb/tabula/storage/client"
)

// LocalWorkerConfig configures NewLocalWorker.
type LocalWorkerConfig struct {
	// Name is unique among a coordinator's workers; Host is matched
	// against splits' locality hints (default: os.Hostname).
	Name, Host string
	// Slots is how many attempts run at once; default 1.
	Slots int
	// Dir is where map outputs and spills live (a directory per job run
	// under it); default os.TempDir().
	Dir string
	// SortMemory bounds the map-side sort buffer of each attempt, bytes;
	// default 64 MiB.
	SortMemory int64
	// Fetcher reaches other workers' map outputs for reduce attempts.
	Fetcher Fetcher
	// Clients returns a client of the cluster at addr (shared, not closed
	// by the worker); default: a pool that dials each address once.
	Clients func(addr string) (*client.Client, error)
	// Resolve builds the job a task belongs to; default: Build(spec.Name,
	// spec.Conf) from the registry. The coordinator's in-process workers
	// resolve the *Job it was given, registered or not.
	Resolve func(spec JobSpec) (*Job, error)
	Logger  *slog.Logger
}

// LocalWorker runs attempts as goroutines in this process. It is the
// worker of `tabula mr` without remote workers and of tests, and what a
// `tabula worker` process (package mapreduce/remote) serves over gRPC.
type LocalWorker struct {
	cfg  LocalWorkerConfig
	lost chan struct{}
	once sync.Once

	mu      sync.Mutex
	running map[AttemptID]context.CancelFunc
	outputs map[AttemptID]string // map attempt → its output directory
}

// NewLocalWorker returns a worker configured by cfg.
func NewLocalWorker(cfg LocalWorkerConfig) *LocalWorker {
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	if cfg.SortMemory <= 0 {
		cfg.SortMemory = DefaultSortMemory
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clients == nil {
		cfg.Clients = NewClientPool(client.Options{}).Get
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(spec JobSpec) (*Job, error) { return Build(spec.Name, spec.Conf) }
	}
	return &LocalWorker{cfg: cfg, lost: make(chan struct{}), running: map[AttemptID]context.CancelFunc{}, outputs: map[AttemptID]string{}}
}

// DefaultSortMemory is the map-side sort buffer when none is configured.
const DefaultSortMemory = 64 << 20

// Name implements Worker.
func (w *LocalWorker) Name() string { return w.cfg.Name }

// Host implements Worker.
func (w *LocalWorker) Host() string { return w.cfg.Host }

// Slots implements Worker.
func (w *LocalWorker) Slots() int { return w.cfg.Slots }

// Lost implements Worker.
func (w *LocalWorker) Lost() <-chan struct{} { return w.lost }

// Kill simulates the loss of the worker (a crashed process): its running
// attempts are cancelled, its map outputs become unfetchable, and Lost is
// closed.
func (w *LocalWorker) Kill() {
	w.once.Do(func() {
		close(w.lost)
		w.mu.Lock()
		for _, cancel := range w.running {
			cancel()
		}
		w.outputs = map[AttemptID]string{}
		w.mu.Unlock()
	})
}

// errWorkerLost fails the attempts of a killed worker.
var errWorkerLost = errors.New("mapreduce: worker lost")

// RunTask implements Worker.
func (w *LocalWorker) RunTask(ctx context.Context, t Task, progress func(Counters)) (TaskResult, error) {
	select {
	case <-w.lost:
		return TaskResult{}, errWorkerLost
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.running[t.Attempt] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.running, t.Attempt)
		w.mu.Unlock()
	}()
	job, err := w.cfg.Resolve(t.Job)
	if err != nil {
		return TaskResult{}, err
	}
	res, err := w.execute(ctx, job, t, progress)
	select {
	case <-w.lost:
		return TaskResult{}, errWorkerLost
	default:
	}
	return res, err
}

// FetchPartition implements Worker.
func (w *LocalWorker) FetchPartition(ctx context.Context, a AttemptID, partition int) (io.ReadCloser, error) {
	w.mu.Lock()
	dir, ok := w.outputs[a]
	w.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s on worker %s", ErrNoMapOutput, a, w.cfg.Name)
	}
	f, err := os.Open(shuffle.PartitionFile(dir, partition))
	if err != nil {
		return nil, fmt.Errorf("%w: %s partition %d on worker %s: %v", ErrNoMapOutput, a, partition, w.cfg.Name, err)
	}
	return f, nil
}

// Cleanup implements Worker: it removes the job run's directory.
func (w *LocalWorker) Cleanup(ctx context.Context, jobID string) error {
	w.mu.Lock()
	for a := range w.outputs {
		if a.Job == jobID {
			delete(w.outputs, a)
		}
	}
	w.mu.Unlock()
	return os.RemoveAll(w.jobDir(jobID))
}

func (w *LocalWorker) jobDir(jobID string) string {
	return filepath.Join(w.cfg.Dir, "mr-"+w.cfg.Name+"-"+jobID)
}

// ClientPool dials each cluster address once and shares the client.
type ClientPool struct {
	opts    client.Options
	mu      sync.Mutex
	clients map[string]*client.Client
}

// NewClientPool returns an empty pool whose clients use opts.
func NewClientPool(opts client.Options) *ClientPool {
	return &ClientPool{opts: opts, clients: map[string]*client.Client{}}
}

// Get returns the client of addr, dialing it the first time.
func (p *ClientPool) Get(addr string) (*client.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[addr]; ok {
		return c, nil
	}
	c, err := client.Dial(addr, p.opts)
	if err != nil {
		return nil, err
	}
	p.clients[addr] = c
	return c, nil
}

// Close closes every client.
func (p *ClientPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, c := range p.clients {
		errs = append(errs, c.Close())
	}
	p.clients = map[string]*client.Client{}
	return errors.Join(errs...)
}
