package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/fanout"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// BulkOptions configure ApplyBulk. Zero values take the documented
// defaults.
type BulkOptions struct {
	// BudgetBytes bounds the bytes (cell.RowMutation.Size) of mutations in
	// flight — sent and not yet answered; ApplyBulk blocks while it is
	// used up. A batch larger than the budget is sent alone, taking all
	// of it. Default 16 MiB.
	BudgetBytes int
	// BatchBytes: the mutations bound for one tablet are sent as one
	// MutateRows once they hold this many bytes (or maxBatchEntries row
	// mutations, or maxBatchMutations mutations in all). Default 1 MiB,
	// and at most BudgetBytes.
	BatchBytes int
}

// maxBatchEntries bounds the row mutations (entries) of one MutateRows,
// and maxBatchMutations their mutations together: the API allows 100,000
// in one request, counted over all its entries.
const (
	maxBatchEntries   = 10_000
	maxBatchMutations = 100_000
)

// bulkInFlightHook, when set (by tests), sees the bytes in flight after
// each acquisition of the budget.
var bulkInFlightHook func(inFlight int)

// ApplyBulk applies each of rms atomically — but not all of them together
// — batching them by tablet and sending each batch straight to the
// tablet's server, with at most BudgetBytes and Options.Concurrency
// batches in flight. It returns nil, nil when every mutation was applied;
// otherwise errs holds, at the index of each mutation, its error (nil for
// those applied) and err summarizes. Mutations that fail because their
// tablet moved ("not serving") are re-sent to the new location; those
// answered UNAVAILABLE are retried with backoff if Idempotent.
func (c *Client) ApplyBulk(ctx context.Context, table string, rms []cell.RowMutation, opts BulkOptions) (errs []error, err error) {
	id, name, err := c.tableID(table)
	if err != nil {
		return nil, err
	}
	if opts.BudgetBytes <= 0 {
		opts.BudgetBytes = 16 << 20
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 1 << 20
	}
	opts.BatchBytes = min(opts.BatchBytes, opts.BudgetBytes)
	p := c.data()
	errs = make([]error, len(rms))
	bud := &budget{total: opts.BudgetBytes, avail: opts.BudgetBytes, wake: make(chan struct{})}
	slots := make(chan struct{}, c.opts.Concurrency)
	var wg sync.WaitGroup
	locs := make(map[batchDest]meta.Location) // written and read by this goroutine only
	send := func(b *fanout.Batch[batchDest]) {
		loc := locs[b.Dest]
		n := min(b.Bytes, bud.total)
		if err := bud.acquire(ctx, n); err != nil {
			for _, i := range b.Idx {
				errs[i] = err
			}
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			bud.release(n)
			for _, i := range b.Idx {
				errs[i] = ctx.Err()
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer bud.release(n)
			defer func() { <-slots }()
			p.sendBatch(ctx, id, name, rms, loc, b.Idx, errs)
		}()
	}
	// A request that would pass the API's limit of mutations is cut
	// before the entry that would carry it over. (A row mutation over the
	// limit alone goes by itself and is refused for itself.)
	batches := fanout.NewBatcher(fanout.Limits{Entries: maxBatchEntries, Bytes: opts.BatchBytes, Count: maxBatchMutations}, send)
	unlocated := &notServingStreak{}
	for i := range rms {
		loc, err := p.locate(ctx, id, name, rms[i].Row)
		if err != nil {
			// Let the single-mutation path retry the lookup.
			errs[i] = p.applyOne(ctx, id, name, rms[i], nil, unlocated)
			continue
		}
		dest := batchDest{server: loc.Server, start: string(loc.Start)}
		locs[dest] = loc
		batches.Add(dest, i, rms[i].Size(), len(rms[i].Mutations))
	}
	batches.Flush()
	wg.Wait()
	failed := 0
	var first error
	for _, e := range errs {
		if e != nil {
			if failed == 0 {
				first = e
			}
			failed++
		}
	}
	if failed == 0 {
		return nil, nil
	}
	return errs, fmt.Errorf("client: %d of %d mutations failed, the first: %w", failed, len(rms), first)
}

// batchDest is where a batch of ApplyBulk goes: one tablet, by its
// server and start row.
type batchDest struct{ server, start string }

// applyOne applies one mutation alone, with Apply's retries; earlier is
// the failure of the batch attempt if it may have applied the mutation
// (see dataPlane.do), or nil; streak is shared by the mutations of one
// batch (or of one ApplyBulk's lookups), so that a tablet that stays
// unserved costs them the "not serving" retries once.
func (p *dataPlane) applyOne(ctx context.Context, id meta.TableID, name string, rm cell.RowMutation, earlier error, streak *notServingStreak) error {
	req := &bigtablepb.MutateRowRequest{TableName: name, RowKey: rm.Row, Mutations: MutationsToPB(rm.Mutations)}
	return p.do(ctx, id, name, rm.Row, Idempotent(rm), &writeAttempts{earlier: earlier, streak: streak}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		_, err := bigtablepb.NewBigtableClient(cc).MutateRow(ctx, req)
		return err
	})
}

// sendBatch sends the mutations idx of rms to loc with one MutateRows and records each mutation's
// outcome in errs. Mutations that fail retryably are re-sent one by one
// through applyOne, after the batch's location is dropped from the cache:
// those answered "not serving" (not applied), and those answered
// UNAVAILABLE when Idempotent or when the MutateRows certainly reached no
// server (gRPC had no connection for it: trackedConn). A non-idempotent
// mutation that may have been applied is not re-sent.
func (p *dataPlane) sendBatch(ctx context.Context, id meta.TableID, name string, rms []cell.RowMutation, loc meta.Location, idx []int, errs []error) {
	req := &bigtablepb.MutateRowsRequest{TableName: name}
	for _, i := range idx {
		req.Entries = append(req.Entries, &bigtablepb.MutateRowsRequest_Entry{RowKey: rms[i].Row, Mutations: MutationsToPB(rms[i].Mutations)})
	}
	outcome := make([]error, len(idx))
	answered := make([]bool, len(idx))
	var tc *trackedConn // nil: nothing was sent
	callErr := func() error {
		cc, err := p.conn(loc.Server)
		if err != nil {
			return err
		}
		tc = &trackedConn{ClientConnInterface: cc}
		st, err := bigtablepb.NewBigtableClient(tc).MutateRows(ctx, req)
		if err != nil {
			return err
		}
		for {
			resp, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, e := range resp.GetEntries() {
				j := int(e.GetIndex())
				if j < 0 || j >= len(idx) {
					return status.Errorf(codes.Internal, "client: MutateRows answered for entry %d of %d", j, len(idx))
				}
				answered[j] = true
				if s := e.GetStatus(); s.GetCode() != int32(codes.OK) {
					outcome[j] = status.ErrorProto(s)
				}
			}
		}
	}()
	// The request certainly reached no server. (The peer is read only
	// after an UNAVAILABLE: gRPC has finished the stream then.)
	unsent := status.Code(callErr) == codes.Unavailable && (tc == nil || tc.unsent(callErr))
	invalidated := false
	streak := &notServingStreak{}
	for j, i := range idx {
		err := outcome[j]
		certain := false // certainly not applied
		if !answered[j] {
			err = callErr
			if err == nil {
				err = status.Errorf(codes.Internal, "client: MutateRows did not answer for entry %d", j)
			}
			certain = unsent
		}
		if err == nil {
			continue
		}
		_, notServing := tabletpb.NotServingDetail(err)
		unavailable := status.Code(err) == codes.Unavailable
		if (notServing || unavailable) && !invalidated {
			p.cache.Invalidate(loc) // moved, or its server is gone
			invalidated = true
		}
		if notServing || unavailable && (certain || Idempotent(rms[i])) {
			var earlier error // the batch's attempt, if it may have applied the entry
			if !certain && mayHaveApplied(err) {
				earlier = err
			}
			err = p.applyOne(ctx, id, name, rms[i], earlier, streak)
		}
		errs[i] = err
	}
}

// budget is a byte semaphore: ApplyBulk's single sender acquires, the
// batches in flight release.
type budget struct {
	total int
	mu    sync.Mutex
	avail int
	wake  chan struct{} // closed and replaced at each release
}

func (b *budget) acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.avail >= n {
			b.avail -= n
			inFlight := b.total - b.avail
			b.mu.Unlock()
			if h := bulkInFlightHook; h != nil {
				h(inFlight)
			}
			return nil
		}
		w := b.wake
		b.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *budget) release(n int) {
	b.mu.Lock()
	b.avail += n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
