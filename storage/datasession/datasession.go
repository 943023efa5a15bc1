// Package datasession serves Cloud Bigtable's session data plane: the
// long-lived OpenTable and OpenAuthorizedView streams on which the official
// clients (Go v1.58 and later) send single-row reads and writes as virtual
// RPCs, once the server's GetClientConfiguration tells them to.
//
// Why. A point read on the classic API is a server-streaming ReadRows call:
// a new HTTP/2 stream, headers and trailers each way, for one row. On a
// session it is one message each way on a stream that stays open. Measured
// with the official Go client and 32 callers, a ReadRow cost the client
// about 58 µs of CPU on a session against 111 µs as a ReadRows call
// (BENCHMARKS.md); a client connected this way reads about twice as fast.
//
// How. Wrap puts the session methods in front of a classic
// bigtablepb.BigtableServer and leaves every other method to it. Each
// virtual RPC is turned into the classic request it stands for — ReadRow
// into a ReadRows of one row key, MutateRow into a MutateRow — and run
// through the generated handler of that method and the server's own
// interceptors (Options.Unary, Options.Stream), so that it is checked,
// routed, fenced, counted and answered exactly as the classic call would
// be: the same errors, the same authorized-view rules, the same metrics.
// A ReadRow's row comes back whole from a tablet served here
// (tabletserver.WithRowTaker) rather than encoded as CellChunks only to be
// merged again; from a tablet a gateway reaches elsewhere, it is merged
// from the responses the gateway relays.
// A session carries one virtual RPC at a time (the client's protocol), so
// a session is served by one goroutine in order.
//
// Protocol, as the v1.58 Go client speaks it: the client opens the stream
// with OpenSession (its payload the OpenTableRequest or
// OpenAuthorizedViewRequest); the server answers OpenSession (which makes
// the session usable) and SessionParameters with its keep-alive; each
// VirtualRpc {rpc_id, payload} is answered by a VirtualRpcResponse or an
// ErrorResponse with the same rpc_id; while one runs longer than a
// fraction of the keep-alive the server sends Heartbeats, without which
// the client closes the session; CloseSession ends it. A server that
// stops sends GoAway, and the client moves its calls to other sessions.
// Clients connected with a gRPC connection of their own (WithGRPCConn, the
// emulator variable) never build sessions and stay on the classic API.
package datasession

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tabuladb/tabula/storage/meta"

	"github.com/tabuladb/tabula/storage/tabletserver"
)

// Defaults of Options.
const (
	// DefaultKeepAlive is the keep-alive a server announces: a client
	// that hears nothing for this long while a call runs on the session
	// closes it. Long enough for a write that waits on a slow commit log;
	// heartbeats (every KeepAlive/5) keep such a call's session alive.
	DefaultKeepAlive = 10 * time.Second
	// DefaultGoAwayGrace is how long a stopping server waits, after
	// GoAway, for the client to close a session.
	DefaultGoAwayGrace = 2 * time.Second
)

// Options configure Wrap.
type Options struct {
	// Load is the share of single-row reads and writes the clients are
	// told to send on sessions, in [0, 1]: 1 sends all of them, 0 keeps
	// the clients on the classic API (the sessions are still served, for
	// a client that opens one anyway).
	Load float32
	// Unary and Stream are the server's interceptors, in the order the
	// gRPC server chains them: each virtual RPC runs through them as the
	// classic call it stands for. Nil ones are skipped.
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Stopping, when closed, makes every session send GoAway and end
	// (after the call it runs, and the client's CloseSession or
	// DefaultGoAwayGrace): a gRPC GracefulStop waits for open streams,
	// and sessions stay open for as long as the client lives.
	Stopping <-chan struct{}
	// KeepAlive is announced to clients; default DefaultKeepAlive.
	KeepAlive time.Duration
	// Metrics, when set, counts the sessions and their calls.
	Metrics *Metrics
}

// Server is a bigtablepb.BigtableServer serving sessions in front of a
// classic one (see the package doc).
type Server struct {
	bigtablepb.BigtableServer
	opts Options
	// readRows is ReadRows' generated handler inside the stream
	// interceptors, and mutateRow MutateRow's inside the unary ones:
	// composed once.
	readRows    grpc.StreamHandler
	mutateRowFn grpc.UnaryHandler
}

// Wrap returns inner with the session data plane in front of it.
func Wrap(inner bigtablepb.BigtableServer, opts Options) *Server {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	opts.Load = min(max(opts.Load, 0), 1)
	readRowsInfo := &grpc.StreamServerInfo{FullMethod: bigtablepb.Bigtable_ReadRows_FullMethodName, IsServerStream: true}
	s := &Server{BigtableServer: inner, opts: opts, readRows: wrapHandler(opts.Stream, readRowsInfo, readRowsHandler)}
	mutateRowInfo := &grpc.UnaryServerInfo{Server: inner, FullMethod: bigtablepb.Bigtable_MutateRow_FullMethodName}
	s.mutateRowFn = wrapUnary(opts.Unary, mutateRowInfo, func(ctx context.Context, req any) (any, error) {
		return inner.MutateRow(ctx, req.(*bigtablepb.MutateRowRequest))
	})
	return s
}

// GetClientConfiguration tells the client what share of its single-row
// calls to send on sessions, and to ask again every five minutes.
func (s *Server) GetClientConfiguration(ctx context.Context, req *bigtablepb.GetClientConfigurationRequest) (*bigtablepb.ClientConfiguration, error) {
	if _, _, err := meta.ParseInstanceName(req.GetInstanceName()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "instance_name: %v", err)
	}
	return &bigtablepb.ClientConfiguration{
		Polling: &bigtablepb.ClientConfiguration_PollingConfiguration_{
			PollingConfiguration: &bigtablepb.ClientConfiguration_PollingConfiguration{
				PollingInterval:  durationpb.New(5 * time.Minute),
				ValidityDuration: durationpb.New(time.Hour),
				MaxRpcRetryCount: 5,
			},
		},
		SessionConfiguration: &bigtablepb.SessionClientConfiguration{
			SessionLoad: s.opts.Load,
			ChannelConfiguration: &bigtablepb.SessionClientConfiguration_ChannelPoolConfiguration{
				MinServerCount: 1, MaxServerCount: 1, PerServerSessionCount: 10,
				Mode: &bigtablepb.SessionClientConfiguration_ChannelPoolConfiguration_CloudPathOnly_{
					CloudPathOnly: &bigtablepb.SessionClientConfiguration_ChannelPoolConfiguration_CloudPathOnly{},
				},
			},
			// A session carries one call at a time: the pool grows to
			// the calls in flight (plus headroom), up to the maximum.
			SessionPoolConfiguration: &bigtablepb.SessionClientConfiguration_SessionPoolConfiguration{
				Headroom:                           0.5,
				MinSessionCount:                    2,
				MaxSessionCount:                    256,
				NewSessionCreationBudget:           50,
				NewSessionCreationPenalty:          durationpb.New(time.Minute),
				ConsecutiveSessionFailureThreshold: 10,
				NewSessionQueueLength:              10,
				LoadBalancingOptions: &bigtablepb.LoadBalancingOptions{
					LoadBalancingStrategy: &bigtablepb.LoadBalancingOptions_LeastInFlight_{
						LeastInFlight: &bigtablepb.LoadBalancingOptions_LeastInFlight{},
					},
				},
			},
		},
	}, nil
}

// OpenTable serves a session of a table.
func (s *Server) OpenTable(stream bigtablepb.Bigtable_OpenTableServer) error {
	return s.serve(stream, "table", func(payload []byte) (target, error) {
		var req bigtablepb.OpenTableRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return target{}, status.Errorf(codes.InvalidArgument, "open_session.payload: not an OpenTableRequest: %v", err)
		}
		if req.GetTableName() == "" {
			return target{}, status.Error(codes.InvalidArgument, "open_session.payload.table_name: required")
		}
		return target{table: req.GetTableName(), appProfile: req.GetAppProfileId(), kind: tableKind}, nil
	})
}

// OpenAuthorizedView serves a session of an authorized view: its calls
// are the classic calls naming authorized_view_name.
func (s *Server) OpenAuthorizedView(stream bigtablepb.Bigtable_OpenAuthorizedViewServer) error {
	return s.serve(stream, "authorized_view", func(payload []byte) (target, error) {
		var req bigtablepb.OpenAuthorizedViewRequest
		if err := proto.Unmarshal(payload, &req); err != nil {
			return target{}, status.Errorf(codes.InvalidArgument, "open_session.payload: not an OpenAuthorizedViewRequest: %v", err)
		}
		if req.GetAuthorizedViewName() == "" {
			return target{}, status.Error(codes.InvalidArgument, "open_session.payload.authorized_view_name: required")
		}
		return target{view: req.GetAuthorizedViewName(), appProfile: req.GetAppProfileId(), kind: viewKind}, nil
	})
}

// target is what a session's calls address.
type target struct {
	table, view, appProfile string
	kind                    payloadKind
}

// sessionStream is the stream of every Open* method.
type sessionStream = grpc.BidiStreamingServer[bigtablepb.SessionRequest, bigtablepb.SessionResponse]

// serve runs one session: the handshake, then each call in turn until the
// client closes the session, the stream ends or the server stops.
//
// The calls are received, run and answered in order by one goroutine that
// lives as long as the session (a goroutine per call would grow a fresh
// stack for every one: a tenth of a point read's CPU). The handler's own
// goroutine waits for it, or for the server to stop; a third sends
// heartbeats while a call runs long. Every send goes through session.send.
func (s *Server) serve(stream sessionStream, kind string, open func(payload []byte) (target, error)) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	opening := first.GetOpenSession()
	if opening == nil {
		return status.Errorf(codes.InvalidArgument, "session: the first message must be open_session, got %T", first.GetPayload())
	}
	t, err := open(opening.GetPayload())
	if err != nil {
		return err
	}
	if stopped(s.opts.Stopping) {
		return status.Error(codes.Unavailable, "session: the server is stopping")
	}
	ss := &session{stream: stream}
	if err := ss.send(&bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_OpenSession{OpenSession: &bigtablepb.OpenSessionResponse{}}}); err != nil {
		return err
	}
	if err := ss.send(&bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_SessionParameters{
		SessionParameters: &bigtablepb.SessionParametersResponse{KeepAlive: durationpb.New(s.opts.KeepAlive)}}}); err != nil {
		return err
	}
	m := s.opts.Metrics
	m.opened(kind)
	defer m.closed(kind)
	defer ss.end() // no send once the handler has returned

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.work(ctx, ss, t) }()
	go ss.heartbeats(ctx, s.opts.KeepAlive/5)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The client went away. Its call may still be running (a call
		// that does not heed its context): the stream is given back
		// now, and the call's answer is dropped (ss.end).
		return status.FromContextError(ctx.Err()).Err()
	case <-s.opts.Stopping:
	}
	// Stopping: the client is told to go, and moves its calls to other
	// sessions; it closes this one once its call is answered. Calls are
	// refused from here on; one the worker admitted has stored its id
	// before it looked (work), so the GoAway names it.
	ss.goingAway.Store(true)
	if err := ss.send(&bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_GoAway{GoAway: &bigtablepb.GoAwayResponse{
		Reason: "server stopping", Description: "the server is shutting down", LastRpcIdAdmitted: ss.lastRPC.Load()}}}); err != nil {
		return nil
	}
	grace := time.NewTimer(DefaultGoAwayGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	}
	return nil
}

// session is one session's stream and state shared by its goroutines.
type session struct {
	stream sessionStream

	mu    sync.Mutex // serializes sends; guards ended
	ended bool

	lastRPC   atomic.Int64 // the last call received
	goingAway atomic.Bool  // GoAway was sent: calls are refused
	running   atomic.Int64 // when the call under way started (UnixNano); 0: none
}

// send sends msg unless the handler has returned.
func (ss *session) send(msg *bigtablepb.SessionResponse) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return errSessionEnded
	}
	return ss.stream.Send(msg)
}

var errSessionEnded = errors.New("datasession: the session ended")

// end stops the sends: the stream is the handler's no longer.
func (ss *session) end() {
	ss.mu.Lock()
	ss.ended = true
	ss.mu.Unlock()
}

// heartbeats sends a Heartbeat every interval while a call has been
// running for longer than that: the client closes a session that stays
// silent for its keep-alive while a call is in flight.
func (ss *session) heartbeats(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if since := ss.running.Load(); since != 0 && now.UnixNano()-since >= int64(interval) {
				if ss.send(&bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_Heartbeat{Heartbeat: &bigtablepb.HeartbeatResponse{}}}) != nil {
					return
				}
			}
		}
	}
}

// work receives the session's calls and answers each in turn until the
// client closes the session (nil) or the stream fails (its error).
func (s *Server) work(ctx context.Context, ss *session, t target) error {
	for {
		msg, err := ss.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch p := msg.GetPayload().(type) {
		case *bigtablepb.SessionRequest_CloseSession:
			return nil
		case *bigtablepb.SessionRequest_VirtualRpc:
			vr := p.VirtualRpc
			ss.lastRPC.Store(vr.GetRpcId())
			if ss.goingAway.Load() {
				// Crossed the GoAway: the client retries it elsewhere.
				st := status.New(codes.Unavailable, "session: the server is stopping; retry on another session")
				if err := ss.send(errorResponse(vr.GetRpcId(), st)); err != nil {
					return err
				}
				continue
			}
			if err := ss.send(s.call(ctx, ss, t, vr)); err != nil {
				return err
			}
		default:
			return status.Errorf(codes.InvalidArgument, "session: unexpected %T after the session opened", p)
		}
	}
}

// call runs one virtual RPC and returns its answer.
func (s *Server) call(ctx context.Context, ss *session, t target, vr *bigtablepb.VirtualRpcRequest) *bigtablepb.SessionResponse {
	if d := vr.GetDeadline(); d != nil && d.AsDuration() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.AsDuration())
		defer cancel()
	}
	start := time.Now()
	ss.running.Store(start.UnixNano())
	payload, method, err := s.dispatch(ctx, t, vr.GetPayload())
	ss.running.Store(0)
	s.opts.Metrics.called(method, err)
	if err != nil {
		return errorResponse(vr.GetRpcId(), status.Convert(err))
	}
	return &bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcResponse{
		RpcId:   vr.GetRpcId(),
		Payload: payload,
		Stats:   &bigtablepb.SessionRequestStats{BackendLatency: durationpb.New(time.Since(start))},
	}}}
}

// errorResponse is the answer of call rpcID failing with st.
func errorResponse(rpcID int64, st *status.Status) *bigtablepb.SessionResponse {
	return &bigtablepb.SessionResponse{Payload: &bigtablepb.SessionResponse_Error{Error: &bigtablepb.ErrorResponse{RpcId: rpcID, Status: st.Proto()}}}
}

// dispatch decodes a call's payload, runs it as its classic method and
// returns the encoded response, and the method's name for the metrics.
func (s *Server) dispatch(ctx context.Context, t target, payload []byte) ([]byte, string, error) {
	read, mutate, err := t.kind.decode(payload)
	if err != nil {
		return nil, "unknown", err
	}
	switch {
	case read != nil:
		row, err := s.readRow(ctx, t, read)
		if err != nil {
			return nil, "ReadRow", err
		}
		if b, ok := encodeReadAnswer(row); ok {
			return b, "ReadRow", nil
		}
		b, err := t.kind.encodeRead(&bigtablepb.SessionReadRowResponse{Row: row})
		return b, "ReadRow", err
	default:
		if err := s.mutateRow(ctx, t, mutate); err != nil {
			return nil, "MutateRow", err
		}
		return mutateAnswer, "MutateRow", nil
	}
}

// mutateAnswer is the answer of every MutateRow that succeeded: a
// TableResponse or an AuthorizedViewResponse (alike on the wire) holding
// an empty SessionMutateRowResponse as mutate_row (field 2).
var mutateAnswer = []byte{2<<3 | 2, 0}

func stopped(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// payloadKind decodes the calls of one kind of session and encodes their
// read answers (when encodeReadAnswer cannot): TableRequest and
// TableResponse, or their authorized-view twins.
type payloadKind struct {
	decode     func([]byte) (*bigtablepb.SessionReadRowRequest, *bigtablepb.SessionMutateRowRequest, error)
	encodeRead func(*bigtablepb.SessionReadRowResponse) ([]byte, error)
}

var tableKind = payloadKind{
	decode: func(b []byte) (*bigtablepb.SessionReadRowRequest, *bigtablepb.SessionMutateRowRequest, error) {
		if read, mutate, ok := decodeCallFast(b); ok {
			return read, mutate, nil
		}
		var req bigtablepb.TableRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return nil, nil, status.Errorf(codes.InvalidArgument, "virtual_rpc.payload: not a TableRequest: %v", err)
		}
		switch p := req.GetPayload().(type) {
		case *bigtablepb.TableRequest_ReadRow:
			return p.ReadRow, nil, nil
		case *bigtablepb.TableRequest_MutateRow:
			return nil, p.MutateRow, nil
		}
		return nil, nil, unknownCall(req.GetPayload())
	},
	encodeRead: func(r *bigtablepb.SessionReadRowResponse) ([]byte, error) {
		return proto.Marshal(&bigtablepb.TableResponse{Payload: &bigtablepb.TableResponse_ReadRow{ReadRow: r}})
	},
}

var viewKind = payloadKind{
	decode: func(b []byte) (*bigtablepb.SessionReadRowRequest, *bigtablepb.SessionMutateRowRequest, error) {
		if read, mutate, ok := decodeCallFast(b); ok {
			return read, mutate, nil
		}
		var req bigtablepb.AuthorizedViewRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return nil, nil, status.Errorf(codes.InvalidArgument, "virtual_rpc.payload: not an AuthorizedViewRequest: %v", err)
		}
		switch p := req.GetPayload().(type) {
		case *bigtablepb.AuthorizedViewRequest_ReadRow:
			return p.ReadRow, nil, nil
		case *bigtablepb.AuthorizedViewRequest_MutateRow:
			return nil, p.MutateRow, nil
		}
		return nil, nil, unknownCall(req.GetPayload())
	},
	encodeRead: func(r *bigtablepb.SessionReadRowResponse) ([]byte, error) {
		return proto.Marshal(&bigtablepb.AuthorizedViewResponse{Payload: &bigtablepb.AuthorizedViewResponse_ReadRow{ReadRow: r}})
	},
}

func unknownCall(p any) error {
	if p == nil {
		return status.Error(codes.InvalidArgument, "virtual_rpc.payload: no call in it")
	}
	return status.Errorf(codes.Unimplemented, "virtual_rpc.payload: %T is not served on sessions", p)
}

// --- the calls, as classic calls ---

// readRowsHandler is ReadRows' generated handler: a session's read runs
// through the very code a classic request does once it has been received
// (a write calls the service's MutateRow, as MutateRow's handler does).
var readRowsHandler = streamHandler("ReadRows")

func streamHandler(name string) grpc.StreamHandler {
	for _, d := range bigtablepb.Bigtable_ServiceDesc.Streams {
		if d.StreamName == name {
			return d.Handler
		}
	}
	panic("datasession: no stream " + name + " in google.bigtable.v2.Bigtable")
}

// readRow reads one row as a ReadRows of its key would, and returns it (nil
// when it does not exist or the filter leaves nothing of it).
func (s *Server) readRow(ctx context.Context, t target, r *bigtablepb.SessionReadRowRequest) (*bigtablepb.Row, error) {
	req := &bigtablepb.ReadRowsRequest{
		TableName: t.table, AuthorizedViewName: t.view, AppProfileId: t.appProfile,
		Rows:      &bigtablepb.RowSet{RowKeys: [][]byte{r.GetKey()}},
		Filter:    r.GetFilter(),
		RowsLimit: 1,
	}
	cs := &rowStream{req: req}
	// A tablet served here hands the row over whole (takeRow); one served
	// elsewhere answers through a gateway, whose responses the stream
	// merges (SendMsg).
	cs.ctx = tabletserver.WithRowTaker(ctx, cs.takeRow)
	if err := s.readRows(s.BigtableServer, cs); err != nil {
		return nil, err
	}
	return cs.result()
}

// mutateRow applies one row's mutations as a MutateRow would.
func (s *Server) mutateRow(ctx context.Context, t target, r *bigtablepb.SessionMutateRowRequest) error {
	_, err := s.mutateRowFn(ctx, &bigtablepb.MutateRowRequest{
		TableName: t.table, AuthorizedViewName: t.view, AppProfileId: t.appProfile,
		RowKey: r.GetKey(), Mutations: r.GetMutations(),
	})
	return err
}

// wrapUnary returns handler inside the unary interceptors, the first
// outermost (as grpc.ChainUnaryInterceptor orders them), for calls of
// info's method: composed once.
func wrapUnary(list []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
	h := handler
	for i := len(list) - 1; i >= 0; i-- {
		if list[i] == nil {
			continue
		}
		interceptor, next := list[i], h
		h = func(ctx context.Context, req any) (any, error) { return interceptor(ctx, req, info, next) }
	}
	return h
}

// wrapHandler returns handler inside the stream interceptors, the first
// outermost (as grpc.ChainStreamInterceptor orders them), for calls of
// info's method: composed once, so that a call allocates no closures.
func wrapHandler(list []grpc.StreamServerInterceptor, info *grpc.StreamServerInfo, handler grpc.StreamHandler) grpc.StreamHandler {
	h := handler
	for i := len(list) - 1; i >= 0; i-- {
		if list[i] == nil {
			continue
		}
		interceptor, next := list[i], h
		h = func(srv any, ss grpc.ServerStream) error { return interceptor(srv, ss, info, next) }
	}
	return h
}
