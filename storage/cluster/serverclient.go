package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
)

// serverClient is master.TabletServers over gRPC: each server is reached at
// meta.ServerAddr of its name; Load sends the table's catalog entry along,
// so servers need no catalog.
type serverClient struct {
	conns   *conns
	catalog meta.Catalog
}

// refused reports whether a TCP connection to addr is refused: nothing
// listens there (the server's process is gone; a live one that is slow or
// paused still has the kernel accept the connection). It dials afresh
// rather than trust gRPC's reconnect back-off's last error.
func refused(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func (s *serverClient) tabletControl(server string) (clusterpb.TabletControlClient, error) {
	cc, err := s.conns.get(meta.ServerAddr(server))
	if err != nil {
		return nil, err
	}
	return clusterpb.NewTabletControlClient(cc), nil
}

func (s *serverClient) List(ctx context.Context, server string) ([]assign.Served, error) {
	c, err := s.tabletControl(server)
	if err != nil {
		return nil, err
	}
	addr := meta.ServerAddr(server)
	resp, err := c.ListTablets(ctx, &clusterpb.ListTabletsRequest{})
	if status.Code(err) == codes.Unavailable {
		if refused(ctx, addr) {
			return nil, fmt.Errorf("%w: nothing listens at its address: %v", master.ErrServerGone, err)
		}
		// Something listens there now, yet the call failed: gRPC may be
		// failing calls with the last dial's error until its reconnect
		// back-off (a second and more) ends — a server killed and started
		// again on its address (as a supervisor does) is then reported
		// unreachable, not gone, and its tablets wait for the slower
		// UnreachableAfter. Dial again at once and ask once more, waiting
		// for that dial (not failing on the old error while the
		// connection leaves its back-off): the answer says who listens.
		if s.conns.resetBackoff(addr) {
			resp, err = c.ListTablets(ctx, &clusterpb.ListTabletsRequest{}, grpc.WaitForReady(true))
		}
	}
	if err != nil {
		return nil, err
	}
	if resp.GetServerId() != server {
		// Another process now listens on the address: the named server is
		// gone and serves nothing.
		return nil, fmt.Errorf("cluster: %s answers as %s: %w", server, resp.GetServerId(), master.ErrServerGone)
	}
	out := make([]assign.Served, 0, len(resp.GetTablets()))
	for _, t := range resp.GetTablets() {
		out = append(out, assign.Served{ID: assign.TabletID(t.GetTabletId()), Table: t.GetTable(), Start: string(t.GetStartKey()), End: string(t.GetEndKey()), Bytes: t.GetBytes(), Splitting: t.GetSplitting(), SharesFiles: t.GetSharesFiles()})
	}
	return out, nil
}

// tableEntry returns the catalog entry of table (meta.TableID.String form).
func (s *serverClient) tableEntry(ctx context.Context, table string) (meta.Table, error) {
	id, err := parseTableString(table)
	if err != nil {
		return meta.Table{}, err
	}
	if id == meta.MetadataTable {
		return metadataTable(), nil
	}
	return s.catalog.Get(ctx, id)
}

func (s *serverClient) Load(ctx context.Context, server string, t assign.Tablet, rec master.RecoverySource) error {
	entry, err := s.tableEntry(ctx, t.Table)
	if err != nil {
		return err
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	c, err := s.tabletControl(server)
	if err != nil {
		return err
	}
	_, err = c.LoadTablet(ctx, &clusterpb.LoadTabletRequest{TableJson: b, TabletId: string(t.ID), StartKey: []byte(t.Start), EndKey: []byte(t.End), RecoverFrom: rec.From, SortedLog: rec.Sorted && rec.From != ""})
	return err
}

// Sorting a dead server's log (the paper's §5.4): the segments are handed
// out to the sorters in turn, one segment per sorter at a time (a sort
// holds about two segments in memory), each sorter taking the next
// segment as it finishes one, so faster sorters do more. A segment that
// fails is retried on another sorter, up to maxSortAttempts sorters in
// all, unless the failure says that no sorter can succeed (a corrupt or
// absent segment).
const (
	maxSortAttempts = 3
	// maxSorterFailures retires a sorter that failed that many segments
	// in a row (a dead sorter fails each at once).
	maxSorterFailures = 2
	// sortSegmentTimeout bounds one attempt: reading, sorting and writing
	// one segment (64 MiB by default) takes seconds, so a sorter that
	// takes this long is stuck.
	sortSegmentTimeout = 2 * time.Minute
)

// SortLog sorts dead's commit log into its sorted copy (SortedLogPrefix):
// it asks a sorter for the log's segments (ListLogSegments), then has the
// sorters sort them (SortLogSegment) in parallel, and returns nil once
// every segment's sorted object is durable. On the first segment that
// cannot be sorted it stops and returns the error; the master then loads
// the tablets from the log itself.
func (s *serverClient) SortLog(ctx context.Context, dead string, sorters []string) error {
	if len(sorters) == 0 {
		return errors.New("cluster: SortLog: no sorters")
	}
	segs, err := s.logSegments(ctx, dead, sorters)
	if err != nil {
		return err
	}
	return sortSegments(ctx, segs, sorters, func(ctx context.Context, sorter string, seg uint64) error {
		c, err := s.tabletControl(sorter)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, sortSegmentTimeout)
		defer cancel()
		_, err = c.SortLogSegment(ctx, &clusterpb.SortLogSegmentRequest{DeadServer: dead, Segment: seg})
		return err
	})
}

// logSegments asks the sorters in turn for the segments of dead's log
// until one answers.
func (s *serverClient) logSegments(ctx context.Context, dead string, sorters []string) ([]uint64, error) {
	var errs []error
	for _, sorter := range sorters {
		c, err := s.tabletControl(sorter)
		if err == nil {
			var resp *clusterpb.ListLogSegmentsResponse
			if resp, err = c.ListLogSegments(ctx, &clusterpb.ListLogSegmentsRequest{DeadServer: dead}); err == nil {
				return resp.GetSegments(), nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", sorter, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("cluster: listing the log of %s: %w", dead, errors.Join(errs...))
}

// sortSegments has sortOne(sorter, segment) run for every segment, on at
// most one segment per sorter at a time, retrying a failed segment on a
// sorter that has not failed it (at most maxSortAttempts attempts, and
// none after a permanent error: codes.DataLoss or NotFound) and retiring
// a sorter after maxSorterFailures failures in a row. It returns nil once
// every segment succeeded, or the first segment's final error (cancelling
// the attempts under way).
func sortSegments(ctx context.Context, segs []uint64, sorters []string, sortOne func(ctx context.Context, sorter string, seg uint64) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type job struct {
		seg    uint64
		failed []bool // by sorter index
		tries  int
	}
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		pending  []*job
		inFlight int
		final    error
	)
	for _, seg := range segs {
		pending = append(pending, &job{seg: seg, failed: make([]bool, len(sorters))})
	}
	// take returns the next job sorter i may run, or nil when there is
	// nothing left for it to do.
	take := func(i int) *job {
		mu.Lock()
		defer mu.Unlock()
		for final == nil && ctx.Err() == nil {
			for k, j := range pending {
				if !j.failed[i] {
					pending = slices.Delete(pending, k, k+1)
					inFlight++
					return j
				}
			}
			if inFlight == 0 {
				return nil // the rest failed here, and nobody else runs
			}
			cond.Wait() // a job under way may fail and come back
		}
		return nil
	}
	done := func(i int, j *job, err error) {
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		defer cond.Broadcast()
		if err == nil {
			return
		}
		j.failed[i] = true
		j.tries++
		code := status.Code(err)
		if j.tries >= min(maxSortAttempts, len(sorters)) || code == codes.DataLoss || code == codes.NotFound {
			if final == nil {
				final = fmt.Errorf("cluster: sorting segment %d on %s: %w", j.seg, sorters[i], err)
				cancel()
			}
			return
		}
		pending = append(pending, j)
	}
	var wg sync.WaitGroup
	for i, sorter := range sorters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failures := 0
			for j := take(i); j != nil; j = take(i) {
				err := sortOne(ctx, sorter, j.seg)
				done(i, j, err)
				if err == nil {
					failures = 0
				} else if failures++; failures >= maxSorterFailures {
					return // the sorter is gone or broken: the others go on
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	switch {
	case final != nil:
		return final
	case ctx.Err() != nil:
		return ctx.Err()
	case len(pending) > 0:
		// Every sorter left has failed each remaining segment.
		return fmt.Errorf("cluster: segment %d of the log failed on every sorter", pending[0].seg)
	}
	return nil
}

func (s *serverClient) Unload(ctx context.Context, server, tabletID string) error {
	c, err := s.tabletControl(server)
	if err != nil {
		return err
	}
	_, err = c.UnloadTablet(ctx, &clusterpb.UnloadTabletRequest{TabletId: tabletID})
	return err
}
