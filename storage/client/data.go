package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Retry rules of the data operations (see dataPlane.do).
const (
	// maxUnavailable bounds the UNAVAILABLE retries of an idempotent
	// operation when its context has no deadline; with one, the deadline
	// is the bound.
	maxUnavailable = 8
	backoffFirst   = 10 * time.Millisecond
	backoffMax     = time.Second
)

// notServingRetries is how the "not serving" answers of one operation (or
// of one tablet's part of a scan) are retried: the first at once (a stale
// cached location: the refresh finds the new one), the next ones after a
// backoff doubling from first to max, at most limit retries in all (and
// never past the context's deadline) — with the defaults about 9 s, the
// time a tablet may be unserved while it is loaded, moved or split on a
// busy machine. Four refreshes in a row without waiting, as before, were
// spent in microseconds while a tablet was still loading (1950 of 2000
// entries of an ApplyBulk failed so). A variable, so that tests of giving
// up need not wait that long.
var notServingRetries = notServingPolicy{limit: 16, first: backoffFirst, max: backoffMax}

// failFastNotServing is the policy of Options.FailFastNotServing: four
// refreshes without a pause.
var failFastNotServing = notServingPolicy{limit: 4}

// notServingPolicy bounds and paces the retries after "not serving".
type notServingPolicy struct {
	limit      int
	first, max time.Duration
}

// wait returns how long to wait before retry n (1, 2, ...).
func (p notServingPolicy) wait(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := p.first
	for i := 2; i < n && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// total is the time the retries wait in all before giving up.
func (p notServingPolicy) total() time.Duration {
	var t time.Duration
	for n := 1; n <= p.limit; n++ {
		t += p.wait(n)
	}
	return t
}

// notServingStreak is shared by the writes of one ApplyBulk that go one by
// one after their batch failed: it bounds the time they spend, together,
// retrying "not serving" since the last write that succeeded to
// notServingRetries.total(), so that a tablet that stays unserved costs
// the bulk that time once, not once per entry. Safe for concurrent use.
type notServingStreak struct {
	mu    sync.Mutex
	since time.Time // zero: no "not serving" since the last success
}

// allow reports whether one more "not serving" retry fits in the streak.
func (s *notServingStreak) allow(budget time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.since.IsZero() {
		s.since = now
	}
	return now.Sub(s.since) <= budget
}

// succeeded ends the streak.
func (s *notServingStreak) succeeded() {
	s.mu.Lock()
	s.since = time.Time{}
	s.mu.Unlock()
}

// dataPlane is the routing state of a Client's data operations: the
// location cache and a connection per tablet server address.
type dataPlane struct {
	c     *Client
	cache *LocationCache

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // dialed by the pool, closed by Close
}

func newDataPlane(c *Client) *dataPlane {
	return &dataPlane{c: c, cache: NewLocationCache(LocationCacheOptions{}), conns: map[string]*grpc.ClientConn{}}
}

// data returns the Client's data plane.
func (c *Client) data() *dataPlane { return c.plane }

// CachedLocation returns the location the client has cached for the
// tablet of table holding row, and whether it has one: where its next
// data operation on row goes without a lookup.
func (c *Client) CachedLocation(table meta.TableID, row []byte) (meta.Location, bool) {
	return c.plane.cache.Lookup(table, row)
}

// CacheLocations tells the client where tablets are, as its caller has
// just read them from METADATA: the data operations on their rows go
// there from now on (LocationCache.Insert: a location older, by epoch,
// than a cached one it overlaps is ignored). A master reading a METADATA
// tablet it found at a server must read it there, not where the client
// last saw it: that may be a server paused since, which never answers
// (a round waited 2 s for it after its death, session 31).
func (c *Client) CacheLocations(locs ...meta.Location) {
	c.plane.cache.Insert(locs...)
}

// closeData closes the connections the pool dialed; the Client's own
// connection is Close's business.
func (c *Client) closeData() {
	dp := c.plane
	dp.mu.Lock()
	defer dp.mu.Unlock()
	for _, cc := range dp.conns {
		cc.Close()
	}
	dp.conns = nil
}

// home is the identity of the server behind the client's own connection.
func (p *dataPlane) home() string { return p.c.cc.Target() }

// conn returns a connection to server: the client's own for its address
// (or an unnamed server), else one from the pool, dialed on first use and
// shared by every tablet on that server. A cluster's server names are
// "<address>/<nonce>"; the connection goes to the address.
func (p *dataPlane) conn(server string) (grpc.ClientConnInterface, error) {
	if server == "" || server == p.home() {
		return p.c.cc, nil
	}
	return p.connAddr(meta.ServerAddr(server))
}

// connAddr returns the connection to the tablet server at addr.
func (p *dataPlane) connAddr(server string) (grpc.ClientConnInterface, error) {
	if server == "" || server == p.home() {
		return p.c.cc, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, errors.New("client: closed")
	}
	if cc, ok := p.conns[server]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(server, p.c.opts.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", server, err)
	}
	p.conns[server] = cc
	return cc, nil
}

// redial makes the connection to server, if it is in reconnect back-off,
// dial again at once: until the back-off ends gRPC fails every call on it
// with the last dial's error, also once a process serves again at the
// address (a server restarted by its supervisor). By the retrier's next
// attempt, after its own back-off, that dial is under way, and a call
// waits for a dial under way rather than failing.
func (p *dataPlane) redial(server string) {
	addr := meta.ServerAddr(server)
	var cc *grpc.ClientConn
	if addr == p.home() {
		cc = p.c.cc
	} else {
		p.mu.Lock()
		cc = p.conns[addr]
		p.mu.Unlock()
	}
	if cc != nil && cc.GetState() == connectivity.TransientFailure {
		cc.ResetConnectBackoff()
	}
}

// tableID resolves a table name as TableName does.
func (c *Client) tableID(table string) (meta.TableID, string, error) {
	name := c.TableName(table)
	id, err := meta.ParseTableName(name)
	if err != nil {
		return meta.TableID{}, "", status.Errorf(codes.InvalidArgument, "client: table %q: %v", table, err)
	}
	return id, name, nil
}

// cluster returns the METADATA locator when the client talks to a cluster,
// nil on `tabula dev`.
func (p *dataPlane) cluster(ctx context.Context) (*metaLocator, error) {
	_, ml, err := p.c.auto.choose(ctx)
	return ml, err
}

// refresh reads every tablet of the table from the locator and caches
// them all (the prefetch: a scan or batch touching many tablets costs one
// lookup). A server the locator leaves unnamed is the client's own. In a
// cluster the table's cached locations are dropped and read again from
// METADATA.
func (p *dataPlane) refresh(ctx context.Context, id meta.TableID, name string) ([]meta.Location, error) {
	ml, err := p.cluster(ctx)
	if err != nil {
		return nil, err
	}
	if ml != nil {
		p.cache.RemoveTable(id)
		return LocateRange(ctx, p.cache, ml.src, id, nil, nil)
	}
	tabs, err := p.c.loc.tablets(ctx, name, nil, nil)
	if err != nil {
		return nil, err
	}
	locs := make([]meta.Location, len(tabs))
	for i, t := range tabs {
		srv := t.server
		if srv == "" {
			srv = p.home()
		}
		locs[i] = meta.Location{Table: id, Start: t.start, End: t.end, Server: srv}
	}
	p.cache.Insert(locs...)
	return locs, nil
}

// locate returns the location of the tablet holding row, from the cache
// or, on a miss, after a refresh (in a cluster: a METADATA lookup, retried
// while the tablet is unassigned; see LocateRange).
func (p *dataPlane) locate(ctx context.Context, id meta.TableID, name string, row []byte) (meta.Location, error) {
	if l, ok := p.cache.Lookup(id, row); ok {
		return l, nil
	}
	ml, err := p.cluster(ctx)
	if err != nil {
		return meta.Location{}, err
	}
	if ml != nil {
		return locateRetry(ctx, p.cache, ml.src, id, row)
	}
	if _, err := p.refresh(ctx, id, name); err != nil {
		return meta.Location{}, err
	}
	if l, ok := p.cache.Lookup(id, row); ok {
		return l, nil
	}
	return meta.Location{}, status.Errorf(codes.Unavailable, "client: no tablet of %s holds row %q", name, row)
}

// tabletsIn returns the locations covering [start, end) (nil end:
// unbounded) in row order, refreshing the cache when it does not cover
// the range.
func (p *dataPlane) tabletsIn(ctx context.Context, id meta.TableID, name string, start, end []byte) ([]meta.Location, error) {
	if locs, ok := p.cache.TabletsInRange(id, start, end); ok {
		return locs, nil
	}
	ml, err := p.cluster(ctx)
	if err != nil {
		return nil, err
	}
	if ml != nil {
		return LocateRange(ctx, p.cache, ml.src, id, start, end)
	}
	if _, err := p.refresh(ctx, id, name); err != nil {
		return nil, err
	}
	if locs, ok := p.cache.TabletsInRange(id, start, end); ok {
		return locs, nil
	}
	return nil, status.Errorf(codes.Unavailable, "client: the tablets of %s do not cover [%q, %q)", name, start, end)
}

// retrier carries one operation's retry state.
type retrier struct {
	idempotent  bool
	notServing  int
	unavailable int
	backoff     time.Duration
	// streak, when set, bounds the "not serving" retries of several
	// operations together (ApplyBulk's entries).
	streak *notServingStreak
}

// retry decides whether err, an answer of the server at loc (zero loc:
// the lookup failed), is retried, invalidating loc or sleeping as needed.
// It returns err (or the context's error) when it is not.
//
// Rules:
//   - a FAILED_PRECONDITION carrying a NotServing detail means the server
//     did not apply or read anything: any operation is retried after
//     dropping the location (LocationCache.Invalidate, which walks up the
//     METADATA hierarchy when the same location fails again) — at once the
//     first time, then with backoff, at most notServingRetries.limit times
//     and while the context's deadline allows the wait; the last answer
//     is returned after that;
//   - DEADLINE_EXCEEDED drops the location and is returned: the next
//     operation looks the tablet up again;
//   - UNAVAILABLE drops the location too (its server may be dead and its
//     tablets reassigned; its connection is made to dial again at once:
//     redial) and is retried with exponential backoff from
//     backoffFirst to backoffMax, while the context allows (and at most
//     maxUnavailable times without a deadline) — only when r.idempotent:
//     the caller sets it for idempotent operations and for requests that
//     certainly reached no server (see do);
//   - a lookup that failed after its own retries (LocateRange's, in a
//     cluster) is not retried again; other errors are not retried.
func (r *retrier) retry(ctx context.Context, p *dataPlane, loc meta.Location, err error) error {
	var le *locateError
	if errors.As(err, &le) {
		return err
	}
	if _, ok := tabletpb.NotServingDetail(err); ok {
		pol := notServingRetries
		if p.c.opts.FailFastNotServing {
			pol = failFastNotServing
		}
		if r.notServing >= pol.limit || r.streak != nil && pol.total() > 0 && !r.streak.allow(pol.total()) {
			return err
		}
		r.notServing++
		if loc.Server != "" {
			p.cache.Invalidate(loc)
		}
		return sleepBefore(ctx, pol.wait(r.notServing), err)
	}
	if status.Code(err) == codes.DeadlineExceeded && loc.Server != "" {
		// Not retried (the deadline is the operation's), but the next
		// operation looks the tablet up again: its server may be paused
		// or cut off, answering nothing while the tablet is recovered
		// elsewhere — a tablet server committing a split kept sending it
		// to a paused root holder until that process exited (session 31).
		p.cache.Invalidate(loc)
		return err
	}
	if status.Code(err) != codes.Unavailable {
		return err
	}
	if loc.Server != "" {
		p.cache.Invalidate(loc)
		p.redial(loc.Server)
	}
	if !r.idempotent {
		return err
	}
	if _, ok := ctx.Deadline(); !ok && r.unavailable >= maxUnavailable {
		return err
	}
	r.unavailable++
	if r.backoff == 0 {
		r.backoff = backoffFirst
	}
	if err := sleepBefore(ctx, r.backoff, err); err != nil {
		return err
	}
	r.backoff = min(2*r.backoff, backoffMax)
	return nil
}

// sleepBefore waits d before a retry and returns nil, or returns err at
// once when ctx's deadline would pass first, or when ctx ends meanwhile.
func sleepBefore(ctx context.Context, d time.Duration, err error) error {
	if d <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return err
	case <-t.C:
		return nil
	}
}

// trackedConn wraps a connection to learn whether a call reached the
// network: gRPC fills a grpc.Peer call option only when the call got a
// transport stream, so a call that fails UNAVAILABLE with no peer never
// left the client (no connection to the server could be made — it is dead
// or gone): a write that certainly was not applied. One call at a time.
type trackedConn struct {
	grpc.ClientConnInterface
	peer peer.Peer
}

func (t *trackedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return t.ClientConnInterface.Invoke(ctx, method, args, reply, append(opts, grpc.Peer(&t.peer))...)
}

func (t *trackedConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return t.ClientConnInterface.NewStream(ctx, desc, method, append(opts, grpc.Peer(&t.peer))...)
}

// unsent reports whether err, the outcome of the call made through t,
// certainly reached no server. The peer is read only after an UNAVAILABLE
// outcome, when gRPC has finished the call (a stream's context watcher may
// otherwise still write it).
func (t *trackedConn) unsent(err error) bool {
	return status.Code(err) == codes.Unavailable && t.peer.Addr == nil
}

// do runs fn against the server of the tablet holding row, retrying by
// the rules of retrier.retry: "not serving" always; UNAVAILABLE when
// idempotent, or when the request certainly was not sent (the lookup
// failed before it, or gRPC had no connection to send it on: trackedConn).
// A non-idempotent request that may have reached the server is never
// sent twice.
//
// For a write (w not nil), an attempt that failed after reaching a server
// in a way that leaves its effect open (UNAVAILABLE, DEADLINE_EXCEEDED: it
// may have been applied) makes the write's error, when the attempts after
// it fail too, an OutcomeUnknownError: their error alone ("not serving",
// say) would claim the write was not applied. w.earlier is such a failure
// of an attempt made before do (ApplyBulk's batch), or nil.
func (p *dataPlane) do(ctx context.Context, id meta.TableID, name string, row []byte, idempotent bool, w *writeAttempts,
	fn func(ctx context.Context, cc grpc.ClientConnInterface) error) error {
	r := retrier{idempotent: idempotent}
	if w != nil {
		r.streak = w.streak
	}
	for {
		unsent := true // nothing was sent
		loc, err := p.locate(ctx, id, name, row)
		if err == nil {
			var cc grpc.ClientConnInterface
			if cc, err = p.conn(loc.Server); err == nil {
				tc := &trackedConn{ClientConnInterface: cc}
				if err = fn(ctx, tc); err == nil {
					if r.streak != nil {
						r.streak.succeeded()
					}
					return nil
				}
				unsent = tc.unsent(err)
				if w != nil && !unsent && mayHaveApplied(err) && w.earlier == nil {
					w.earlier = err
				}
			}
		}
		idem := r.idempotent
		r.idempotent = idem || unsent
		rerr := r.retry(ctx, p, loc, err)
		r.idempotent = idem
		if rerr != nil {
			if w != nil && w.earlier != nil && rerr != w.earlier {
				return &OutcomeUnknownError{Earlier: w.earlier, Last: rerr}
			}
			return rerr
		}
	}
}

// writeAttempts is what do knows of a write's earlier attempts.
type writeAttempts struct {
	// earlier is the first failure of an attempt that may have applied
	// the write; nil if none did.
	earlier error
	// streak, when set, is shared with other writes (see
	// notServingStreak); nil: the write's own retries bound it.
	streak *notServingStreak
}

// mayHaveApplied reports whether err, the failure of a write's attempt
// that reached a server, leaves open whether the write was applied.
func mayHaveApplied(err error) bool {
	if _, ns := tabletpb.NotServingDetail(err); ns {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		return true
	}
	return false
}

// ErrOutcomeUnknown is matched (errors.Is) by an OutcomeUnknownError.
var ErrOutcomeUnknown = errors.New("client: the write's outcome is unknown")

// OutcomeUnknownError is the error of a write retried after an attempt
// that may have applied it (Earlier: it failed after reaching a server —
// a connection lost, a deadline), whose later attempts failed too (Last:
// "not serving", say). Whether the write took effect is unknown, whatever
// Last says: it stands for the write's last attempt only. Its gRPC status
// is UNAVAILABLE, and it matches ErrOutcomeUnknown; it does not unwrap to
// Last, so that no caller reads Last's "not applied" into it.
type OutcomeUnknownError struct {
	Earlier, Last error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("client: the write's outcome is unknown: an attempt failed after reaching its server (%v), so it may have been applied; the last attempt: %v", e.Earlier, e.Last)
}

// Is matches ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// GRPCStatus is UNAVAILABLE with the error's message.
func (e *OutcomeUnknownError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// Idempotent reports whether applying rm twice is the same as applying it
// once: it has no SetCell with cell.ServerTimestamp and no AddToCell or
// MergeToCell (a counter would count twice). Only idempotent mutations are
// retried after UNAVAILABLE.
func Idempotent(rm cell.RowMutation) bool {
	for _, m := range rm.Mutations {
		if m.Kind == cell.SetCell && m.Timestamp == cell.ServerTimestamp {
			return false
		}
		if m.Kind == cell.AddToCell || m.Kind == cell.MergeToCell {
			return false
		}
	}
	return true
}

// MutationsToPB converts mutations to the wire form.
func MutationsToPB(ms []cell.Mutation) []*bigtablepb.Mutation {
	out := make([]*bigtablepb.Mutation, len(ms))
	for i, m := range ms {
		switch m.Kind {
		case cell.SetCell:
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
				FamilyName: m.Family, ColumnQualifier: m.Qualifier, TimestampMicros: m.Timestamp, Value: m.Value}}}
		case cell.DeleteFromColumn:
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_DeleteFromColumn_{DeleteFromColumn: &bigtablepb.Mutation_DeleteFromColumn{
				FamilyName: m.Family, ColumnQualifier: m.Qualifier,
				TimeRange: &bigtablepb.TimestampRange{StartTimestampMicros: m.StartTimestamp, EndTimestampMicros: m.EndTimestamp}}}}
		case cell.DeleteFromFamily:
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_DeleteFromFamily_{DeleteFromFamily: &bigtablepb.Mutation_DeleteFromFamily{FamilyName: m.Family}}}
		case cell.AddToCell:
			// The input travels as its 8 big-endian bytes, which the
			// server reads as the Int64 input (int_value or raw_value).
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_AddToCell_{AddToCell: &bigtablepb.Mutation_AddToCell{
				FamilyName:      m.Family,
				ColumnQualifier: &bigtablepb.Value{Kind: &bigtablepb.Value_RawValue{RawValue: m.Qualifier}},
				Timestamp:       &bigtablepb.Value{Kind: &bigtablepb.Value_RawTimestampMicros{RawTimestampMicros: m.Timestamp}},
				Input:           &bigtablepb.Value{Kind: &bigtablepb.Value_RawValue{RawValue: m.Value}}}}}
		case cell.MergeToCell:
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_MergeToCell_{MergeToCell: &bigtablepb.Mutation_MergeToCell{
				FamilyName:      m.Family,
				ColumnQualifier: &bigtablepb.Value{Kind: &bigtablepb.Value_RawValue{RawValue: m.Qualifier}},
				Timestamp:       &bigtablepb.Value{Kind: &bigtablepb.Value_RawTimestampMicros{RawTimestampMicros: m.Timestamp}},
				Input:           &bigtablepb.Value{Kind: &bigtablepb.Value_RawValue{RawValue: m.Value}}}}}
		default:
			out[i] = &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}}
		}
	}
	return out
}

// Apply applies rm atomically (the paper's Apply of a RowMutation). It is
// routed to the server of rm.Row's tablet; "not serving" answers refresh
// the location and retry; UNAVAILABLE is retried with backoff when rm is
// Idempotent, or when the request certainly reached no server.
func (c *Client) Apply(ctx context.Context, table string, rm cell.RowMutation) error {
	id, name, err := c.tableID(table)
	if err != nil {
		return err
	}
	req := &bigtablepb.MutateRowRequest{TableName: name, RowKey: rm.Row, Mutations: MutationsToPB(rm.Mutations)}
	return c.data().do(ctx, id, name, rm.Row, Idempotent(rm), &writeAttempts{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		_, err := bigtablepb.NewBigtableClient(cc).MutateRow(ctx, req)
		return err
	})
}

// CheckAndMutate reads row, applies ifTrue when predicate (a
// bigtablepb.RowFilter, nil: the row has any cell) yields a cell and
// ifFalse otherwise, atomically, and reports whether it matched. It is
// retried after "not serving" answers, and after UNAVAILABLE only when
// the request certainly reached no server (otherwise the mutation may
// have been applied).
func (c *Client) CheckAndMutate(ctx context.Context, table string, row []byte, predicate *bigtablepb.RowFilter, ifTrue, ifFalse []cell.Mutation) (bool, error) {
	id, name, err := c.tableID(table)
	if err != nil {
		return false, err
	}
	req := &bigtablepb.CheckAndMutateRowRequest{TableName: name, RowKey: row, PredicateFilter: predicate,
		TrueMutations: MutationsToPB(ifTrue), FalseMutations: MutationsToPB(ifFalse)}
	var matched bool
	err = c.data().do(ctx, id, name, row, false, &writeAttempts{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := bigtablepb.NewBigtableClient(cc).CheckAndMutateRow(ctx, req)
		matched = resp.GetPredicateMatched()
		return err
	})
	return matched, err
}

// ReadModifyWriteRule is one rule of ReadModifyWrite: append Append to the
// column's latest value, or (Append nil) add Increment to it as a
// big-endian 64-bit integer (a missing cell counts as 0).
type ReadModifyWriteRule struct {
	Family    string
	Qualifier []byte
	Append    []byte
	Increment int64
}

// ReadModifyWrite applies rules atomically to row and returns the new
// cells of the columns it changed. Retried after UNAVAILABLE only when the
// request certainly reached no server.
func (c *Client) ReadModifyWrite(ctx context.Context, table string, row []byte, rules []ReadModifyWriteRule) (cell.Row, error) {
	id, name, err := c.tableID(table)
	if err != nil {
		return cell.Row{}, err
	}
	req := &bigtablepb.ReadModifyWriteRowRequest{TableName: name, RowKey: row}
	for _, r := range rules {
		pr := &bigtablepb.ReadModifyWriteRule{FamilyName: r.Family, ColumnQualifier: r.Qualifier}
		if r.Append != nil {
			pr.Rule = &bigtablepb.ReadModifyWriteRule_AppendValue{AppendValue: r.Append}
		} else {
			pr.Rule = &bigtablepb.ReadModifyWriteRule_IncrementAmount{IncrementAmount: r.Increment}
		}
		req.Rules = append(req.Rules, pr)
	}
	var out cell.Row
	err = c.data().do(ctx, id, name, row, false, &writeAttempts{}, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := bigtablepb.NewBigtableClient(cc).ReadModifyWriteRow(ctx, req)
		if err != nil {
			return err
		}
		out = rowFromPB(resp.GetRow())
		return nil
	})
	return out, err
}

// Increment adds delta to the counter family:qualifier of row (a 64-bit
// big-endian integer; missing counts as 0) and returns the new value.
func (c *Client) Increment(ctx context.Context, table string, row []byte, family string, qualifier []byte, delta int64) (int64, error) {
	r, err := c.ReadModifyWrite(ctx, table, row, []ReadModifyWriteRule{{Family: family, Qualifier: qualifier, Increment: delta}})
	if err != nil {
		return 0, err
	}
	if len(r.Cells) == 0 || len(r.Cells[0].Value) != 8 {
		return 0, status.Errorf(codes.Internal, "client: increment of %q returned no 8-byte cell", row)
	}
	var v int64
	for _, b := range r.Cells[0].Value {
		v = v<<8 | int64(b)
	}
	return v, nil
}

// rowFromPB converts a whole row (ReadModifyWrite's answer).
func rowFromPB(r *bigtablepb.Row) cell.Row {
	out := cell.Row{Key: r.GetKey()}
	for _, f := range r.GetFamilies() {
		for _, col := range f.GetColumns() {
			for _, c := range col.GetCells() {
				out.Cells = append(out.Cells, cell.Cell{Family: f.GetName(), Qualifier: col.GetQualifier(), Timestamp: c.GetTimestampMicros(), Value: c.GetValue()})
			}
		}
	}
	return out
}

// TabletInfo is one tablet of a table: its rows [Start, End) (nil End: the
// end of the table) and the address of the server holding it. This is
// what MapReduce and Beam split on.
type TabletInfo struct {
	Start, End []byte
	Server     string
}

// Tablets lists the table's tablets in row order, read fresh from the
// locator (which also refreshes the location cache): in a cluster from
// METADATA, with each server's address (meta.ServerAddr of its name).
func (c *Client) Tablets(ctx context.Context, table string) ([]TabletInfo, error) {
	id, name, err := c.tableID(table)
	if err != nil {
		return nil, err
	}
	locs, err := c.data().refresh(ctx, id, name)
	if err != nil {
		return nil, err
	}
	ml, err := c.data().cluster(ctx) // chosen by refresh: no RPC
	if err != nil {
		return nil, err
	}
	out := make([]TabletInfo, len(locs))
	for i, l := range locs {
		out[i] = TabletInfo{Start: l.Start, End: l.End, Server: l.Server}
		if ml != nil {
			out[i].Server = meta.ServerAddr(l.Server)
		}
	}
	return out, nil
}

// RowSample is one key of SampleRowKeys: rows before Key hold about
// Offset bytes of the table.
type RowSample struct {
	Key    []byte
	Offset int64
}

// SampleRowKeys returns keys splitting the table into pieces of roughly
// equal size, in order, the last one empty (the end of the table). Each
// server holding tablets of the table is asked once; the offsets are
// accumulated across servers in key order.
func (c *Client) SampleRowKeys(ctx context.Context, table string) ([]RowSample, error) {
	id, name, err := c.tableID(table)
	if err != nil {
		return nil, err
	}
	p := c.data()
	locs, err := p.refresh(ctx, id, name)
	if err != nil {
		return nil, err
	}
	type piece struct {
		key  []byte
		size int64
	}
	var pieces []piece
	seen := map[string]bool{}
	for _, l := range locs {
		if seen[l.Server] {
			continue
		}
		seen[l.Server] = true
		var samples []*bigtablepb.SampleRowKeysResponse
		err := p.do(ctx, id, name, l.Start, true, nil, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			samples = samples[:0]
			st, err := bigtablepb.NewBigtableClient(cc).SampleRowKeys(ctx, &bigtablepb.SampleRowKeysRequest{TableName: name})
			if err != nil {
				return err
			}
			for {
				r, err := st.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				samples = append(samples, r)
			}
		})
		if err != nil {
			return nil, err
		}
		var prev int64
		for _, s := range samples {
			pieces = append(pieces, piece{key: s.GetRowKey(), size: s.GetOffsetBytes() - prev})
			prev = s.GetOffsetBytes()
		}
	}
	// Order by key, the empty key (end of table) last; merge duplicates.
	sort.SliceStable(pieces, func(i, j int) bool { return tabletdesc.CompareEnds(pieces[i].key, pieces[j].key) < 0 })
	var out []RowSample
	var off int64
	for _, pc := range pieces {
		off += pc.size
		if n := len(out); n > 0 && bytes.Equal(out[n-1].Key, pc.key) {
			out[n-1].Offset = off
			continue
		}
		out = append(out, RowSample{Key: pc.key, Offset: off})
	}
	return out, nil
}

// FilterOf returns the RowFilter selecting what opts asks of each row's
// cells (families, column regex, time range, versions, then opts.Filter),
// nil for all.
func FilterOf(opts ScanOptions) *bigtablepb.RowFilter {
	var chain []*bigtablepb.RowFilter
	if len(opts.Families) > 0 {
		q := make([]string, len(opts.Families))
		for i, f := range opts.Families {
			q[i] = regexp.QuoteMeta(f)
		}
		chain = append(chain, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: strings.Join(q, "|")}})
	}
	if opts.ColumnRegex != "" {
		chain = append(chain, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte(opts.ColumnRegex)}})
	}
	if opts.StartTime != 0 || opts.EndTime != 0 {
		chain = append(chain, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_TimestampRangeFilter{TimestampRangeFilter: &bigtablepb.TimestampRange{
			StartTimestampMicros: opts.StartTime, EndTimestampMicros: opts.EndTime}}})
	}
	if opts.MaxVersions > 0 {
		chain = append(chain, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: int32(opts.MaxVersions)}})
	}
	if opts.Filter != nil {
		chain = append(chain, opts.Filter)
	}
	switch len(chain) {
	case 0:
		return nil
	case 1:
		return chain[0]
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: chain}}}
}
