package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/ctxtime"
	"github.com/tabuladb/tabula/internal/fanout"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Locator finds tablet locations (the cluster implements it with the
// client's METADATA location cache).
type Locator interface {
	// Tablets returns the locations of table's tablets overlapping
	// [start, end) (nil end: unbounded), in key order, covering the range
	// without gaps. Errors that are gRPC statuses reach the caller as
	// they are; others become UNAVAILABLE.
	Tablets(ctx context.Context, table meta.TableID, start, end []byte) ([]meta.Location, error)
	// Invalidate drops a location found stale (its server answered "not
	// serving").
	Invalidate(loc meta.Location)
}

// Options configure New.
type Options struct {
	// Self is this server's address: a location whose
	// meta.ServerAddr(loc.Server) == Self is served by the local
	// DataService. Required.
	Self string
	// Locator finds the owners of rows. Required.
	Locator Locator
	// Dial returns a connection to the tablet server at addr. The
	// connections are cached and owned by the caller: the Gateway never
	// closes them. Required.
	Dial func(addr string) (grpc.ClientConnInterface, error)
	// PointReads forwards point reads (ReadRows of a few row keys) over
	// one long-lived stream per owner instead of a stream each; the
	// owners must have registered RegisterPointReads (an owner that has
	// not gets streams of its own). Only without per-call credentials:
	// the shared stream carries one identity.
	PointReads bool
	// Registerer receives the gateway's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger; default the local DataService's.
	Logger *slog.Logger
}

// Retries of a sub-request whose owner answered "not serving": the
// location is invalidated, looked up again and the sub-request retried,
// with a backoff doubling from firstBackoff to maxBackoff.
const (
	maxAttempts  = 20
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// ForwardedKey is the gRPC metadata key a Gateway sets on the
// requests it forwards. A Gateway serves such a request with its local
// DataService, without routing it again: an owner that no longer holds the
// tablet answers "not serving" to the Gateway that forwarded, which looks
// the rows up again, rather than forwarding once more (two servers with
// stale caches would pass a request back and forth until its deadline).
const ForwardedKey = "x-tabula-forwarded"

// isForwarded reports whether the request of ctx came from a Gateway.
func isForwarded(ctx context.Context) bool {
	// Not FromIncomingContext: it copies every header of the request
	// (4% of an entry server's CPU under point reads).
	return len(metadata.ValueFromIncomingContext(ctx, ForwardedKey)) > 0
}

// forwardContext marks the outgoing request of ctx as forwarded. The
// caller's deadline carries over.
func forwardContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, ForwardedKey, "1")
}

// Routes of tabula_gateway_requests_total.
const (
	routeLocal     = "local"
	routeForwarded = "forwarded"
)

// Gateway is the google.bigtable.v2.Bigtable service of a tablet server in
// a cluster: it answers the whole data API for every table, serving the
// rows of the tablets this server holds through the local DataService and
// forwarding the rest to their owners, so that a client that knows one
// server's address (BIGTABLE_EMULATOR_HOST) reaches the whole cluster.
// Register it in place of the DataService, with the same server options,
// tabletserver.ServerCodec (or Codec) among them: forwarded reads are
// relayed in their wire form (tabletserver.EncodedReadRows), which only that
// codec sends.
//
// Routing, per method (Cloud Bigtable's semantics are kept; the owners
// implement them):
//   - MutateRow, CheckAndMutateRow, ReadModifyWriteRow go to the owner of
//     the row's tablet, unchanged, with the caller's deadline.
//   - MutateRows groups its entries by owner and sends the groups
//     concurrently; the response carries one status per original entry
//     (an error of a whole group becomes the status of each of its
//     entries; an owner's "entries[j]" in a message is renumbered to the
//     caller's index). Only the entries that met "not serving" are
//     retried. The request-wide limits (no entries, total mutations) are
//     checked here, before splitting.
//   - ReadRows splits the row set by tablet and reads the tablets one
//     after the other in key order (reverse order when reversed), each
//     through one sub-request restricted to the tablet's part, with the
//     filter unchanged and rows_limit reduced by the rows already
//     returned. The owners' responses are relayed as they arrive, so each
//     still ends at a row boundary. request_stats are dropped;
//     last_scanned_row_key is passed through.
//   - SampleRowKeys asks each owner once and keeps, for each tablet, the
//     owner's samples within it; offsets are re-based so that they add up
//     across tablets; every tablet boundary is a sample, and the last
//     sample is the empty key with the table's total size. A not-serving
//     answer retries the whole sample.
//   - Every other method (PingAndWarm, ExecuteQuery, ...) is the local
//     DataService's.
//
// Forwarded requests carry the metadata key ForwardedKey, and a
// Gateway serves a request carrying it locally, whatever its locations
// say: a request is forwarded at most once.
//
// When a sub-request (local or forwarded) fails with FAILED_PRECONDITION
// carrying a tabletpb.NotServing detail, or the location names no server,
// the Gateway invalidates the location, looks the rows up again and
// retries, up to 20 attempts (about 9 s: a tablet moving or splitting is unserved for a moment) with a backoff doubling from 10 ms to 500 ms,
// and never past the request's deadline: then the last not-serving status
// is returned with its code made UNAVAILABLE (gaveUp: the official clients
// retry that, not FAILED_PRECONDITION; UNAVAILABLE too for an unassigned
// tablet). A ReadRows retry resumes after the last row already sent;
// attempts that returned rows do not count. UNAVAILABLE from another
// server (dead or unreachable: its tablets will move) is retried the same
// way, except for a non-idempotent single-row write (ReadModifyWriteRow,
// CheckAndMutateRow, a MutateRow with AddToCell, MergeToCell or a
// server-timestamp SetCell) that may have reached the owner: that one is
// returned, an unknown outcome, and never applied twice. So is such a
// write that this server applied itself when its lease lapsed before the
// acknowledgement (only tabletserver.WriteRefused, nothing applied, is
// retried). Every other error (of the
// owners, of Dial, of the connection) is returned unchanged; errors of the
// Locator that are not gRPC statuses become UNAVAILABLE.
//
// Metrics: tabula_gateway_requests_total{method, route} counts
// sub-requests by route ("local" or "forwarded"),
// tabula_gateway_retries_total the not-serving retries.
type Gateway struct {
	bigtablepb.UnimplementedBigtableServer
	local     *tabletserver.DataService
	opts      Options
	log       *slog.Logger
	metrics   gatewayMetrics
	forwarded atomic.Int64

	prMu sync.Mutex
	pr   map[string]*pointReadsClient // by owner address
}

type gatewayMetrics struct {
	requests *prometheus.CounterVec
	retries  prometheus.Counter
}

// New returns the gateway over local, the DataService of this
// server's Host.
func New(local *tabletserver.DataService, opts Options) (*Gateway, error) {
	switch {
	case local == nil:
		return nil, errors.New("gateway: New: nil DataService")
	case opts.Self == "":
		return nil, errors.New("gateway: New: Options.Self is required")
	case opts.Locator == nil:
		return nil, errors.New("gateway: New: Options.Locator is required")
	case opts.Dial == nil:
		return nil, errors.New("gateway: New: Options.Dial is required")
	}
	if opts.Logger == nil {
		opts.Logger = local.Logger()
	}
	g := &Gateway{local: local, opts: opts, log: opts.Logger}
	g.metrics.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tabula_gateway_requests_total",
		Help: "Sub-requests of the data API gateway, by method and route (local or forwarded to the owner).",
	}, []string{"method", "route"})
	g.metrics.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tabula_gateway_retries_total",
		Help: "Sub-requests of the data API gateway retried after their tablet's server answered not serving.",
	})
	if r := opts.Registerer; r != nil {
		var err error
		if g.metrics.requests, err = registerOrExisting(r, g.metrics.requests); err != nil {
			return nil, err
		}
		if g.metrics.retries, err = registerOrExisting(r, g.metrics.retries); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// registerOrExisting registers c, or returns the collector already
// registered under its name (a second Gateway on one registry).
func registerOrExisting[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex, nil
			}
		}
		return c, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	return c, nil
}

// Forwarded returns the number of sub-requests sent to other servers.
func (g *Gateway) Forwarded() int64 { return g.forwarded.Load() }

// route reports whether loc is served here, counting the sub-request. A
// tablet a partial (cluster) Host serves is served here whatever the
// location says:
// the gateway's cache may be older than the client's, and a request that
// reached the tablet's server must not make a hop.
func (g *Gateway) route(method string, loc meta.Location) bool {
	if meta.ServerAddr(loc.Server) == g.opts.Self || g.local.ServesTablet(loc.Table, loc.TabletID) {
		g.countLocal(method)
		return true
	}
	g.metrics.requests.WithLabelValues(method, routeForwarded).Inc()
	g.forwarded.Add(1)
	return false
}

// countLocal counts a sub-request served by the local DataService.
func (g *Gateway) countLocal(method string) {
	g.metrics.requests.WithLabelValues(method, routeLocal).Inc()
}

// client returns a Bigtable client to loc's server.
func (g *Gateway) client(loc meta.Location) (bigtablepb.BigtableClient, error) {
	conn, err := g.conn(loc)
	if err != nil {
		return nil, err
	}
	return bigtablepb.NewBigtableClient(conn), nil
}

// conn returns the connection to loc's server.
func (g *Gateway) conn(loc meta.Location) (grpc.ClientConnInterface, error) {
	addr := meta.ServerAddr(loc.Server)
	conn, err := g.opts.Dial(addr)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Errorf(codes.Unavailable, "connecting to tablet server %s: %v", addr, err)
	}
	return conn, nil
}

// sentConn learns whether a unary call reached the network: gRPC fills a
// grpc.Peer call option only once the call got a transport stream, so a
// call that fails with no peer was never sent (no connection to the server
// could be made). One call at a time.
type sentConn struct {
	grpc.ClientConnInterface
	peer peer.Peer
}

func (s *sentConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return s.ClientConnInterface.Invoke(ctx, method, args, reply, append(opts, grpc.Peer(&s.peer))...)
}

// mayHaveSent reports whether the finished call may have reached its
// server.
func (s *sentConn) mayHaveSent() bool { return s.peer.Addr != nil }

// idempotentMutations reports whether applying ms twice is the same as
// once: no SetCell with the server's timestamp (-1), no AddToCell or
// MergeToCell.
func idempotentMutations(ms []*bigtablepb.Mutation) bool {
	for _, m := range ms {
		switch {
		case m.GetSetCell() != nil && m.GetSetCell().GetTimestampMicros() == -1,
			m.GetAddToCell() != nil, m.GetMergeToCell() != nil:
			return false
		}
	}
	return true
}

// parseTable parses a request's table_name.
func parseTable(name string) (meta.TableID, error) {
	if name == "" {
		return meta.TableID{}, invalidf("table_name", "required (authorized views and materialized views are not supported)")
	}
	id, err := meta.ParseTableName(name)
	if err != nil {
		return meta.TableID{}, invalidf("table_name", "%v", err)
	}
	return id, nil
}

// locatorError makes a Locator's error a status.
func locatorError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Errorf(codes.Unavailable, "locating tablets: %v", err)
}

// tablets returns the locations covering [start, end).
func (g *Gateway) tablets(ctx context.Context, table meta.TableID, start, end []byte) ([]meta.Location, error) {
	locs, err := g.opts.Locator.Tablets(ctx, table, start, end)
	if err != nil {
		return nil, locatorError(err)
	}
	if len(locs) == 0 {
		return nil, status.Errorf(codes.Unavailable, "no tablet of %s found for [%q, %q)", table, start, end)
	}
	return locs, nil
}

// locateRow returns the location of the tablet holding row.
func (g *Gateway) locateRow(ctx context.Context, table meta.TableID, row []byte) (meta.Location, error) {
	locs, err := g.tablets(ctx, table, row, append(bytes.Clone(row), 0))
	if err != nil {
		return meta.Location{}, err
	}
	for _, l := range locs {
		if l.Contains(row) {
			return l, nil
		}
	}
	return meta.Location{}, status.Errorf(codes.Unavailable, "no tablet of %s found for row %q", table, row)
}

// unassigned is the retryable error of a location without a server.
func unassigned(loc meta.Location) error {
	return status.Errorf(codes.Unavailable, "tablet %s of %s [%q, %q) is not assigned to a server", loc.TabletID, loc.Table, loc.Start, loc.End)
}

// retryable reports whether a sub-request sent for loc should be retried
// after a new lookup.
func retryable(loc meta.Location, err error) bool {
	return loc.Server == "" || tabletpb.IsNotServing(err) || ownerGone(loc, err)
}

// gaveUp is the error returned once the retries of a sub-request that
// kept answering "not serving" are spent (or the deadline allows no
// more): NotServingAsUnavailable.
func gaveUp(err error) error { return NotServingAsUnavailable(err) }

// NotServingAsUnavailable returns a "not serving" error as the official
// clients must see it: the status with its code made UNAVAILABLE, its
// message and tabletpb.NotServing detail kept. FAILED_PRECONDITION is the
// servers' signal to a client that looks locations up itself (Tabula's
// client, which keys on the detail, and another gateway); to the official
// clients, which do not retry FAILED_PRECONDITION, a tablet unserved for
// a moment (a move, a merge or a recovery under way) is a transient
// failure, retried as Cloud Bigtable's UNAVAILABLE is. Other errors, and
// nil, are returned as they are.
func NotServingAsUnavailable(err error) error {
	if !tabletpb.IsNotServing(err) {
		return err
	}
	st := status.Convert(err).Proto()
	st.Code = int32(codes.Unavailable)
	return status.FromProto(st).Err()
}

// gaveUpStatus is gaveUp for a MutateRows entry's status.
func gaveUpStatus(st *statuspb.Status) *statuspb.Status {
	if st == nil || st.GetCode() != int32(codes.FailedPrecondition) || !tabletpb.IsNotServing(status.FromProto(st).Err()) {
		return st
	}
	return status.Convert(gaveUp(status.FromProto(st).Err())).Proto()
}

// errNoTime is returned by backoff when the deadline would pass first.
var errNoTime = errors.New("deadline before the next attempt")

// backoff waits before attempt (1, 2, ...), counting the retry. It fails
// when the context ends or its deadline comes before the wait would.
func (g *Gateway) backoff(ctx context.Context, attempt int) error {
	d := min(firstBackoff<<(attempt-1), maxBackoff)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return errNoTime
	}
	g.metrics.retries.Inc()
	return ctxtime.Sleep(ctx, d)
}

// invalidf is the INVALID_ARGUMENT of a request field, worded as the
// DataService words its own.
func invalidf(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// routeRow runs a single-row request: locally when this server holds the
// row's tablet, else through the owner, retrying not-serving answers and
// unassigned tablets. An UNAVAILABLE answer of another server (ownerGone)
// is retried only when idempotent, or when the request certainly never
// left this server (gRPC had no transport to send it on): a
// non-idempotent request (an increment, an append, a conditional
// mutation) that may have reached its owner — which may have applied it
// and lost only the answer — is never sent twice; its caller gets the
// UNAVAILABLE, an unknown outcome, never a double apply.
func routeRow[R any](ctx context.Context, g *Gateway, method, tableName string, row []byte, idempotent bool,
	local func(context.Context) (R, error), remote func(context.Context, bigtablepb.BigtableClient) (R, error)) (R, error) {
	var zero R
	if isForwarded(ctx) {
		g.countLocal(method)
		return local(ctx)
	}
	table, err := parseTable(tableName)
	if err != nil {
		return zero, err
	}
	for attempt := 1; ; attempt++ {
		loc, err := g.locateRow(ctx, table, row)
		if err != nil {
			return zero, err
		}
		var resp R
		switch {
		case loc.Server == "":
			err = unassigned(loc)
		case g.route(method, loc):
			resp, err = local(ctx)
			// This server's lease may have lapsed after it applied the
			// write and before it acknowledged it (a lock-service restart):
			// the same unknown outcome as a remote owner gone after the
			// request left. Only a write refused before it was applied is
			// retried.
			if err != nil && !idempotent && status.Code(err) == codes.Unavailable && !tabletserver.WriteRefused(err) {
				return resp, err
			}
		default:
			var conn grpc.ClientConnInterface
			if conn, err = g.conn(loc); err == nil {
				sent := &sentConn{ClientConnInterface: conn}
				resp, err = remote(forwardContext(ctx), bigtablepb.NewBigtableClient(sent))
				if err != nil && !idempotent && ownerGone(loc, err) && sent.mayHaveSent() {
					return resp, err
				}
			}
		}
		if err == nil || !retryable(loc, err) {
			return resp, err
		}
		if attempt >= maxAttempts {
			return resp, gaveUp(err)
		}
		g.opts.Locator.Invalidate(loc)
		g.log.Debug("gateway retry", "method", method, "server", loc.Server, "tablet", loc.TabletID, "err", err)
		if berr := g.backoff(ctx, attempt); berr != nil {
			return zero, gaveUp(err)
		}
	}
}

// MutateRow applies the mutations of one row on the row's owner.
func (g *Gateway) MutateRow(ctx context.Context, req *bigtablepb.MutateRowRequest) (*bigtablepb.MutateRowResponse, error) {
	return routeRow(ctx, g, "MutateRow", req.GetTableName(), req.GetRowKey(), idempotentMutations(req.GetMutations()),
		func(ctx context.Context) (*bigtablepb.MutateRowResponse, error) { return g.local.MutateRow(ctx, req) },
		func(ctx context.Context, c bigtablepb.BigtableClient) (*bigtablepb.MutateRowResponse, error) {
			return c.MutateRow(ctx, req)
		})
}

// CheckAndMutateRow runs the conditional mutation on the row's owner.
func (g *Gateway) CheckAndMutateRow(ctx context.Context, req *bigtablepb.CheckAndMutateRowRequest) (*bigtablepb.CheckAndMutateRowResponse, error) {
	return routeRow(ctx, g, "CheckAndMutateRow", req.GetTableName(), req.GetRowKey(), false,
		func(ctx context.Context) (*bigtablepb.CheckAndMutateRowResponse, error) {
			return g.local.CheckAndMutateRow(ctx, req)
		},
		func(ctx context.Context, c bigtablepb.BigtableClient) (*bigtablepb.CheckAndMutateRowResponse, error) {
			return c.CheckAndMutateRow(ctx, req)
		})
}

// ReadModifyWriteRow runs the rules on the row's owner. A not-serving
// answer means nothing was applied, so the retry does not apply twice; an
// UNAVAILABLE one after the request may have left is not retried (see
// routeRow).
func (g *Gateway) ReadModifyWriteRow(ctx context.Context, req *bigtablepb.ReadModifyWriteRowRequest) (*bigtablepb.ReadModifyWriteRowResponse, error) {
	return routeRow(ctx, g, "ReadModifyWriteRow", req.GetTableName(), req.GetRowKey(), false,
		func(ctx context.Context) (*bigtablepb.ReadModifyWriteRowResponse, error) {
			return g.local.ReadModifyWriteRow(ctx, req)
		},
		func(ctx context.Context, c bigtablepb.BigtableClient) (*bigtablepb.ReadModifyWriteRowResponse, error) {
			return c.ReadModifyWriteRow(ctx, req)
		})
}

// captureStream is the server stream a local sub-request answers into
// (MutateRows, SampleRowKeys): it keeps the responses for the gateway to
// merge. Only Context and Send are used by the local handlers.
type captureStream[T any] struct {
	grpc.ServerStream // nil
	ctx               context.Context
	resps             []*T
}

func (c *captureStream[T]) Context() context.Context { return c.ctx }

func (c *captureStream[T]) Send(r *T) error {
	c.resps = append(c.resps, r)
	return nil
}

// MutateRows applies each entry on its row's owner; see Gateway.
func (g *Gateway) MutateRows(req *bigtablepb.MutateRowsRequest, stream bigtablepb.Bigtable_MutateRowsServer) error {
	ctx := stream.Context()
	if isForwarded(ctx) {
		g.countLocal("MutateRows")
		return g.local.MutateRows(req, stream)
	}
	table, err := parseTable(req.GetTableName())
	if err != nil {
		return err
	}
	entries := req.GetEntries()
	if err := g.local.CheckMutateRowsEntries(entries); err != nil {
		return err
	}
	statuses := make([]*statuspb.Status, len(entries))
	pending := make([]int, len(entries))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; ; attempt++ {
		retry, stale := g.mutateRowsRound(ctx, table, req, pending, statuses)
		if len(retry) == 0 || attempt >= maxAttempts {
			break
		}
		for _, loc := range stale {
			g.opts.Locator.Invalidate(loc)
		}
		g.log.Debug("gateway retry", "method", "MutateRows", "entries", len(retry))
		if g.backoff(ctx, attempt) != nil {
			break
		}
		pending = retry
	}
	resp := &bigtablepb.MutateRowsResponse{Entries: make([]*bigtablepb.MutateRowsResponse_Entry, len(entries))}
	for i, st := range statuses {
		resp.Entries[i] = &bigtablepb.MutateRowsResponse_Entry{Index: int64(i), Status: gaveUpStatus(st)}
	}
	return stream.Send(resp)
}

// mutateRowsRound sends the entries idx of req to their owners and sets
// their statuses. It returns the entries to retry (their owner answered
// "not serving", or their tablet has no server), in request order, and the
// locations to invalidate.
func (g *Gateway) mutateRowsRound(ctx context.Context, table meta.TableID, req *bigtablepb.MutateRowsRequest, idx []int, statuses []*statuspb.Status) (retry []int, stale []meta.Location) {
	entries := req.GetEntries()
	// By entry index; located[i] says whether locs[i] was found. Slices,
	// not a map: a bulk write has up to 100,000 entries, each looked up
	// three times below.
	locs := make([]meta.Location, len(entries))
	located := make([]bool, len(entries))
	// Locate in key order, reusing the previous location while it
	// contains the row: entries clustered in a tablet cost one lookup.
	sorted := slices.Clone(idx)
	slices.SortStableFunc(sorted, func(a, b int) int { return bytes.Compare(entries[a].GetRowKey(), entries[b].GetRowKey()) })
	var loc meta.Location
	have := false
	for _, i := range sorted {
		row := entries[i].GetRowKey()
		if !have || !loc.Contains(row) {
			l, err := g.locateRow(ctx, table, row)
			if err != nil {
				statuses[i] = status.Convert(err).Proto()
				have = false
				continue
			}
			loc, have = l, true
		}
		locs[i], located[i] = loc, true
		if loc.Server == "" {
			statuses[i] = status.Convert(unassigned(loc)).Proto()
		}
	}
	// One group per server, sent with the first of its locations (in key
	// order).
	first := make(map[string]meta.Location)
	groups, _ := fanout.Group(sorted, func(i int) (string, bool) {
		l := locs[i]
		if !located[i] || l.Server == "" {
			return "", false
		}
		addr := meta.ServerAddr(l.Server)
		if _, ok := first[addr]; !ok {
			first[addr] = l
		}
		return addr, true
	})
	fanout.Each(groups, func(gr *fanout.Batch[string]) {
		slices.Sort(gr.Idx) // request order: entries of one row keep theirs
		sub := &bigtablepb.MutateRowsRequest{
			TableName:          req.GetTableName(),
			AuthorizedViewName: req.GetAuthorizedViewName(),
			AppProfileId:       req.GetAppProfileId(),
			Entries:            make([]*bigtablepb.MutateRowsRequest_Entry, len(gr.Idx)),
		}
		for j, i := range gr.Idx {
			sub.Entries[j] = entries[i]
		}
		loc := first[gr.Dest]
		res, err := g.mutateRowsGroup(ctx, loc, sub)
		for j, i := range gr.Idx {
			st := res[j]
			if st == nil {
				e := err
				if e == nil {
					e = status.Errorf(codes.Internal, "tablet server %s returned no status for the entry", loc.Server)
				}
				st = status.Convert(e).Proto()
			} else if st.GetCode() != int32(codes.OK) {
				st = renumberEntry(st, j, i)
			}
			statuses[i] = st // distinct i per batch
		}
	})
	seen := make(map[string]bool)
	for _, i := range idx {
		l := locs[i]
		if !located[i] || (l.Server != "" && !notServingStatus(statuses[i])) {
			continue
		}
		retry = append(retry, i)
		if k := l.TabletID + "\x00" + l.Server; !seen[k] {
			seen[k] = true
			stale = append(stale, l)
		}
	}
	return retry, stale
}

// notServingStatus reports whether st is a tablet server's "not serving"
// answer; an OK status (nearly every entry of a bulk write) is answered
// without converting it to an error.
func notServingStatus(st *statuspb.Status) bool {
	return st.GetCode() != int32(codes.OK) && tabletpb.IsNotServing(status.FromProto(st).Err())
}

// mutateRowsGroup sends sub to loc's server and returns the status of each
// of its entries (nil where none came back) and the error that ended the
// call, if any.
func (g *Gateway) mutateRowsGroup(ctx context.Context, loc meta.Location, sub *bigtablepb.MutateRowsRequest) ([]*statuspb.Status, error) {
	res := make([]*statuspb.Status, len(sub.Entries))
	collect := func(r *bigtablepb.MutateRowsResponse) {
		for _, e := range r.GetEntries() {
			if j := e.GetIndex(); j >= 0 && j < int64(len(res)) {
				st := e.GetStatus()
				if st == nil {
					st = &statuspb.Status{}
				}
				res[j] = st
			}
		}
	}
	if g.route("MutateRows", loc) {
		capture := &captureStream[bigtablepb.MutateRowsResponse]{ctx: ctx}
		err := g.local.MutateRows(sub, capture)
		for _, r := range capture.resps {
			collect(r)
		}
		return res, err
	}
	c, err := g.client(loc)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(forwardContext(ctx))
	defer cancel()
	st, err := c.MutateRows(ctx, sub)
	if err != nil {
		return res, err
	}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		collect(r)
	}
}

// renumberEntry rewrites "entries[j]" at the start of an entry's error
// message to the entry's index in the caller's request.
func renumberEntry(st *statuspb.Status, j, i int) *statuspb.Status {
	from := fmt.Sprintf("entries[%d]", j)
	if i == j || !strings.HasPrefix(st.GetMessage(), from) {
		return st
	}
	st = proto.Clone(st).(*statuspb.Status)
	st.Message = fmt.Sprintf("entries[%d]", i) + st.Message[len(from):]
	return st
}

// PingAndWarm is the local DataService's.
func (g *Gateway) PingAndWarm(ctx context.Context, req *bigtablepb.PingAndWarmRequest) (*bigtablepb.PingAndWarmResponse, error) {
	return g.local.PingAndWarm(ctx, req)
}

// GenerateInitialChangeStreamPartitions is the local DataService's.
func (g *Gateway) GenerateInitialChangeStreamPartitions(req *bigtablepb.GenerateInitialChangeStreamPartitionsRequest, stream bigtablepb.Bigtable_GenerateInitialChangeStreamPartitionsServer) error {
	return g.local.GenerateInitialChangeStreamPartitions(req, stream)
}

// ReadChangeStream is the local DataService's.
func (g *Gateway) ReadChangeStream(req *bigtablepb.ReadChangeStreamRequest, stream bigtablepb.Bigtable_ReadChangeStreamServer) error {
	return g.local.ReadChangeStream(req, stream)
}

// PrepareQuery is the local DataService's.
func (g *Gateway) PrepareQuery(ctx context.Context, req *bigtablepb.PrepareQueryRequest) (*bigtablepb.PrepareQueryResponse, error) {
	return g.local.PrepareQuery(ctx, req)
}

// ExecuteQuery is the local DataService's.
func (g *Gateway) ExecuteQuery(req *bigtablepb.ExecuteQueryRequest, stream bigtablepb.Bigtable_ExecuteQueryServer) error {
	return g.local.ExecuteQuery(req, stream)
}

// GetClientConfiguration is the local DataService's.
func (g *Gateway) GetClientConfiguration(ctx context.Context, req *bigtablepb.GetClientConfigurationRequest) (*bigtablepb.ClientConfiguration, error) {
	return g.local.GetClientConfiguration(ctx, req)
}

// OpenTable is the local DataService's.
func (g *Gateway) OpenTable(stream bigtablepb.Bigtable_OpenTableServer) error {
	return g.local.OpenTable(stream)
}

// OpenAuthorizedView is the local DataService's.
func (g *Gateway) OpenAuthorizedView(stream bigtablepb.Bigtable_OpenAuthorizedViewServer) error {
	return g.local.OpenAuthorizedView(stream)
}

// ownerGone reports an UNAVAILABLE answer for a location on another
// server: the server died or is unreachable, so the location is stale
// once the master reassigns its tablets. Retrying a write that may have
// reached it is the same unknown outcome a client retry of UNAVAILABLE
// has.
func ownerGone(loc meta.Location, err error) bool {
	return status.Code(err) == codes.Unavailable && loc.Server != ""
}
