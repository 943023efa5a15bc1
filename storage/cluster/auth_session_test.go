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
// write there, and a table without its grant; a writer writes; a caller
// without credentials opens no session — and the refused write changes
// nothing.
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
	// Without credentials no session opens.
	st, err := e.data("none").OpenTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := proto.Marshal(&bigtablepb.OpenTableRequest{TableName: tablePath(table)})
	if err := st.Send(&bigtablepb.SessionRequest{Payload: &bigtablepb.SessionRequest_OpenSession{OpenSession: &bigtablepb.OpenSessionRequest{Payload: payload}}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a session opened without credentials: %v, want UNAUTHENTICATED", err)
	}
}
