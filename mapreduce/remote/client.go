package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
)

// Timing defaults of the coordinator's side.
const (
	// DefaultHeartbeatInterval is how often a coordinator asks each worker
	// whether it lives, and how often a running attempt reports.
	DefaultHeartbeatInterval = time.Second
	// DefaultLostAfter is how long a worker may go without answering a
	// heartbeat (or a running attempt without reporting) before it is
	// declared lost.
	DefaultLostAfter = 5 * time.Second
)

// Client is one remote worker as a coordinator sees it: mapreduce.Worker
// over the worker protocol. Pool makes them; a Client is lost for good once
// Lost is closed (a worker that comes back is a new Client, with a new
// name).
type Client struct {
	reg   Registration
	rpc   workerpb.WorkerClient
	book  *addrBook
	opts  PoolOptions
	lost  chan struct{}
	once  sync.Once
	cause error
	// declare declares the worker lost: the pool's leave, which also
	// forgets it.
	declare func(error)
}

var _ mapreduce.Worker = (*Client)(nil)

func newClient(reg Registration, conn grpc.ClientConnInterface, book *addrBook, opts PoolOptions, declare func(error)) *Client {
	c := &Client{reg: reg, rpc: workerpb.NewWorkerClient(conn), book: book, opts: opts, lost: make(chan struct{}), declare: declare}
	if c.declare == nil {
		c.declare = func(err error) { c.markLost(err) }
	}
	return c
}

// probe asks the worker whether it lives after a call to it broke, and
// declares it lost at once if it does not answer (or another worker
// answers at its address). The coordinator must learn of the loss before
// the broken attempt's error, or it would count a dead worker's attempts
// as the task's failures and exhaust its attempts on it before the
// heartbeats notice.
func (c *Client) probe(cause error) {
	select {
	case <-c.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(2*c.opts.HeartbeatInterval, 500*time.Millisecond))
	defer cancel()
	resp, err := c.rpc.Heartbeat(ctx, &workerpb.HeartbeatRequest{})
	switch {
	case err != nil:
		c.declare(fmt.Errorf("a call failed (%v) and a heartbeat then too: %w", cause, err))
	case resp.Worker != c.reg.Name:
		c.declare(fmt.Errorf("%s now serves at %s (the worker restarted)", resp.Worker, c.reg.Addr))
	}
}

// Name is the worker's registered name (unique per worker process).
func (c *Client) Name() string { return c.reg.Name }

// Host is the host the worker runs on.
func (c *Client) Host() string { return c.reg.Host }

// Addr is the worker's gRPC address.
func (c *Client) Addr() string { return c.reg.Addr }

// Slots is how many attempts the worker runs at once.
func (c *Client) Slots() int { return max(c.reg.Slots, 1) }

// Lost is closed once the worker is declared lost; LostErr says why.
func (c *Client) Lost() <-chan struct{} { return c.lost }

// LostErr is why the worker was declared lost, nil while it is not.
func (c *Client) LostErr() error {
	select {
	case <-c.lost:
		return c.cause
	default:
		return nil
	}
}

func (c *Client) markLost(err error) bool {
	first := false
	c.once.Do(func() {
		c.cause = fmt.Errorf("worker %s (%s) lost: %w", c.reg.Name, c.reg.Addr, err)
		close(c.lost)
		first = true
	})
	return first
}

// RunTask runs the attempt on the worker and waits for its end. The
// attempt is killed (its call cancelled) when ctx is done, when the worker
// is declared lost, or when it sends nothing for the pool's LostAfter; the
// error then says which. A reduce attempt that could not fetch a map
// output fails with a *mapreduce.FetchError, as it would in process.
func (c *Client) RunTask(ctx context.Context, t mapreduce.Task, progress func(mapreduce.Counters)) (mapreduce.TaskResult, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return mapreduce.TaskResult{}, fmt.Errorf("remote: encoding task %s: %w", t.Attempt, err)
	}
	req := &workerpb.RunTaskRequest{
		Task:                body,
		Attempt:             t.Attempt.String(),
		HeartbeatIntervalMs: c.opts.HeartbeatInterval.Milliseconds(),
	}
	if len(t.MapOutputs) > 0 {
		req.WorkerAddrs = map[string]string{}
		for _, m := range t.MapOutputs {
			addr, ok := c.book.lookup(m.Worker)
			if !ok {
				// The worker holding the output is unknown here: the
				// reduce cannot fetch it, which is the coordinator's cue
				// to re-run that map.
				return mapreduce.TaskResult{}, &mapreduce.FetchError{Map: m.Map, Worker: m.Worker, Err: fmt.Errorf("%w: worker %s is not known to the pool", mapreduce.ErrNoMapOutput, m.Worker)}
			}
			req.WorkerAddrs[m.Worker] = addr
		}
	}
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.RunTask(callCtx, req)
	if err != nil {
		if ctx.Err() == nil {
			c.probe(err)
		}
		return mapreduce.TaskResult{}, c.callError(ctx, t, err)
	}
	type recv struct {
		ev  *workerpb.RunTaskEvent
		err error
	}
	events := make(chan recv, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			select {
			case events <- recv{ev, err}:
			case <-callCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	silence := time.NewTimer(c.opts.LostAfter)
	defer silence.Stop()
	for {
		select {
		case <-ctx.Done():
			return mapreduce.TaskResult{}, ctx.Err()
		case <-c.lost:
			return mapreduce.TaskResult{}, fmt.Errorf("attempt %s: %w", t.Attempt, c.LostErr())
		case <-silence.C:
			err := fmt.Errorf("attempt %s on worker %s: no report for %v", t.Attempt, c.reg.Name, c.opts.LostAfter)
			c.probe(err)
			return mapreduce.TaskResult{}, err
		case r := <-events:
			if r.err != nil {
				if ctx.Err() != nil {
					return mapreduce.TaskResult{}, ctx.Err()
				}
				err := r.err
				if err == io.EOF {
					err = fmt.Errorf("attempt %s on worker %s: stream ended without a result", t.Attempt, c.reg.Name)
				}
				c.probe(err)
				return mapreduce.TaskResult{}, c.callError(ctx, t, err)
			}
			silence.Reset(c.opts.LostAfter)
			switch ev := r.ev.Event.(type) {
			case *workerpb.RunTaskEvent_Heartbeat:
				if progress != nil && len(ev.Heartbeat.Counters) > 0 {
					var counters mapreduce.Counters
					if json.Unmarshal(ev.Heartbeat.Counters, &counters) == nil {
						progress(counters)
					}
				}
			case *workerpb.RunTaskEvent_Finished:
				return c.finished(ctx, t, ev.Finished)
			}
		}
	}
}

// finished turns the worker's last word on an attempt into RunTask's
// result.
func (c *Client) finished(ctx context.Context, t mapreduce.Task, f *workerpb.Finished) (mapreduce.TaskResult, error) {
	if f.Error == "" {
		var res mapreduce.TaskResult
		if err := json.Unmarshal(f.Result, &res); err != nil {
			return mapreduce.TaskResult{}, fmt.Errorf("attempt %s on worker %s: decoding result: %w", t.Attempt, c.reg.Name, err)
		}
		return res, nil
	}
	if f.Killed && ctx.Err() != nil {
		return mapreduce.TaskResult{}, ctx.Err()
	}
	err := errors.New(f.Error)
	if ff := f.FetchFailure; ff != nil {
		return mapreduce.TaskResult{}, &mapreduce.FetchError{Map: int(ff.Map), Worker: ff.Worker, Err: err}
	}
	return mapreduce.TaskResult{}, fmt.Errorf("on worker %s: %w", c.reg.Name, err)
}

// callError describes a failed call: the caller's own cancellation is
// returned as is; anything else names the worker.
func (c *Client) callError(ctx context.Context, t mapreduce.Task, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("attempt %s on worker %s (%s): %w", t.Attempt, c.reg.Name, c.reg.Addr, err)
}

// FetchPartition streams one partition of a map attempt that ran on this
// worker. A worker that does not hold it answers NOT_FOUND, returned as an
// error matching mapreduce.ErrNoMapOutput.
// The job's token comes from ctx (mapreduce.ContextWithJobToken), as for
// Cleanup and Kill.
func (c *Client) FetchPartition(ctx context.Context, a mapreduce.AttemptID, partition int) (io.ReadCloser, error) {
	return openFetch(withJobToken(ctx), c.rpc, c.reg.Name, a, partition, nil)
}

// withJobToken returns ctx whose outgoing calls present the job token ctx
// carries (mapreduce.JobTokenFromContext), if any.
func withJobToken(ctx context.Context) context.Context {
	if tok := mapreduce.JobTokenFromContext(ctx); tok != "" {
		return metadata.AppendToOutgoingContext(ctx, JobTokenKey, tok)
	}
	return ctx
}

// Cleanup asks the worker to drop what it holds for the job run.
func (c *Client) Cleanup(ctx context.Context, jobID string) error {
	_, err := c.rpc.ForgetJob(withJobToken(ctx), &workerpb.ForgetJobRequest{Job: jobID})
	if err != nil {
		return fmt.Errorf("remote: cleanup of job %s on worker %s: %w", jobID, c.reg.Name, err)
	}
	return nil
}

// Kill kills a running attempt on the worker; RunTask's cancellation does
// the same, this is for an attempt whose call is gone.
func (c *Client) Kill(ctx context.Context, a mapreduce.AttemptID) error {
	_, err := c.rpc.KillAttempt(withJobToken(ctx), &workerpb.KillAttemptRequest{Attempt: a.String()})
	return err
}

// fetchRetries is how many times a broken partition stream is reopened at
// the offset reached: a transient break should not cost a map re-run.
const fetchRetries = 3

// openFetch opens a partition stream and returns a reader over its chunks
// that resumes after transient errors. counted, when not nil, is told of
// every byte read.
func openFetch(ctx context.Context, rpc workerpb.WorkerClient, worker string, a mapreduce.AttemptID, partition int, counted func(int)) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &fetchReader{ctx: ctx, cancel: cancel, rpc: rpc, worker: worker, req: &workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: int32(partition)}, counted: counted}
	if err := r.open(); err != nil {
		cancel()
		return nil, err
	}
	// The first message tells a missing output from a present one before
	// the caller starts merging.
	if err := r.fill(); err != nil && err != io.EOF {
		cancel()
		return nil, err
	}
	return r, nil
}

type fetchReader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	rpc     workerpb.WorkerClient
	worker  string
	req     *workerpb.FetchPartitionRequest
	stream  grpc.ServerStreamingClient[workerpb.Chunk]
	buf     []byte
	eof     bool
	retries int
	counted func(int)
}

func (r *fetchReader) open() error {
	s, err := r.rpc.FetchPartition(r.ctx, r.req)
	if err != nil {
		return r.describe(err)
	}
	r.stream = s
	return nil
}

func (r *fetchReader) describe(err error) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %s partition %d on worker %s: %s", mapreduce.ErrNoMapOutput, r.req.Attempt, r.req.Partition, r.worker, status.Convert(err).Message())
	}
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	return fmt.Errorf("fetching %s partition %d from worker %s: %w", r.req.Attempt, r.req.Partition, r.worker, err)
}

// fill reads the next chunk into buf, reopening the stream at the current
// offset after a transient break.
func (r *fetchReader) fill() error {
	for len(r.buf) == 0 {
		if r.eof {
			return io.EOF
		}
		chunk, err := r.stream.Recv()
		if err == io.EOF {
			r.eof = true
			return io.EOF
		}
		if err != nil {
			if status.Code(err) == codes.Unavailable && r.retries < fetchRetries && r.ctx.Err() == nil {
				r.retries++
				time.Sleep(time.Duration(r.retries) * 100 * time.Millisecond)
				if err := r.open(); err != nil {
					return err
				}
				continue
			}
			return r.describe(err)
		}
		r.buf = chunk.Data
		r.req.Offset += int64(len(chunk.Data))
		if r.counted != nil {
			r.counted(len(chunk.Data))
		}
	}
	return nil
}

func (r *fetchReader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *fetchReader) Close() error {
	r.cancel()
	return nil
}

// addrBook maps worker names to addresses: the pool's view on the
// coordinator's side, and what reduce tasks taught a worker on its side.
// Names are unique per worker process, so an entry never changes meaning.
type addrBook struct {
	mu    sync.RWMutex
	addrs map[string]string
}

func newAddrBook() *addrBook { return &addrBook{addrs: map[string]string{}} }

func (b *addrBook) lookup(name string) (string, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	a, ok := b.addrs[name]
	return a, ok
}

func (b *addrBook) add(name, addr string) {
	b.mu.Lock()
	b.addrs[name] = addr
	b.mu.Unlock()
}
