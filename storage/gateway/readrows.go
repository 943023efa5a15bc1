package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// ReadRows reads the row set tablet after tablet from the owners; see
// Gateway.
func (g *Gateway) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	ctx := stream.Context()
	if isForwarded(ctx) {
		g.countLocal("ReadRows")
		return g.local.ReadRows(req, stream)
	}
	table, err := parseTable(req.GetTableName())
	if err != nil {
		return err
	}
	if req.GetRowsLimit() < 0 {
		return invalidf("rows_limit", "must not be negative, got %d", req.GetRowsLimit())
	}
	ranges, err := tabletserver.RowRanges(req.GetRows())
	if err != nil {
		return err
	}
	if g.local.CoversRanges(table, ranges) {
		// The caller found the owner (a client with a fresh location):
		// no lookup, whatever this server's own cache says.
		g.countLocal("ReadRows")
		return g.local.ReadRows(req, stream)
	}
	r := &readRelay{out: stream, reverse: req.GetReversed(), limit: req.GetRowsLimit(), start: time.Now()}
	attempt := 0
	for {
		ranges = r.remaining(ranges)
		if len(ranges) == 0 || r.done() {
			return r.finish(req)
		}
		locs, err := g.tablets(ctx, table, ranges[0].Start, ranges[len(ranges)-1].End)
		if err != nil {
			return err
		}
		if r.reverse {
			slices.Reverse(locs)
		}
		loc, err := g.readTablets(ctx, req, locs, ranges, r)
		if err == nil {
			return r.finish(req)
		}
		if r.sendErr != nil || !retryable(loc, err) {
			return err
		}
		if r.progressed {
			attempt = 0
		}
		r.progressed = false
		attempt++
		if attempt >= maxAttempts {
			return gaveUp(err)
		}
		g.opts.Locator.Invalidate(loc)
		g.log.Debug("gateway retry", "method", "ReadRows", "server", loc.Server, "tablet", loc.TabletID, "err", err)
		if g.backoff(ctx, attempt) != nil {
			return gaveUp(err)
		}
	}
}

// readTablets reads ranges from locs in order until the rows limit is met;
// on error it returns the location whose sub-request failed.
func (g *Gateway) readTablets(ctx context.Context, req *bigtablepb.ReadRowsRequest, locs []meta.Location, ranges []tabletdesc.KeyRange, r *readRelay) (meta.Location, error) {
	for _, loc := range locs {
		part := clipRanges(ranges, loc.Start, loc.End)
		if len(part) == 0 {
			continue
		}
		if r.done() {
			return loc, nil
		}
		sub := subRequest(req)
		sub.Rows = rowSet(part)
		if r.limit > 0 {
			sub.RowsLimit = r.limit - r.rows
		}
		if loc.Server == "" {
			return loc, unassigned(loc)
		}
		if err := g.readTablet(ctx, loc, sub, r); err != nil {
			return loc, err
		}
	}
	return meta.Location{}, nil
}

// subRequest is a shallow copy of req without its rows, for a sub-request
// to set its own: the fields are req's, its filter included, shared and
// not copied (nothing modifies a request's messages). A point read's
// filter is one the codec decoded once for every reader that sends its
// bytes (tabletserver.SharedFilter), which the filter cache finds by
// pointer; a deep copy (proto.Clone) made each sub-request's filter a new
// one to encode as the cache's key, and was a twentieth of a gateway's CPU
// under forwarded point reads.
func subRequest(req *bigtablepb.ReadRowsRequest) *bigtablepb.ReadRowsRequest {
	sub := &bigtablepb.ReadRowsRequest{}
	dst := sub.ProtoReflect()
	rows := dst.Descriptor().Fields().ByNumber(readRowsRequestRows)
	req.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd != rows {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(req.ProtoReflect().GetUnknown())
	return sub
}

// readRowsRequestRows is the field number of ReadRowsRequest.rows.
const readRowsRequestRows = 2

// readTablet runs one sub-request, relaying its responses.
func (g *Gateway) readTablet(ctx context.Context, loc meta.Location, sub *bigtablepb.ReadRowsRequest, r *readRelay) error {
	if g.route("ReadRows", loc) {
		// The rows go through the relay, which counts them against the
		// limit and resumes after them: not to a taker the caller's
		// context may carry (a session's ReadRow, which a tablet the
		// caller's own request covered would hand its row).
		cctx := tabletserver.WithRowTaker(ctx, nil)
		err := g.local.ReadRows(sub, &readRowsCapture{ctx: cctx, send: r.relay})
		if r.sendErr != nil {
			return r.sendErr
		}
		return err
	}
	if g.opts.PointReads && pointReadable(sub) {
		err := g.readPointRows(ctx, loc, sub, r)
		if !errors.Is(err, errPointReadsDown) {
			return err
		}
	}
	if sub.GetRequestStatsView() != bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL {
		return g.relayTablet(ctx, loc, sub, r)
	}
	// The owner's request stats are summed, not relayed: decoded.
	c, err := g.client(loc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(forwardContext(ctx))
	defer cancel()
	st, err := c.ReadRows(ctx, sub)
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := r.relay(resp); err != nil {
			return err
		}
		if r.done() {
			return nil // the owner stops too: its limit was ours
		}
	}
}

// readRowsStream describes the ReadRows method for a raw client stream.
var readRowsStream = &grpc.StreamDesc{StreamName: "ReadRows", ServerStreams: true}

// relayTablet runs one sub-request on loc's server, passing its responses
// to the caller as they came over the wire (tabletserver.EncodedReadRows):
// the cells are neither decoded nor encoded again, only scanned for the
// rows they commit.
func (g *Gateway) relayTablet(ctx context.Context, loc meta.Location, sub *bigtablepb.ReadRowsRequest, r *readRelay) error {
	conn, err := g.conn(loc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(forwardContext(ctx))
	defer cancel()
	st, err := conn.NewStream(ctx, readRowsStream, bigtablepb.Bigtable_ReadRows_FullMethodName, grpc.ForceCodecV2(tabletserver.RelayCodec()))
	if err != nil {
		return err
	}
	if err := st.SendMsg(sub); err != nil {
		return recvErr(st, err)
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	var msg tabletserver.EncodedReadRows
	defer msg.Release()
	for {
		if err := st.RecvMsg(&msg); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := r.relayEncoded(&msg); err != nil {
			return err
		}
		if r.done() {
			return nil // the owner stops too: its limit was ours
		}
	}
}

// recvErr returns the status of a stream whose SendMsg failed: io.EOF
// there means the server ended the call, and RecvMsg tells how.
func recvErr(st grpc.ClientStream, err error) error {
	if err != io.EOF {
		return err
	}
	var msg tabletserver.EncodedReadRows
	defer msg.Release()
	for {
		if err := st.RecvMsg(&msg); err != nil {
			if err == io.EOF {
				return status.Error(codes.Internal, "gateway: the owner ended ReadRows before reading the request")
			}
			return err
		}
	}
}

// readRowsCapture is the stream a local ReadRows sub-request answers
// into. The DataService uses only its Context and Send.
type readRowsCapture struct {
	grpc.ServerStream // nil
	ctx               context.Context
	send              func(*bigtablepb.ReadRowsResponse) error
}

func (c *readRowsCapture) Context() context.Context                  { return c.ctx }
func (c *readRowsCapture) Send(r *bigtablepb.ReadRowsResponse) error { return c.send(r) }

// readRelay passes the owners' responses to the caller, counting the
// committed rows and remembering the last, where a retry resumes.
type readRelay struct {
	out     bigtablepb.Bigtable_ReadRowsServer
	reverse bool
	limit   int64

	rows       int64  // committed rows sent
	last       []byte // key of the last row sent (or scanned), nil before
	cur        []byte // key of the row the chunks are at
	progressed bool   // rows sent since the last failure
	sendErr    error  // the caller's stream failed

	// The sub-requests' read statistics, summed for the caller's
	// request stats.
	start time.Time
	stats bigtablepb.ReadIterationStats
}

// finish sends the request stats the caller asked for: the owners'
// iteration stats summed (rows returned as sent), and the gateway's own
// latency.
func (r *readRelay) finish(req *bigtablepb.ReadRowsRequest) error {
	if req.GetRequestStatsView() != bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL {
		return nil
	}
	st := proto.Clone(&r.stats).(*bigtablepb.ReadIterationStats)
	st.RowsReturnedCount = r.rows
	return r.out.Send(&bigtablepb.ReadRowsResponse{RequestStats: &bigtablepb.RequestStats{StatsView: &bigtablepb.RequestStats_FullReadStatsView{
		FullReadStatsView: &bigtablepb.FullReadStatsView{
			ReadIterationStats:  st,
			RequestLatencyStats: &bigtablepb.RequestLatencyStats{FrontendServerLatency: durationpb.New(time.Since(r.start))},
		}}}})
}

func (r *readRelay) done() bool { return r.limit > 0 && r.rows >= r.limit }

// relay sends resp to the caller without its request stats (each
// sub-request has its own), which it adds up for finish.
func (r *readRelay) relay(resp *bigtablepb.ReadRowsResponse) error {
	if r.sendErr != nil {
		return r.sendErr
	}
	if st := resp.GetRequestStats().GetFullReadStatsView().GetReadIterationStats(); st != nil {
		r.stats.RowsSeenCount += st.GetRowsSeenCount()
		r.stats.CellsSeenCount += st.GetCellsSeenCount()
		r.stats.CellsReturnedCount += st.GetCellsReturnedCount()
	}
	resp.RequestStats = nil
	if len(resp.Chunks) == 0 && len(resp.LastScannedRowKey) == 0 {
		return nil
	}
	var last []byte
	rows := int64(0)
	for _, ch := range resp.Chunks {
		if len(ch.RowKey) > 0 {
			r.cur = ch.RowKey
		}
		if ch.GetCommitRow() {
			rows++
			last = r.cur
		}
	}
	if len(resp.LastScannedRowKey) > 0 {
		last = resp.LastScannedRowKey // after every row of the response
	}
	if err := r.out.Send(resp); err != nil {
		r.sendErr = err
		return err
	}
	r.rows += rows
	if last != nil {
		r.last = bytes.Clone(last)
		r.progressed = true
	}
	return nil
}

// relayEncoded sends an owner's encoded response to the caller, counting
// the rows it commits like relay. A response carrying request stats (sent
// though not asked for) or not parsing is decoded and goes through relay.
func (r *readRelay) relayEncoded(msg *tabletserver.EncodedReadRows) error {
	if r.sendErr != nil {
		return r.sendErr
	}
	sc, err := scanEncodedReadRows(msg.Bytes(), r.cur)
	if err != nil || sc.stats {
		var resp bigtablepb.ReadRowsResponse
		err := proto.Unmarshal(msg.Bytes(), &resp) // copies what it decodes
		msg.Release()
		if err != nil {
			return status.Errorf(codes.Internal, "gateway: undecodable ReadRows response from the owner: %v", err)
		}
		return r.relay(&resp)
	}
	if !sc.content {
		msg.Release()
		return nil
	}
	// Keys alias the message's buffer, which sending gives away.
	r.cur = bytes.Clone(sc.cur)
	last := bytes.Clone(sc.last)
	if err := r.out.SendMsg(msg); err != nil {
		msg.Release()
		r.sendErr = err
		return err
	}
	r.rows += sc.rows
	if last != nil {
		r.last = last
		r.progressed = true
	}
	return nil
}

// encodedScan is what relayEncoded needs of a ReadRowsResponse.
type encodedScan struct {
	rows    int64  // rows committed
	last    []byte // key of the last row committed, or last_scanned_row_key
	cur     []byte // key of the row the chunks are at, at the end
	stats   bool   // request_stats present
	content bool   // chunks or last_scanned_row_key present
}

// scanEncodedReadRows reads the wire form of a ReadRowsResponse (fields
// chunks = 1, last_scanned_row_key = 2, request_stats = 3; in a chunk
// row_key = 1 and commit_row = 9) without decoding its cells; cur is the
// key of the row the previous response ended in. The keys returned alias b.
func scanEncodedReadRows(b []byte, cur []byte) (encodedScan, error) {
	sc := encodedScan{cur: cur}
	var lastScanned []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return sc, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			chunk, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return sc, protowire.ParseError(n)
			}
			b = b[n:]
			sc.content = true
			if err := scanChunk(chunk, &sc); err != nil {
				return sc, err
			}
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return sc, protowire.ParseError(n)
			}
			b = b[n:]
			if len(v) > 0 {
				lastScanned = v
			}
		default:
			if num == 3 {
				sc.stats = true
			}
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return sc, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	if lastScanned != nil {
		sc.content = true
		sc.last = lastScanned // after every row of the response
	}
	return sc, nil
}

// scanChunk notes a CellChunk's row key and commit.
func scanChunk(b []byte, sc *encodedScan) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if len(v) > 0 {
				sc.cur = v
			}
		case num == 9 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if v != 0 {
				sc.rows++
				sc.last = sc.cur
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// remaining returns the part of ranges (ascending) not yet read: after the
// last row sent in scan order.
func (r *readRelay) remaining(ranges []tabletdesc.KeyRange) []tabletdesc.KeyRange {
	if r.last == nil {
		return ranges
	}
	if r.reverse {
		return clipRanges(ranges, nil, r.last)
	}
	return clipRanges(ranges, append(bytes.Clone(r.last), 0), nil)
}

// clipRanges returns the parts of ranges (ascending, disjoint) within
// [start, end); nil end is unbounded.
func clipRanges(ranges []tabletdesc.KeyRange, start, end []byte) []tabletdesc.KeyRange {
	var out []tabletdesc.KeyRange
	clip := tabletdesc.KeyRange{Start: start, End: end}
	for _, kr := range ranges {
		x := kr.Intersect(clip)
		if x.Empty() {
			continue
		}
		if x.Start == nil {
			x.Start = []byte{}
		}
		out = append(out, x)
	}
	return out
}

// rowSet is the RowSet of ranges: one-row ranges as row keys.
func rowSet(ranges []tabletdesc.KeyRange) *bigtablepb.RowSet {
	rs := &bigtablepb.RowSet{}
	for _, kr := range ranges {
		if kr.SingleRow() {
			rs.RowKeys = append(rs.RowKeys, kr.Start)
			continue
		}
		rr := &bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: kr.Start}}
		if !kr.Unbounded() {
			rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: kr.End}
		}
		rs.RowRanges = append(rs.RowRanges, rr)
	}
	return rs
}

// SampleRowKeys merges the samples of the table's owners; see Gateway.
func (g *Gateway) SampleRowKeys(req *bigtablepb.SampleRowKeysRequest, stream bigtablepb.Bigtable_SampleRowKeysServer) error {
	ctx := stream.Context()
	if isForwarded(ctx) {
		g.countLocal("SampleRowKeys")
		return g.local.SampleRowKeys(req, stream)
	}
	table, err := parseTable(req.GetTableName())
	if err != nil {
		return err
	}
	var out []*bigtablepb.SampleRowKeysResponse
	for attempt := 1; ; attempt++ {
		var stale []meta.Location
		out, stale, err = g.sampleTable(ctx, table, req)
		if err == nil || len(stale) == 0 || attempt >= maxAttempts {
			break
		}
		for _, l := range stale {
			g.opts.Locator.Invalidate(l)
		}
		g.log.Debug("gateway retry", "method", "SampleRowKeys", "err", err)
		if g.backoff(ctx, attempt) != nil {
			break
		}
	}
	if err != nil {
		return gaveUp(err)
	}
	for _, r := range out {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return nil
}

// sampleTable asks every owner of table's tablets for its samples once and
// merges them in tablet order. On a retryable failure it returns the
// locations to invalidate.
func (g *Gateway) sampleTable(ctx context.Context, table meta.TableID, req *bigtablepb.SampleRowKeysRequest) ([]*bigtablepb.SampleRowKeysResponse, []meta.Location, error) {
	locs, err := g.tablets(ctx, table, []byte{}, nil)
	if err != nil {
		return nil, nil, err
	}
	// One call per server: its answer covers every tablet it holds.
	samples := make(map[string][]*bigtablepb.SampleRowKeysResponse)
	for _, loc := range locs {
		if loc.Server == "" {
			return nil, []meta.Location{loc}, unassigned(loc)
		}
		addr := meta.ServerAddr(loc.Server)
		if _, ok := samples[addr]; ok {
			continue
		}
		s, err := g.sampleServer(ctx, loc, req)
		if err != nil {
			var stale []meta.Location
			if tabletpb.IsNotServing(err) || ownerGone(loc, err) {
				for _, l := range locs {
					if meta.ServerAddr(l.Server) == addr {
						stale = append(stale, l)
					}
				}
			}
			return nil, stale, err
		}
		samples[addr] = s
	}
	// A server's offsets add up over its own tablets; a sample's share
	// is its offset minus the previous sample's (every tablet end is a
	// sample, so no share spans two tablets of a server).
	var out []*bigtablepb.SampleRowKeysResponse
	var total int64
	var prev []byte
	add := func(key []byte, size int64) {
		total += size
		if len(key) > 0 && prev != nil && bytes.Compare(key, prev) <= 0 {
			if n := len(out); n > 0 {
				out[n-1].OffsetBytes = total
			}
			return
		}
		prev = key
		out = append(out, &bigtablepb.SampleRowKeysResponse{RowKey: key, OffsetBytes: total})
	}
	for _, loc := range locs {
		s := samples[meta.ServerAddr(loc.Server)]
		var base int64
		sawEnd := false
		for _, smp := range s {
			key := smp.GetRowKey()
			size := smp.GetOffsetBytes() - base
			base = smp.GetOffsetBytes()
			// The sample key is the exclusive end of the piece before
			// it: it belongs to the tablet (start, end] (the empty key,
			// the table's end, to the last tablet).
			if len(key) == 0 {
				if len(loc.End) == 0 {
					add([]byte{}, size)
					sawEnd = true
				}
				continue
			}
			if bytes.Compare(key, loc.Start) <= 0 || (len(loc.End) > 0 && bytes.Compare(key, loc.End) > 0) {
				continue
			}
			add(key, size)
			if len(loc.End) > 0 && bytes.Equal(key, loc.End) {
				sawEnd = true
			}
		}
		if !sawEnd {
			add(slices.Clip(loc.End), 0) // a tablet boundary is always a sample
		}
	}
	if n := len(out); n == 0 || len(out[n-1].RowKey) > 0 {
		out = append(out, &bigtablepb.SampleRowKeysResponse{RowKey: []byte{}, OffsetBytes: total})
	}
	return out, nil, nil
}

// sampleServer returns the samples of loc's server.
func (g *Gateway) sampleServer(ctx context.Context, loc meta.Location, req *bigtablepb.SampleRowKeysRequest) ([]*bigtablepb.SampleRowKeysResponse, error) {
	if g.route("SampleRowKeys", loc) {
		c := &captureStream[bigtablepb.SampleRowKeysResponse]{ctx: ctx}
		err := g.local.SampleRowKeys(req, c)
		return c.resps, err
	}
	c, err := g.client(loc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(forwardContext(ctx))
	defer cancel()
	st, err := c.SampleRowKeys(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []*bigtablepb.SampleRowKeysResponse
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
}
