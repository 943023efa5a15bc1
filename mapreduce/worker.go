package mapreduce

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Worker runs task attempts for a coordinator. LocalWorker (goroutines in
// this process) implements it here; package mapreduce/remote implements it
// over gRPC for `tabula worker` processes.
//
// A Worker is used by one coordinator at a time and must be safe for
// concurrent calls: the coordinator runs up to Slots attempts on it at once
// and fetches from it while it runs others.
type Worker interface {
	// Name is unique among a coordinator's workers; MapOutputLocation
	// names the worker holding a map output by it.
	Name() string
	// Host is the host the worker runs on, matched against a split's
	// locality hint (Split.Host, the tablet server's host).
	Host() string
	// Slots is how many attempts the worker runs at once (≥ 1).
	Slots() int
	// RunTask runs one attempt to completion. A map attempt of a job with
	// reducers leaves its partitioned, sorted output on the worker
	// (FetchPartition serves it until the job ends) and returns its
	// partition sizes; a map attempt of a map-only job, and a reduce
	// attempt, write the job's output as an uncommitted attempt
	// (TaskResult.Output) that the coordinator commits or discards. A
	// reduce attempt fetches the map outputs named in the task
	// (Task.MapOutputs) through the Fetcher the worker was given; a map
	// output it cannot fetch fails the attempt with a *FetchError.
	// Cancelling ctx kills the attempt: it returns ctx's error and leaves
	// nothing committed. progress, when not nil, is called now and then
	// with the attempt's counters so far (for the live display).
	RunTask(ctx context.Context, t Task, progress func(Counters)) (TaskResult, error)
	// FetchPartition returns one partition of a map attempt's output that
	// ran on this worker: the records (shuffle format) sorted by key.
	// An attempt it does not hold (never ran here, or lost) fails with an
	// error matching ErrNoMapOutput.
	FetchPartition(ctx context.Context, a AttemptID, partition int) (io.ReadCloser, error)
	// Lost is closed when the worker is lost (killed, or its heartbeats
	// stopped): its running attempts fail, and its map outputs that some
	// reduce task still needs are re-run elsewhere.
	Lost() <-chan struct{}
	// Cleanup drops what the worker holds for the job run jobID (map
	// outputs, spill files); called once the job has ended.
	Cleanup(ctx context.Context, jobID string) error
}

// Fetcher reaches map outputs on other workers by worker name: what a
// worker uses to run reduce attempts. The coordinator's in-process
// workers share one over the coordinator's worker list; remote workers
// resolve names to addresses.
type Fetcher interface {
	Fetch(ctx context.Context, worker string, a AttemptID, partition int) (io.ReadCloser, error)
}

// ErrNoMapOutput is matched (errors.Is) by FetchPartition's error for a
// map attempt the worker does not hold.
var ErrNoMapOutput = errors.New("mapreduce: no such map output")

// FetchError fails a reduce attempt that could not fetch a map output: the
// coordinator re-runs that map (its worker may be gone) rather than count
// the failure against the reduce task alone.
type FetchError struct {
	Map    int
	Worker string
	Err    error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("fetch of map %d's output from worker %s: %v", e.Map, e.Worker, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }
