package gateway

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// Point reads forwarded over one long-lived stream per owner.
//
// A forwarded ReadRows costs the entry server a new gRPC client stream and
// the owner a new server stream — HTTP/2 headers both ways, stream setup,
// interceptors, trailers — about twice what the owner's own read costs
// (BENCHMARKS.md, "The point-read path"). Point reads, the one workload
// where that overhead dominates, instead travel as frames of a
// bidirectional stream the entry keeps open to each owner: a request
// frame carries the encoded ReadRowsRequest, the owner answers with
// response frames (each an encoded ReadRowsResponse, relayed to the caller
// as it is) and one end frame with the call's status. Many calls share a
// stream; each has an id. Scans keep a stream of their own (their flow
// control must not hold up other calls).
//
// A frame is a protobuf message of its own (encoded by hand on both ends):
//
//	1: call id (varint)
//	2: kind (varint): frameRequest, frameCancel (entry → owner);
//	   frameResponse, frameEnd, frameLast (owner → entry)
//	3: payload (bytes): ReadRowsRequest, ReadRowsResponse, or the
//	   google.rpc.Status of the call (absent: OK)
//	4: timeout in microseconds (request; absent: none)
//	5: the google.rpc.Status of the call (frameLast; absent: OK)
//
// A point read has one response, so an entry that sets pointReadsLastKey
// on its stream gets a call's last response and its end as one frameLast:
// a message each way per call instead of one out and two back, which on
// a gateway forwarding most reads is a large part of what the hop costs.
// An entry without the key (an older version) gets frameResponse and
// frameEnd; an older owner ignores the key and sends those, which every
// entry takes.
const (
	pointReadsService = "tabula.gateway.v1.PointReads"
	pointReadsMethod  = "/" + pointReadsService + "/Read"

	frameRequest  = 1
	frameCancel   = 2
	frameResponse = 3
	frameEnd      = 4
	frameLast     = 5

	// pointReadsLastKey is the stream metadata by which an entry asks
	// for frameLast.
	pointReadsLastKey = "x-tabula-point-reads-last"

	// maxPointReadKeys bounds the row keys of a request sent over the
	// shared stream: each is one response at most (a row never spans
	// two), so a call's frames fit its channel and the stream's reader
	// never waits for a slow caller.
	maxPointReadKeys = 16
	// pointReadsRetry is how long after a failure to open the stream to
	// an owner (an owner without the service, say) its point reads take
	// streams of their own before the next try.
	pointReadsRetry = 5 * time.Second
)

type frame struct {
	id      uint64
	kind    uint64
	payload []byte
	timeout time.Duration
	status  []byte // frameLast
}

// appendFrameHeader appends the fields of a frame before its payload,
// whose length is n (n < 0: no payload).
func appendFrameHeader(b []byte, id, kind uint64, timeout time.Duration, status []byte, n int) []byte {
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, id)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, kind)
	if timeout > 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(timeout.Microseconds()))
	}
	if status != nil {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, status)
	}
	if n >= 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	return b
}

// newFrame returns the frame of the header fields and payload, taking the
// payload's references.
func newFrame(id, kind uint64, timeout time.Duration, payload mem.BufferSlice) *tabletserver.RawFrame {
	return newFrameWithStatus(id, kind, timeout, nil, payload)
}

// newLastFrame returns the frameLast of a call's last response and its
// status (nil: OK), taking the response's references.
func newLastFrame(id uint64, status []byte, resp mem.BufferSlice) *tabletserver.RawFrame {
	return newFrameWithStatus(id, frameLast, 0, status, resp)
}

func newFrameWithStatus(id, kind uint64, timeout time.Duration, status []byte, payload mem.BufferSlice) *tabletserver.RawFrame {
	n := -1
	if payload != nil {
		n = payload.Len()
	}
	hdr := appendFrameHeader(make([]byte, 0, 32+len(status)), id, kind, timeout, status, n)
	f := &tabletserver.RawFrame{}
	f.SetFrame(append(mem.BufferSlice{mem.SliceBuffer(hdr)}, payload...))
	return f
}

func parseFrame(b []byte) (frame, error) {
	var f frame
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return f, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			f.id, n = protowire.ConsumeVarint(b)
		case num == 2 && typ == protowire.VarintType:
			f.kind, n = protowire.ConsumeVarint(b)
		case num == 3 && typ == protowire.BytesType:
			f.payload, n = protowire.ConsumeBytes(b)
		case num == 4 && typ == protowire.VarintType:
			var us uint64
			us, n = protowire.ConsumeVarint(b)
			f.timeout = time.Duration(us) * time.Microsecond
		case num == 5 && typ == protowire.BytesType:
			f.status, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return f, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return f, nil
}

var pointReadsDesc = grpc.StreamDesc{StreamName: "Read", ServerStreams: true, ClientStreams: true}

// RegisterPointReads registers on srv the owner's end of the point-read
// stream: each call is answered by readRows (the server's registered data
// API — a Gateway, which serves a forwarded request locally) with the
// stream's context and metadata; fence, when not nil, is asked before each
// call (a server whose lease lapsed answers its error). Closing stopping
// ends every stream (UNAVAILABLE, after the calls under way are cancelled):
// close it before the server's GracefulStop, which waits for streams and
// the entries never end theirs. srv must use tabletserver.ServerCodec or
// Codec.
func RegisterPointReads(srv grpc.ServiceRegistrar, readRows func(*bigtablepb.ReadRowsRequest, bigtablepb.Bigtable_ReadRowsServer) error, fence func() error, stopping <-chan struct{}) {
	h := func(_ any, ss grpc.ServerStream) error {
		ended := make(chan error, 1)
		go func() { ended <- servePointReads(ss, readRows, fence) }()
		select {
		case err := <-ended:
			return err
		case <-stopping:
			// Returning ends the stream: its context is cancelled, which
			// ends the calls and the receive loop.
			return status.Error(codes.Unavailable, "gateway: tablet server shutting down")
		}
	}
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: pointReadsService,
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{{StreamName: "Read", Handler: h, ServerStreams: true, ClientStreams: true}},
	}, struct{}{})
}

// servePointReads serves one entry server's stream until it ends.
func servePointReads(ss grpc.ServerStream, readRows func(*bigtablepb.ReadRowsRequest, bigtablepb.Bigtable_ReadRowsServer) error, fence func() error) error {
	ctx, cancelAll := context.WithCancel(ss.Context())
	var (
		sendMu  sync.Mutex
		callsMu sync.Mutex
		calls   = map[uint64]context.CancelFunc{}
		wg      sync.WaitGroup
	)
	defer func() {
		cancelAll() // first: a call blocked sending to a gone caller returns
		wg.Wait()
	}()
	// Calls run on goroutines kept for the stream's life, a new one only
	// when all are busy: a fresh goroutine per call grows its stack every
	// time (runtime.newstack), as gRPC's own per-stream goroutines did.
	work := make(chan func())
	dispatch := func(f func()) {
		select {
		case work <- f:
		default:
			go func() {
				f()
				for {
					select {
					case f := <-work:
						f()
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
	send := func(f *tabletserver.RawFrame) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		err := ss.SendMsg(f)
		f.Release() // a no-op once sent
		return err
	}
	last := len(metadata.ValueFromIncomingContext(ss.Context(), pointReadsLastKey)) > 0
	serve := func(id uint64, req *bigtablepb.ReadRowsRequest, cctx context.Context, cancel context.CancelFunc) {
		defer wg.Done()
		defer func() {
			callsMu.Lock()
			delete(calls, id)
			callsMu.Unlock()
			cancel()
		}()
		var err error
		if fence != nil {
			err = fence()
		}
		// held is the call's latest response, kept back to go out with
		// the end as one frameLast when the entry takes it.
		var held mem.BufferSlice
		if err == nil {
			err = readRows(req, &readRowsCapture{ctx: cctx, send: func(resp *bigtablepb.ReadRowsResponse) error {
				b, err := tabletserver.MarshalReadRows(resp)
				if err != nil {
					return err
				}
				if !last {
					return send(newFrame(id, frameResponse, 0, b))
				}
				prev := held
				held = b
				if prev == nil {
					return nil
				}
				return send(newFrame(id, frameResponse, 0, prev))
			}})
		}
		var st []byte
		if err != nil {
			b, merr := proto.Marshal(status.Convert(err).Proto())
			if merr != nil {
				b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
			}
			st = b
		}
		// A broken stream ends the loop below.
		switch {
		case held != nil:
			_ = send(newLastFrame(id, st, held))
		case st != nil:
			_ = send(newFrame(id, frameEnd, 0, mem.BufferSlice{mem.SliceBuffer(st)}))
		default:
			_ = send(newFrame(id, frameEnd, 0, nil))
		}
	}
	for {
		var in tabletserver.RawFrame
		if err := ss.RecvMsg(&in); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		f, err := parseFrame(in.Bytes())
		if err != nil {
			in.Release()
			return status.Errorf(codes.InvalidArgument, "gateway: malformed point-read frame: %v", err)
		}
		switch f.kind {
		case frameRequest:
			// Decoded as the data API's codec decodes a caller's request
			// (copying: the frame is released next), the filter shared by
			// every request that sends its bytes: protobuf's generic
			// decoder built the filter's nested oneofs by reflection for
			// each call, a tenth of an owner's CPU under forwarded reads.
			req := &bigtablepb.ReadRowsRequest{}
			err := tabletserver.UnmarshalReadRowsRequest(f.payload, req)
			in.Release()
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "gateway: malformed point-read request: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			if f.timeout > 0 {
				cctx, cancel = context.WithTimeout(ctx, f.timeout)
			}
			callsMu.Lock()
			calls[f.id] = cancel
			callsMu.Unlock()
			wg.Add(1)
			id := f.id
			dispatch(func() { serve(id, req, cctx, cancel) })
		case frameCancel:
			in.Release()
			callsMu.Lock()
			if cancel, ok := calls[f.id]; ok {
				cancel()
			}
			callsMu.Unlock()
		default:
			in.Release()
		}
	}
}

// pointReadable reports whether sub goes over the shared stream: a few
// row keys, no ranges, no request stats (those are decoded and summed).
func pointReadable(sub *bigtablepb.ReadRowsRequest) bool {
	rs := sub.GetRows()
	n := len(rs.GetRowKeys())
	return n > 0 && n <= maxPointReadKeys && len(rs.GetRowRanges()) == 0 &&
		sub.GetRequestStatsView() != bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL
}

// errPointReadsDown: the shared stream is not there (not opened, broken
// before the call was answered): the call may take a stream of its own.
var errPointReadsDown = errors.New("gateway: point-read stream down")

// pointReadsClient is the entry's end of the stream to one owner.
type pointReadsClient struct {
	mu      sync.Mutex
	st      grpc.ClientStream // nil: closed
	stop    context.CancelFunc
	retryAt time.Time // no new stream before
	next    uint64
	pending map[uint64]chan pointReadEvent
	sendMu  sync.Mutex
	calls   atomic.Int64 // calls sent over the stream
	frames  atomic.Int64 // frames received that answer calls
	// separateEnd makes the stream ask for no frameLast, as an older
	// entry's does (tests set it before the first call).
	separateEnd bool
}

// pointReadEvent is a response (msg), the end of a call (err, nil for
// OK; errPointReadsDown when the stream broke first), or both (a
// frameLast: the response comes first).
type pointReadEvent struct {
	msg *tabletserver.EncodedReadRows
	err error
	end bool
}

// pointReads returns the client of addr's stream.
func (g *Gateway) pointReads(addr string) *pointReadsClient {
	g.prMu.Lock()
	defer g.prMu.Unlock()
	if g.pr == nil {
		g.pr = map[string]*pointReadsClient{}
	}
	c := g.pr[addr]
	if c == nil {
		c = &pointReadsClient{pending: map[uint64]chan pointReadEvent{}}
		g.pr[addr] = c
	}
	return c
}

// start sends sub as a new call and returns its id and events; it fails
// with errPointReadsDown when no stream can be had.
func (c *pointReadsClient) start(ctx context.Context, conn grpc.ClientConnInterface, sub *bigtablepb.ReadRowsRequest) (uint64, <-chan pointReadEvent, error) {
	payload, err := proto.Marshal(sub)
	if err != nil {
		return 0, nil, err
	}
	c.mu.Lock()
	st := c.st
	if st == nil {
		if time.Now().Before(c.retryAt) {
			c.mu.Unlock()
			return 0, nil, errPointReadsDown
		}
		// The stream outlives the call that opens it.
		md := []string{ForwardedKey, "1"}
		if !c.separateEnd {
			md = append(md, pointReadsLastKey, "1")
		}
		sctx, stop := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), md...))
		s, err := conn.NewStream(sctx, &pointReadsDesc, pointReadsMethod, grpc.ForceCodecV2(tabletserver.RelayCodec()))
		if err != nil {
			stop()
			c.retryAt = time.Now().Add(pointReadsRetry)
			c.mu.Unlock()
			return 0, nil, errPointReadsDown
		}
		c.st, c.stop, st = s, stop, s
		go c.receive(s)
	}
	c.next++
	id := c.next
	ch := make(chan pointReadEvent, len(sub.GetRows().GetRowKeys())+1)
	c.pending[id] = ch
	c.mu.Unlock()
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			c.forget(id)
			return 0, nil, status.FromContextError(context.DeadlineExceeded).Err()
		}
	}
	if err := c.send(st, newFrame(id, frameRequest, timeout, mem.BufferSlice{mem.SliceBuffer(payload)})); err != nil {
		c.broke(st, err)
		c.forget(id)
		return 0, nil, errPointReadsDown
	}
	c.calls.Add(1)
	return id, ch, nil
}

func (c *pointReadsClient) send(st grpc.ClientStream, f *tabletserver.RawFrame) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	err := st.SendMsg(f)
	f.Release()
	return err
}

// cancel tells the owner a call's caller left.
func (c *pointReadsClient) cancel(id uint64) {
	if !c.forget(id) {
		return // ended already
	}
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	if st != nil {
		_ = c.send(st, newFrame(id, frameCancel, 0, nil))
	}
}

// forget drops a call; it reports whether the call was pending.
func (c *pointReadsClient) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// receive delivers st's frames to their calls until st fails.
func (c *pointReadsClient) receive(st grpc.ClientStream) {
	for {
		var in tabletserver.RawFrame
		if err := st.RecvMsg(&in); err != nil {
			c.broke(st, err)
			return
		}
		f, err := parseFrame(in.Bytes())
		if err != nil {
			in.Release()
			c.broke(st, err)
			return
		}
		var ev pointReadEvent
		switch f.kind {
		case frameResponse:
			ev.msg = tabletserver.NewEncodedReadRows(f.payload)
		case frameEnd:
			ev.end, ev.err = true, endStatus(f.payload)
		case frameLast:
			ev.msg = tabletserver.NewEncodedReadRows(f.payload)
			ev.end, ev.err = true, endStatus(f.status)
		}
		in.Release()
		if ev.msg == nil && !ev.end {
			continue
		}
		c.frames.Add(1)
		c.mu.Lock()
		ch, ok := c.pending[f.id]
		if ev.end {
			delete(c.pending, f.id)
		}
		c.mu.Unlock()
		switch {
		case !ok:
			if ev.msg != nil {
				ev.msg.Release() // a cancelled call's
			}
		default:
			select {
			case ch <- ev:
			default:
				// More frames than a point read has: the owner broke
				// the protocol. Fail the call rather than block others.
				if ev.msg != nil {
					ev.msg.Release()
				}
				c.forget(f.id)
			}
		}
	}
}

// endStatus is the error of a call's encoded google.rpc.Status (nil:
// none, OK).
func endStatus(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var sp statuspb.Status
	if err := proto.Unmarshal(b, &sp); err != nil {
		return status.Errorf(codes.Internal, "gateway: undecodable status from the owner: %v", err)
	}
	return status.ErrorProto(&sp)
}

// broke closes st, if it is still the stream, and ends its pending calls
// with errPointReadsDown. An owner without the service is not asked again
// for pointReadsRetry.
func (c *pointReadsClient) broke(st grpc.ClientStream, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != st {
		return
	}
	c.stop()
	c.st, c.stop = nil, nil
	if status.Code(err) == codes.Unimplemented {
		c.retryAt = time.Now().Add(pointReadsRetry)
	}
	for id, ch := range c.pending {
		select {
		case ch <- pointReadEvent{end: true, err: errPointReadsDown}:
		default:
		}
		delete(c.pending, id)
	}
}

// readPointRows runs sub over the owner's shared stream; errPointReadsDown
// when the stream failed before any of the call's responses was relayed
// (the caller then takes a stream of its own).
func (g *Gateway) readPointRows(ctx context.Context, loc meta.Location, sub *bigtablepb.ReadRowsRequest, r *readRelay) error {
	conn, err := g.conn(loc)
	if err != nil {
		return err
	}
	c := g.pointReads(meta.ServerAddr(loc.Server))
	id, events, err := c.start(ctx, conn, sub)
	if err != nil {
		return err
	}
	relayed := false
	for {
		select {
		case <-ctx.Done():
			c.cancel(id)
			return status.FromContextError(ctx.Err()).Err()
		case ev := <-events:
			// After an event with end, cancel finds the call gone
			// and sends nothing.
			if ev.msg != nil {
				relayed = true
				if err := r.relayEncoded(ev.msg); err != nil {
					c.cancel(id)
					drain(events)
					return err
				}
				if r.done() {
					c.cancel(id)
					drain(events)
					return nil // the owner stops too: its limit was ours
				}
			}
			if ev.end {
				if errors.Is(ev.err, errPointReadsDown) && relayed {
					return status.Error(codes.Unavailable, "gateway: the stream to the owner broke mid-call")
				}
				return ev.err
			}
		}
	}
}

// drain releases the responses left in a call's channel.
func drain(events <-chan pointReadEvent) {
	for {
		select {
		case ev := <-events:
			if ev.msg != nil {
				ev.msg.Release()
			}
		default:
			return
		}
	}
}
