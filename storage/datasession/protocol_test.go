package datasession_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tabuladb/tabula/storage/datasession"
)

// slowServer is a classic server whose ReadRows answers after delay with
// one cell (row key "missing": no row; "fail": NOT_FOUND), and whose
// MutateRow counts the calls it got.
type slowServer struct {
	bigtablepb.UnimplementedBigtableServer
	delay   atomic.Int64 // nanoseconds
	mutated chan *bigtablepb.MutateRowRequest
}

func (s *slowServer) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	time.Sleep(time.Duration(s.delay.Load()))
	key := req.GetRows().GetRowKeys()[0]
	switch string(key) {
	case "missing":
		return nil
	case "fail":
		return status.Error(codes.NotFound, "table not found")
	}
	return stream.Send(&bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{{
		RowKey: key, FamilyName: wrapperspb.String("f"), Qualifier: wrapperspb.Bytes([]byte("q")),
		TimestampMicros: 1000, Value: []byte("v1"), ValueSize: 4,
	}, {Value: []byte("v2"), RowStatus: &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}}}})
}

func (s *slowServer) MutateRow(ctx context.Context, req *bigtablepb.MutateRowRequest) (*bigtablepb.MutateRowResponse, error) {
	s.mutated <- req
	return &bigtablepb.MutateRowResponse{}, nil
}

// serveWrapped serves inner wrapped with opts on a loopback port for the
// test's duration and returns a client of it.
func serveWrapped(t *testing.T, inner bigtablepb.BigtableServer, opts datasession.Options) bigtablepb.BigtableClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bigtablepb.RegisterBigtableServer(srv, datasession.Wrap(inner, opts))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return bigtablepb.NewBigtableClient(conn)
}

// openTable is the message opening a session of table.
func openTable(table string) *bigtablepb.SessionRequest {
	payload, _ := proto.Marshal(&bigtablepb.OpenTableRequest{TableName: table})
	return &bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_OpenSession{OpenSession: &bigtablepb.OpenSessionRequest{Payload: payload}}}
}

// session opens a session of table "projects/p/instances/i/tables/t" on a
// server of inner wrapped with opts, and returns its stream.
func openSession(t *testing.T, inner bigtablepb.BigtableServer, opts datasession.Options) bigtablepb.Bigtable_OpenTableClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := serveWrapped(t, inner, opts).OpenTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(openTable("projects/p/instances/i/tables/t")); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetOpenSession() == nil {
		t.Fatalf("first answer %v, %v; want open_session", m, err)
	}
	if m, err := st.Recv(); err != nil || m.GetSessionParameters().GetKeepAlive() == nil {
		t.Fatalf("second answer %v, %v; want session_parameters with a keep-alive", m, err)
	}
	return st
}

func sendCall(t *testing.T, st bigtablepb.Bigtable_OpenTableClient, id int64, req *bigtablepb.TableRequest) {
	t.Helper()
	payload, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcRequest{RpcId: id, Payload: payload}}}); err != nil {
		t.Fatal(err)
	}
}

func readCall(key string) *bigtablepb.TableRequest {
	return &bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_ReadRow{ReadRow: &bigtablepb.SessionReadRowRequest{Key: []byte(key)}}}
}

// TestSessionProtocol: the answers a client gets on a session — each
// call's answer under its rpc_id (a row merged from a value in two
// chunks, no row, a write), errors as error frames with the classic
// call's status, heartbeats while a call runs past a fifth of the
// keep-alive, and the end of the stream at CloseSession.
func TestSessionProtocol(t *testing.T) {
	inner := &slowServer{mutated: make(chan *bigtablepb.MutateRowRequest, 1)}
	st := openSession(t, inner, datasession.Options{Load: 1, KeepAlive: 100 * time.Millisecond})

	sendCall(t, st, 1, readCall("r1"))
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var answer bigtablepb.TableResponse
	if vr := m.GetVirtualRpc(); vr == nil || vr.GetRpcId() != 1 || proto.Unmarshal(vr.GetPayload(), &answer) != nil {
		t.Fatalf("answer %v, want the virtual_rpc answer of call 1", m)
	}
	row := answer.GetReadRow().GetRow()
	if string(row.GetKey()) != "r1" || len(row.GetFamilies()) != 1 || string(row.Families[0].Columns[0].Cells[0].Value) != "v1v2" {
		t.Fatalf("row %v, want r1 with f:q = v1v2", row)
	}

	sendCall(t, st, 2, readCall("missing"))
	if m, err := st.Recv(); err != nil || m.GetVirtualRpc().GetRpcId() != 2 || proto.Unmarshal(m.GetVirtualRpc().GetPayload(), &answer) != nil || answer.GetReadRow().GetRow() != nil {
		t.Fatalf("answer %v (%v), want call 2 with no row", m, err)
	}

	sendCall(t, st, 3, readCall("fail"))
	if m, err := st.Recv(); err != nil || m.GetError().GetRpcId() != 3 || codes.Code(m.GetError().GetStatus().GetCode()) != codes.NotFound {
		t.Fatalf("answer %v (%v), want an error frame of call 3, NOT_FOUND", m, err)
	}

	sendCall(t, st, 4, &bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_MutateRow{MutateRow: &bigtablepb.SessionMutateRowRequest{Key: []byte("w"),
		Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}}}}}})
	if m, err := st.Recv(); err != nil || m.GetVirtualRpc().GetRpcId() != 4 || proto.Unmarshal(m.GetVirtualRpc().GetPayload(), &answer) != nil || answer.GetMutateRow() == nil {
		t.Fatalf("answer %v (%v), want the mutate_row answer of call 4", m, err)
	}
	if req := <-inner.mutated; req.GetTableName() != "projects/p/instances/i/tables/t" || string(req.GetRowKey()) != "w" || len(req.GetMutations()) != 1 {
		t.Fatalf("MutateRow got %v", req)
	}

	sendCall(t, st, 5, &bigtablepb.TableRequest{})
	if m, err := st.Recv(); err != nil || m.GetError().GetRpcId() != 5 || codes.Code(m.GetError().GetStatus().GetCode()) != codes.InvalidArgument {
		t.Fatalf("answer %v (%v), want an error frame of call 5, INVALID_ARGUMENT", m, err)
	}

	inner.delay.Store(int64(300 * time.Millisecond)) // a fifth of the keep-alive is 20 ms
	sendCall(t, st, 6, readCall("slow"))
	beats := 0
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetHeartbeat() != nil {
			beats++
			continue
		}
		if m.GetVirtualRpc().GetRpcId() != 6 {
			t.Fatalf("answer %v, want call 6's", m)
		}
		break
	}
	if beats < 2 {
		t.Errorf("%d heartbeats during a 300 ms call, want one about every 20 ms", beats)
	}

	if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_CloseSession{CloseSession: &bigtablepb.CloseSessionRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSession: %v, want the stream's end", err)
	}
}

// TestSessionGoAway: a server that stops sends GoAway naming the last
// call it admitted, refuses calls that cross it as UNAVAILABLE (the
// client retries those on another session), and ends the session when
// the client closes it.
func TestSessionGoAway(t *testing.T) {
	stopping := make(chan struct{})
	st := openSession(t, &slowServer{}, datasession.Options{Load: 1, Stopping: stopping})
	sendCall(t, st, 7, readCall("r"))
	if m, err := st.Recv(); err != nil || m.GetVirtualRpc().GetRpcId() != 7 {
		t.Fatalf("answer %v (%v), want call 7's", m, err)
	}
	close(stopping)
	m, err := st.Recv()
	if err != nil || m.GetGoAway() == nil || m.GetGoAway().GetLastRpcIdAdmitted() != 7 {
		t.Fatalf("after the stop: %v (%v), want GoAway admitting up to call 7", m, err)
	}
	sendCall(t, st, 8, readCall("r"))
	if m, err := st.Recv(); err != nil || m.GetError().GetRpcId() != 8 || codes.Code(m.GetError().GetStatus().GetCode()) != codes.Unavailable {
		t.Fatalf("a call after GoAway: %v (%v), want UNAVAILABLE", m, err)
	}
	if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_CloseSession{CloseSession: &bigtablepb.CloseSessionRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSession: %v, want the stream's end", err)
	}
}

// TestSessionRefusals: a session must open with open_session naming a
// table; a server already stopping refuses new sessions.
func TestSessionRefusals(t *testing.T) {
	stopping := make(chan struct{})
	close(stopping)
	c := serveWrapped(t, &slowServer{}, datasession.Options{Stopping: stopping})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(first *bigtablepb.SessionRequest) error {
		st, err := c.OpenTable(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(first); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	for _, tc := range []struct {
		name  string
		first *bigtablepb.SessionRequest
		code  codes.Code
	}{
		{"a call first", &bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcRequest{RpcId: 1}}}, codes.InvalidArgument},
		{"no table", openTable(""), codes.InvalidArgument},
		{"stopping", openTable("projects/p/instances/i/tables/t"), codes.Unavailable},
	} {
		if err := open(tc.first); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	if _, err := c.GetClientConfiguration(ctx, &bigtablepb.GetClientConfigurationRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetClientConfiguration without an instance: %v, want INVALID_ARGUMENT", err)
	}
	cfg, err := c.GetClientConfiguration(ctx, &bigtablepb.GetClientConfigurationRequest{InstanceName: "projects/p/instances/i"})
	if err != nil || cfg.GetSessionConfiguration().GetSessionLoad() != 0 {
		t.Errorf("GetClientConfiguration of a server with Load 0: %v, %v", cfg, err)
	}
}

// stuckServer's ReadRows ignores its context and returns only when
// released.
type stuckServer struct {
	bigtablepb.UnimplementedBigtableServer
	entered, release chan struct{}
}

func (s *stuckServer) ReadRows(*bigtablepb.ReadRowsRequest, bigtablepb.Bigtable_ReadRowsServer) error {
	close(s.entered)
	<-s.release
	return nil
}

// TestSessionEndsWhenClientLeaves: a client that goes away during a call
// gets its session ended at once, even while the call still runs (the
// server's stream is not held until the call gives up).
func TestSessionEndsWhenClientLeaves(t *testing.T) {
	reg := prometheus.NewRegistry()
	inner := &stuckServer{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(inner.release)
	c := serveWrapped(t, inner, datasession.Options{Load: 1, Metrics: datasession.NewMetrics(reg)})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.OpenTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(openTable("projects/p/instances/i/tables/t")); err != nil {
		t.Fatal(err)
	}
	sendCall(t, st, 1, readCall("r"))
	<-inner.entered
	open := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "tabula_sessions_open" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no tabula_sessions_open")
		return -1
	}
	if n := open(); n != 1 {
		t.Fatalf("%v sessions open during the call, want 1", n)
	}
	cancel() // the client leaves; the call stays stuck
	deadline := time.Now().Add(10 * time.Second)
	for open() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session stayed open while its call was stuck after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
