package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// ScriptOptions say where and how a script runs. The zero value runs it
// over the whole table under the servers' default limits.
type ScriptOptions struct {
	// Name names the script in error messages (a file name); default
	// "script".
	Name string
	// Start and End bound the rows to [Start, End) (empty End: the end of
	// the table); Prefix, instead, selects the rows that start with it.
	Start, End, Prefix []byte
	// Filter, when set, is applied to each row before the script sees
	// it: the script sees the cells that pass, rows left empty are
	// skipped, and kept rows come back with the filtered cells.
	Filter *bigtablepb.RowFilter
	// Limits asked for each server's run; zero fields take the server's
	// default, and each server clamps them to its maxima.
	Limits scripts.Limits
	// Stats, when not nil, receives the runs' counters summed over the
	// servers.
	Stats *ScriptStats
}

// ScriptStats are the counters of a script's runs, summed.
type ScriptStats struct {
	Runs        int   // Run RPCs (one per server span)
	RowsScanned int64 // rows read from the tablets
	Rows        int64 // rows the script processed (after the filter)
	Kept        int64 // rows it kept (filter mode)
	Steps       int64
}

// Row is a row the script kept, with the cells the request's filter let
// through, in Bigtable order (family, qualifier, timestamp descending).
type Row struct {
	Key   []byte
	Cells []Cell
}

// Cell is one cell version of a kept row, with the labels the filter's
// apply_label_transformer gave it.
type Cell struct {
	cell.Cell
	Labels []string
}

// RunScript runs the script src over the rows of table (a table ID or a
// full name) inside the servers that hold them and returns its tables,
// merged over every server. src is compiled here first: a script that
// does not compile fails with a *scripts.CompileError before any RPC.
// A run that fails on a server fails the call with that server's status:
// RESOURCE_EXHAUSTED naming the bound, INVALID_ARGUMENT for a run-time
// error of the script, and so on. Rows a filter script keeps are not
// returned (see FilterRows).
func (c *Client) RunScript(ctx context.Context, table, src string, opts ScriptOptions) (*scripts.Result, error) {
	p, err := c.script(ctx, table, src, opts, nil)
	if err != nil {
		return nil, err
	}
	return p.Result(), nil
}

// RunScriptPartial is RunScript returning the merged partial aggregates
// instead of the finalized tables: what a caller that merges runs over
// several ranges (a MapReduce task per split) keeps, marshals and merges.
// Errors are RunScript's.
func (c *Client) RunScriptPartial(ctx context.Context, table, src string, opts ScriptOptions) (*scripts.Partial, error) {
	return c.script(ctx, table, src, opts, nil)
}

// FilterRows runs the filter script src (one that emits to keep) over the
// rows of table and calls fn with each kept row, in key order, until fn
// returns false; only kept rows cross the network. It returns the
// script's other tables (a filter may also emit), or nil when fn stopped
// the read. Errors are RunScript's.
func (c *Client) FilterRows(ctx context.Context, table, src string, opts ScriptOptions, fn func(Row) bool) (*scripts.Result, error) {
	if fn == nil {
		return nil, errors.New("client: FilterRows needs a row callback")
	}
	p, err := c.script(ctx, table, src, opts, fn)
	if err != nil || p == nil {
		return nil, err
	}
	return p.Result(), nil
}

// errStopped is returned inside when a FilterRows callback says stop.
var errStopped = errors.New("stopped by the caller")

func (c *Client) script(ctx context.Context, table, src string, opts ScriptOptions, fn func(Row) bool) (*scripts.Partial, error) {
	name := opts.Name
	if name == "" {
		name = "script"
	}
	prog, err := scripts.Compile(name, src)
	if err != nil {
		return nil, err
	}
	if fn != nil && !prog.IsFilter() {
		return nil, fmt.Errorf("%s: not a filter script: it never emits to keep", name)
	}
	start, end := opts.Start, opts.End
	if len(opts.Prefix) > 0 {
		if len(start) > 0 || len(end) > 0 {
			return nil, errors.New("client: Prefix cannot be combined with Start or End")
		}
		start, end = opts.Prefix, cell.PrefixSuccessor(opts.Prefix)
	}
	if (tabletdesc.KeyRange{Start: start, End: end}).Empty() {
		return nil, fmt.Errorf("client: Start %q is not before End %q", start, end)
	}
	if len(end) == 0 {
		end = nil
	}
	// RunScript wants only the tables: a filter script's rows stay on
	// the servers.
	req := &scriptpb.RunRequest{TableName: c.TableName(table), Name: name, Source: src, Limits: limitsProto(opts.Limits), OmitRows: fn == nil}
	if opts.Filter != nil {
		if req.Filter, err = proto.Marshal(opts.Filter); err != nil {
			return nil, fmt.Errorf("client: filter: %w", err)
		}
	}
	tabs, err := c.loc.tablets(ctx, req.TableName, start, end)
	if err != nil {
		return nil, err
	}
	sp, err := spans(tabs, start, end)
	if err != nil {
		return nil, err
	}
	total := prog.NewPartial()
	var stats ScriptStats
	var mu sync.Mutex // guards total and stats
	merge := func(resp *scriptpb.RunResponse) error {
		p := prog.NewPartial()
		if err := p.UnmarshalBinary(resp.GetPartial()); err != nil {
			return fmt.Errorf("client: partial of %s: %w", name, err)
		}
		mu.Lock()
		defer mu.Unlock()
		st := resp.GetStats()
		stats.Runs++
		stats.RowsScanned += st.GetRowsScanned()
		stats.Rows += st.GetRows()
		stats.Kept += st.GetKept()
		stats.Steps += st.GetSteps()
		return total.Merge(p)
	}
	if fn != nil {
		// Kept rows come back in key order: one span after the other.
		for _, s := range sp {
			err := c.runSpanRetry(ctx, s, req, merge, fn)
			if errors.Is(err, errStopped) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
		}
	} else if err := c.fanOut(ctx, sp, req, merge); err != nil {
		return nil, err
	}
	if opts.Stats != nil {
		*opts.Stats = stats
	}
	return total, nil
}

// fanOut runs req on every span, Options.Concurrency at a time; the first
// error cancels the others.
func (c *Client) fanOut(ctx context.Context, sp []span, req *scriptpb.RunRequest, merge func(*scriptpb.RunResponse) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, c.opts.Concurrency)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, s := range sp {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.runSpanRetry(ctx, s, req, merge, nil); err != nil {
				once.Do(func() { first = err; cancel(err) })
			}
		}()
	}
	wg.Wait()
	return first
}

// runSpanRetry runs req over s with runSpan. When a Run fails with "not
// serving" (the tablet moved) or UNAVAILABLE (its server died) before it
// delivered anything — no kept row handed to fn, no partial merged — the
// span's cached locations are dropped, its rows looked up again and run
// over the new spans, in key order: with the data operations' retry rules
// (retrier; a Run is a read, so running it again is safe), under the
// caller's deadline. A Run that failed after delivering rows fails the
// call: its rows cannot be taken back.
func (c *Client) runSpanRetry(ctx context.Context, s span, req *scriptpb.RunRequest, merge func(*scriptpb.RunResponse) error, fn func(Row) bool) error {
	r := retrier{idempotent: true}
	queue := []span{s}
	for len(queue) > 0 {
		cur := queue[0]
		delivered := false
		f := fn
		if fn != nil {
			f = func(row Row) bool { delivered = true; return fn(row) }
		}
		m := func(resp *scriptpb.RunResponse) error { delivered = true; return merge(resp) }
		err := runSpan(ctx, cur, req, m, f)
		if err == nil {
			queue = queue[1:]
			continue
		}
		_, notServing := tabletpb.NotServingDetail(err)
		if delivered || !notServing && status.Code(err) != codes.Unavailable {
			return err
		}
		for _, l := range cur.locs {
			c.plane.cache.Invalidate(l)
		}
		if rerr := r.retry(ctx, c.plane, meta.Location{}, err); rerr != nil {
			return rerr
		}
		tabs, err := c.loc.tablets(ctx, req.GetTableName(), cur.start, cur.end)
		if err != nil {
			return err
		}
		sub, err := spans(tabs, cur.start, cur.end)
		if err != nil {
			return err
		}
		queue = append(sub, queue[1:]...)
	}
	return nil
}

// runSpan runs req over one span and hands its partial to merge and its
// kept rows to fn (when not nil).
func runSpan(ctx context.Context, s span, req *scriptpb.RunRequest, merge func(*scriptpb.RunResponse) error, fn func(Row) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a stopped read cancels the stream
	r := proto.Clone(req).(*scriptpb.RunRequest)
	r.StartKey, r.EndKey = s.start, s.end
	stream, err := scriptsClient(s.conn).Run(ctx, r)
	if err != nil {
		return err
	}
	done := false
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			if !done {
				return status.Errorf(codes.Internal, "%s: the server ended the run without its result", s.server)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if fn != nil {
			for _, pr := range resp.GetRows() {
				if !fn(rowFromProto(pr)) {
					return errStopped
				}
			}
		}
		if resp.GetStats() != nil {
			if err := merge(resp); err != nil {
				return err
			}
			done = true
		}
	}
}

func rowFromProto(pr *scriptpb.Row) Row {
	r := Row{Key: pr.GetKey(), Cells: make([]Cell, len(pr.GetCells()))}
	for i, pc := range pr.GetCells() {
		r.Cells[i] = Cell{Cell: cell.Cell{Family: pc.GetFamily(), Qualifier: pc.GetQualifier(), Timestamp: pc.GetTimestampMicros(), Value: pc.GetValue()}, Labels: pc.GetLabels()}
	}
	return r
}

// limitsProto converts limits; a wall time below a millisecond rounds up
// so that it is not read as "the default".
func limitsProto(l scripts.Limits) *scriptpb.Limits {
	ms := l.Time.Milliseconds()
	if l.Time > 0 && ms == 0 {
		ms = 1
	}
	return &scriptpb.Limits{Steps: l.Steps, MemoryBytes: l.Memory, TimeMillis: ms, CallDepth: int32(l.Depth)}
}
