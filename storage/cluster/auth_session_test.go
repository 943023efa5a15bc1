package cluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/security/auth"
)

// TestSessionsUnderAuth: with authentication on, the official client's
// calls on sessions are checked one by one as the classic calls they
// stand for — a reader reads its table on a session and is refused a
// write there, and a table without its grant; a writer writes — and the
// refused write changes nothing; then checkSessionCalls on raw sessions.
func TestSessionsUnderAuth(t *testing.T) {
	e := startAuthDevWith(t, func(c *DevConfig) { c.HTTPAddr = "127.0.0.1:0" })
	const table, other = "sessauth", "sessauth-nogrant"
	e.createTable(t, table)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.admin("root").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: authInstance, TableId: other, Table: &adminpb.Table{
		ColumnFamilies: map[string]*adminpb.ColumnFamily{"a": {}},
	}}); err != nil {
		t.Fatal(err)
	}
	dev := e.dev
	sessionClient := func(token string) *bigtable.Client {
		opts := []option.ClientOption{option.WithEndpoint(e.addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithGRPCDialOption(grpc.WithPerRPCCredentials(auth.BearerToken(token)))}
		c, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	calls := func(code string) int {
		resp, err := http.Get("http://" + dev.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "tabula_session_calls_total{") && strings.Contains(line, `code="`+code+`"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				n += int(v)
			}
		}
		return n
	}

	readerClient := sessionClient(e.tokens["reader"])
	reader := readerClient.Open(table)
	deadline := time.Now().Add(30 * time.Second)
	for calls("OK") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read went on a session")
		}
		row, err := reader.ReadRow(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if len(row["a"]) != 1 || string(row["a"][0].Value) != "ax" {
			t.Fatalf("reader's r1: %v", row)
		}
	}
	before := e.snapshot(t, table)
	denied := calls("PermissionDenied")
	m := bigtable.NewMutation()
	m.Set("a", "x", 5000, []byte("written by a reader"))
	if err := reader.Apply(ctx, "r1", m); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a reader's write on a session: %v, want PERMISSION_DENIED", err)
	}
	if _, err := readerClient.Open(other).ReadRow(ctx, "r1"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a read of a table without a grant: %v, want PERMISSION_DENIED", err)
	}
	if n := calls("PermissionDenied") - denied; n != 2 {
		t.Errorf("%d refusals were of calls on sessions, want 2", n)
	}
	if after := e.snapshot(t, table); after != before {
		t.Errorf("the refused write changed the table:\n%s\nbefore:\n%s", after, before)
	}
	writer := sessionClient(e.tokens["writer"]).Open(table)
	if err := writer.Apply(ctx, "r3", m); err != nil {
		t.Fatalf("a writer's write on a session: %v", err)
	}
	checkSessionCalls(t, e)
}

// checkSessionCalls makes calls on raw sessions (the protocol's own
// messages, so that they are certainly on sessions) of env as a reader, a
// writer and without credentials: each is decided as its classic call —
// the reader reads its table's row, is refused a write (the table
// unchanged) and any read of a table without its grant; the writer writes.
func checkSessionCalls(t *testing.T, e *authEnv) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const table, other = "sesscalls", "sesscalls-nogrant"
	e.createTable(t, table)
	if _, err := e.admin("root").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: authInstance, TableId: other, Table: &adminpb.Table{
		ColumnFamilies: map[string]*adminpb.ColumnFamily{"a": {}},
	}}); err != nil {
		t.Fatal(err)
	}
	open := func(who, tb string) bigtablepb.Bigtable_OpenTableClient {
		t.Helper()
		st, err := e.data(who).OpenTable(ctx)
		if err != nil {
			t.Fatal(err)
		}
		payload, _ := proto.Marshal(&bigtablepb.OpenTableRequest{TableName: tablePath(tb)})
		// io.EOF: the server already ended the stream (it refuses a
		// caller without credentials at once); as gRPC's Send says, the
		// stream's status is then Recv's to report, and the callers read it.
		if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_OpenSession{OpenSession: &bigtablepb.OpenSessionRequest{Payload: payload}}}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return st
	}
	// call sends one call and returns its answer, skipping the session's
	// other frames (its opening, parameters, heartbeats).
	call := func(st bigtablepb.Bigtable_OpenTableClient, id int64, req *bigtablepb.TableRequest) (*bigtablepb.TableResponse, error) {
		t.Helper()
		payload, _ := proto.Marshal(req)
		if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_VirtualRpc{VirtualRpc: &bigtablepb.VirtualRpcRequest{RpcId: id, Payload: payload}}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := st.Recv()
			if err != nil {
				t.Fatalf("call %d: the session ended: %v", id, err)
			}
			if er := m.GetError(); er != nil {
				if er.GetRpcId() != id {
					t.Fatalf("an error frame of call %d, want %d's", er.GetRpcId(), id)
				}
				return nil, status.ErrorProto(er.GetStatus())
			}
			if vr := m.GetVirtualRpc(); vr != nil {
				if vr.GetRpcId() != id {
					t.Fatalf("the answer of call %d, want %d's", vr.GetRpcId(), id)
				}
				var resp bigtablepb.TableResponse
				if err := proto.Unmarshal(vr.GetPayload(), &resp); err != nil {
					t.Fatal(err)
				}
				return &resp, nil
			}
		}
	}
	read := func(key string) *bigtablepb.TableRequest {
		return &bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_ReadRow{ReadRow: &bigtablepb.SessionReadRowRequest{Key: []byte(key)}}}
	}
	write := &bigtablepb.TableRequest{Payload: &bigtablepb.TableRequest_MutateRow{MutateRow: &bigtablepb.SessionMutateRowRequest{
		Key: []byte("r1"), Mutations: []*bigtablepb.Mutation{setCell("a", "x", "on a session")}}}}

	reader := open("reader", table)
	resp, err := call(reader, 1, read("r1"))
	if err != nil {
		t.Fatalf("the reader's read on a session: %v", err)
	}
	if fams := resp.GetReadRow().GetRow().GetFamilies(); len(fams) != 2 {
		t.Fatalf("the reader's r1: %v, want families a and b", resp)
	}
	before := e.snapshot(t, table)
	if _, err := call(reader, 2, write); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the reader's write on a session: %v, want PERMISSION_DENIED", err)
	}
	if after := e.snapshot(t, table); after != before {
		t.Fatalf("the refused write changed the table:\n%s\nbefore:\n%s", after, before)
	}
	if _, err := call(open("reader", other), 1, read("r1")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the reader's read of a table without its grant: %v, want PERMISSION_DENIED", err)
	}
	if _, err := call(open("writer", table), 1, write); err != nil {
		t.Fatalf("the writer's write on a session: %v", err)
	}
	if _, err := call(open("writer", table), 1, read("r1")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the writer's read on a session: %v, want PERMISSION_DENIED", err)
	}
	// Without credentials no session opens.
	if _, err := open("none", table).Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a session opened without credentials: %v, want UNAUTHENTICATED", err)
	}
}
