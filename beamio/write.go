package beamio

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Cloud Bigtable's ceilings on one MutateRows request, which the batch
// options may not exceed.
const (
	MaxBatchMutations = 100_000
	MaxBatchBytes     = 128 << 20
)

// WriteConfig says where and how Write writes. Zero values take the
// documented defaults.
type WriteConfig struct {
	Table
	// BatchEntries and BatchBytes bound one batch: the row mutations
	// sent together (one ApplyBulk: a MutateRows per tablet). Default
	// 5,000 entries and 4 MiB; a batch also never holds more than
	// MaxBatchMutations mutations in all, and BatchBytes is at most
	// MaxBatchBytes.
	BatchEntries int
	BatchBytes   int64
	// MaxOutstandingBytes bounds the bytes of the batches sent and not
	// yet answered (flow control): a bundle waits before sending more.
	// Default 32 MiB; at least BatchBytes.
	MaxOutstandingBytes int64
	// MaxAttempts bounds the attempts of an entry that keeps failing
	// transiently (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED,
	// RESOURCE_EXHAUSTED, a tablet not served yet); then the bundle
	// fails and the runner retries it. Default 8.
	MaxAttempts int
	// RetryBackoff is the first wait before a retry, doubled each time
	// up to 30 s; default 100 ms.
	RetryBackoff time.Duration
}

// Defaults of WriteConfig.
const (
	DefaultBatchEntries        = 5000
	DefaultBatchBytes          = 4 << 20
	DefaultMaxOutstandingBytes = 32 << 20
	DefaultMaxAttempts         = 8
	DefaultRetryBackoff        = 100 * time.Millisecond
	maxRetryBackoff            = 30 * time.Second
)

func (cfg WriteConfig) withDefaults() (WriteConfig, error) {
	if err := cfg.Table.validate(); err != nil {
		return cfg, err
	}
	if cfg.BatchEntries == 0 {
		cfg.BatchEntries = DefaultBatchEntries
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.MaxOutstandingBytes == 0 {
		cfg.MaxOutstandingBytes = max(DefaultMaxOutstandingBytes, cfg.BatchBytes)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	switch {
	case cfg.BatchEntries < 1 || cfg.BatchEntries > MaxBatchMutations:
		return cfg, fmt.Errorf("beamio: BatchEntries %d is outside [1, %d]", cfg.BatchEntries, MaxBatchMutations)
	case cfg.BatchBytes < 1 || cfg.BatchBytes > MaxBatchBytes:
		return cfg, fmt.Errorf("beamio: BatchBytes %d is outside [1, %d]", cfg.BatchBytes, MaxBatchBytes)
	case cfg.MaxOutstandingBytes < cfg.BatchBytes:
		return cfg, fmt.Errorf("beamio: MaxOutstandingBytes %d is below BatchBytes %d", cfg.MaxOutstandingBytes, cfg.BatchBytes)
	case cfg.MaxAttempts < 1:
		return cfg, fmt.Errorf("beamio: MaxAttempts %d is below 1", cfg.MaxAttempts)
	case cfg.RetryBackoff < 0:
		return cfg, fmt.Errorf("beamio: RetryBackoff %v is negative", cfg.RetryBackoff)
	}
	return cfg, nil
}

// Write applies mutations (a PCollection of RowMutation) to the table
// and returns two PCollections, both in the global window:
//
//   - results, one WriteResult per bundle, complete only when every
//     write of the bundle has been answered: a step that must run after
//     the writes takes results as a side input (see Wait);
//   - deadLetters, a FailedMutation for each entry that failed for good
//     (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION other than a tablet
//     not served yet, PERMISSION_DENIED, OUT_OF_RANGE, INTERNAL, …), with
//     its status; the other entries of its batch are applied.
//
// Transient failures are retried with exponential backoff (MaxAttempts);
// one that outlasts them fails the bundle, which the runner retries — so
// entries must be idempotent (explicit timestamps) for exact results.
// A bad configuration panics, as beam.ParDo does; TryWrite returns it.
func Write(s beam.Scope, cfg WriteConfig, mutations beam.PCollection) (results, deadLetters beam.PCollection) {
	r, d, err := TryWrite(s, cfg, mutations)
	if err != nil {
		panic(err)
	}
	return r, d
}

// TryWrite is Write returning the configuration's error.
func TryWrite(s beam.Scope, cfg WriteConfig, mutations beam.PCollection) (results, deadLetters beam.PCollection, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return beam.PCollection{}, beam.PCollection{}, err
	}
	s = s.Scope("beamio.Write(" + cfg.Table.Table + ")")
	outs, err := beam.TryParDo(s, &writeFn{Cfg: cfg}, mutations)
	if err != nil {
		return beam.PCollection{}, beam.PCollection{}, err
	}
	// The results always leave the writers' stage (one element per
	// bundle through a shuffle), even when the pipeline uses neither
	// output: prism v2.77.0 spins a core for as long as a bundle of a
	// stage without outputs runs, which halves the writes on two cores.
	beam.ParDo0(s, countResult, beam.Reshuffle(s, outs[0]))
	return outs[0], outs[1], nil
}

// The write's metrics, in namespace "beamio".
var (
	entriesWritten = beam.NewCounter("beamio", "write_entries")
	entriesFailed  = beam.NewCounter("beamio", "write_dead_letters")
	bytesWritten   = beam.NewCounter("beamio", "write_bytes")
	writeRetries   = beam.NewCounter("beamio", "write_retries")
)

// writeFn is Write's DoFn: it buffers a bundle's mutations into batches
// and sends each batch in the background while the bundle goes on, as
// long as the bytes outstanding allow.
type writeFn struct {
	Cfg WriteConfig

	c       *client.Client
	release func() // gives c back to the process's pool (SharedClient)
	sem     *byteSemaphore

	// Per bundle.
	buf      []cell.RowMutation
	bufBytes int64
	bufMuts  int
	wg       sync.WaitGroup
	mu       sync.Mutex // guards the fields below, written by the senders
	failed   []FailedMutation
	sum      WriteResult
	fatal    error
	started  time.Time
}

func init() {
	register.DoFn4x1[context.Context, RowMutation, func(WriteResult), func(FailedMutation), error](&writeFn{})
	register.Emitter1[WriteResult]()
	register.Emitter1[FailedMutation]()
	beam.RegisterType(reflect.TypeOf((*writeFn)(nil)).Elem())
}

// Setup takes the process's shared connection to the server.
func (f *writeFn) Setup() error {
	c, release, err := SharedClient(f.Cfg.Table, false)
	if err != nil {
		return err
	}
	f.c, f.release = c, release
	f.sem = newByteSemaphore(f.Cfg.MaxOutstandingBytes)
	return nil
}

// Teardown gives the connection back.
func (f *writeFn) Teardown() error {
	if f.release != nil {
		f.release()
		f.c, f.release = nil, nil
	}
	return nil
}

// StartBundle resets the bundle's state.
func (f *writeFn) StartBundle(_ context.Context, _ func(WriteResult), _ func(FailedMutation)) {
	f.buf, f.bufBytes, f.bufMuts = nil, 0, 0
	f.failed, f.fatal = nil, nil
	f.sum = WriteResult{Table: f.Cfg.Table.Table}
	f.started = time.Time{}
}

// ProcessElement adds m to the batch, sends the batch when full, and
// passes on the dead letters of batches answered meanwhile.
func (f *writeFn) ProcessElement(ctx context.Context, m RowMutation, _ func(WriteResult), dead func(FailedMutation)) error {
	if f.started.IsZero() {
		f.started = time.Now()
	}
	rm := cell.RowMutation(m)
	size := int64(rm.Size())
	if len(f.buf) > 0 && (len(f.buf) >= f.Cfg.BatchEntries || f.bufBytes+size > f.Cfg.BatchBytes || f.bufMuts+len(rm.Mutations) > MaxBatchMutations) {
		if err := f.send(ctx); err != nil {
			return err
		}
	}
	f.buf = append(f.buf, rm)
	f.bufBytes += size
	f.bufMuts += len(rm.Mutations)
	return f.drain(ctx, dead)
}

// FinishBundle sends the last batch, waits for every answer and emits
// the bundle's dead letters and its result.
func (f *writeFn) FinishBundle(ctx context.Context, result func(WriteResult), dead func(FailedMutation)) error {
	if len(f.buf) > 0 {
		if err := f.send(ctx); err != nil {
			return err
		}
	}
	f.wg.Wait()
	if err := f.drain(ctx, dead); err != nil {
		return err
	}
	if f.sum.Requests == 0 {
		return nil // an empty bundle: nothing to report
	}
	f.sum.Elapsed = time.Since(f.started)
	entriesWritten.Inc(ctx, f.sum.Written)
	entriesFailed.Inc(ctx, f.sum.Failed)
	bytesWritten.Inc(ctx, f.sum.Bytes)
	writeRetries.Inc(ctx, f.sum.Retries)
	result(f.sum)
	return nil
}

// drain emits the dead letters collected so far and reports a sender's
// fatal error.
func (f *writeFn) drain(_ context.Context, dead func(FailedMutation)) error {
	f.mu.Lock()
	failed, fatal := f.failed, f.fatal
	f.failed = nil
	f.mu.Unlock()
	for _, fm := range failed {
		dead(fm)
	}
	return fatal
}

// send hands the buffered batch to a background sender once the
// outstanding bytes allow it.
func (f *writeFn) send(ctx context.Context) error {
	batch, n := f.buf, f.bufBytes
	f.buf, f.bufBytes, f.bufMuts = nil, 0, 0
	if err := f.sem.acquire(ctx, n); err != nil {
		return err
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer f.sem.release(n)
		out := applyWithRetries(ctx, f.c, f.Cfg, batch)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.sum.Requests += out.requests
		f.sum.Retries += out.retries
		f.sum.Written += out.written
		f.sum.Bytes += out.bytes
		f.sum.Failed += int64(len(out.failed))
		f.failed = append(f.failed, out.failed...)
		if out.err != nil && f.fatal == nil {
			f.fatal = out.err
		}
	}()
	return nil
}

// bulkApplier is what applyWithRetries needs of client.Client.
type bulkApplier interface {
	ApplyBulk(ctx context.Context, table string, rms []cell.RowMutation, opts client.BulkOptions) ([]error, error)
}

// batchOutcome is what became of one batch.
type batchOutcome struct {
	requests, retries, written, bytes int64
	failed                            []FailedMutation
	err                               error // transient failures outlasted the attempts, or the context ended
}

// applyWithRetries applies batch with ApplyBulk, re-sending the entries
// that failed transiently with exponential backoff, up to MaxAttempts;
// entries that failed permanently become dead letters.
func applyWithRetries(ctx context.Context, c bulkApplier, cfg WriteConfig, batch []cell.RowMutation) batchOutcome {
	var out batchOutcome
	pending := batch
	backoff := cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		out.requests++
		errs, err := c.ApplyBulk(ctx, cfg.Table.Table, pending, client.BulkOptions{BudgetBytes: int(cfg.BatchBytes), BatchBytes: int(cfg.BatchBytes)})
		if err == nil {
			errs = make([]error, len(pending)) // every entry applied
		} else if errs == nil {
			// The call failed as a whole (a malformed table name, say):
			// every entry failed alike.
			errs = make([]error, len(pending))
			for i := range errs {
				errs[i] = err
			}
		}
		var retry []cell.RowMutation
		var lastTransient error
		for i, rm := range pending {
			e := errs[i]
			switch {
			case e == nil:
				out.written++
				out.bytes += int64(rm.Size())
			case ctx.Err() != nil:
				out.err = fmt.Errorf("beamio: write to %s: %w", cfg.Table.Table, ctx.Err())
				return out
			case Transient(e):
				retry = append(retry, rm)
				lastTransient = e
			default:
				st := status.Convert(e)
				out.failed = append(out.failed, FailedMutation{Mutation: RowMutation(rm), Code: uint32(st.Code()), Message: st.Message()})
			}
		}
		if len(retry) == 0 {
			return out
		}
		if attempt >= cfg.MaxAttempts {
			out.err = fmt.Errorf("beamio: write to %s: %d entries still failing after %d attempts, the last error: %w", cfg.Table.Table, len(retry), attempt, lastTransient)
			return out
		}
		out.retries++
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			out.err = fmt.Errorf("beamio: write to %s: %w", cfg.Table.Table, ctx.Err())
			return out
		case <-t.C:
		}
		backoff = min(2*backoff, maxRetryBackoff)
		pending = retry
	}
}

// Transient reports whether a write that failed with err may succeed if
// sent again: UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED,
// and a tablet not served where it was sent (FAILED_PRECONDITION with a
// NotServing detail: it moved or split). Every other failure is
// permanent: the request itself is wrong (INVALID_ARGUMENT, NOT_FOUND,
// other FAILED_PRECONDITIONs, PERMISSION_DENIED, OUT_OF_RANGE, …) or the
// server failed in a way a retry would repeat (INTERNAL).
func Transient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if _, ok := tabletpb.NotServingDetail(err); ok {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// byteSemaphore bounds the bytes outstanding; a request larger than the
// whole waits for everything else and then takes it all.
type byteSemaphore struct {
	total int64
	mu    sync.Mutex
	used  int64
	wake  chan struct{}
}

func newByteSemaphore(total int64) *byteSemaphore {
	return &byteSemaphore{total: total, wake: make(chan struct{})}
}

func (s *byteSemaphore) acquire(ctx context.Context, n int64) error {
	n = min(n, s.total)
	for {
		s.mu.Lock()
		if s.used+n <= s.total {
			s.used += n
			s.mu.Unlock()
			return nil
		}
		w := s.wake
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *byteSemaphore) release(n int64) {
	n = min(n, s.total)
	s.mu.Lock()
	s.used -= n
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

var writeBundles = beam.NewCounter("beamio", "write_bundles")

func countResult(ctx context.Context, _ WriteResult) { writeBundles.Inc(ctx, 1) }

// Wait returns pcol, held back until signal (e.g. Write's results) is
// complete: its elements pass through a ParDo that takes signal as a
// side input, which a runner provides only once signal's producers have
// finished (in the global window, batch). Steps that consume the
// returned PCollection run after the writes, as Java's Wait.on:
//
//	results, dead := beamio.Write(s, cfg, muts)
//	after := beamio.Wait(s, results, beam.Impulse(s))
//	beam.ParDo0(s, notifyFn, after)
func Wait(s beam.Scope, signal, pcol beam.PCollection) beam.PCollection {
	s = s.Scope("beamio.Wait")
	return beam.ParDo(s, waitFn, pcol, beam.SideInput{Input: signal})
}

func waitFn(x beam.T, _ func(*beam.U) bool, emit func(beam.T)) { emit(x) }

func init() {
	register.Function2x0(countResult)
	register.Function3x0(waitFn)
	register.Iter1[beam.U]()
	register.Emitter1[beam.T]()
}
