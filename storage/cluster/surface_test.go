package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// implementedRPCs are the RPCs of google.bigtable.v2.Bigtable and
// google.bigtable.admin.v2.BigtableTableAdmin that tabula dev serves; every
// other RPC of the two services must answer UNIMPLEMENTED naming itself,
// so that clients fall back as designed. Adding an RPC here is a conscious
// change: the test then checks it answers something else.
var implementedRPCs = map[string]bool{
	"google.bigtable.v2.Bigtable.ReadRows":           true,
	"google.bigtable.v2.Bigtable.SampleRowKeys":      true,
	"google.bigtable.v2.Bigtable.MutateRow":          true,
	"google.bigtable.v2.Bigtable.MutateRows":         true,
	"google.bigtable.v2.Bigtable.CheckAndMutateRow":  true,
	"google.bigtable.v2.Bigtable.PingAndWarm":        true,
	"google.bigtable.v2.Bigtable.ReadModifyWriteRow": true,
	// The session data plane (storage/datasession).
	"google.bigtable.v2.Bigtable.GetClientConfiguration": true,
	"google.bigtable.v2.Bigtable.OpenTable":              true,
	"google.bigtable.v2.Bigtable.OpenAuthorizedView":     true,

	"google.bigtable.admin.v2.BigtableTableAdmin.CreateTable":              true,
	"google.bigtable.admin.v2.BigtableTableAdmin.ListTables":               true,
	"google.bigtable.admin.v2.BigtableTableAdmin.GetTable":                 true,
	"google.bigtable.admin.v2.BigtableTableAdmin.UpdateTable":              true,
	"google.bigtable.admin.v2.BigtableTableAdmin.DeleteTable":              true,
	"google.bigtable.admin.v2.BigtableTableAdmin.ModifyColumnFamilies":     true,
	"google.bigtable.admin.v2.BigtableTableAdmin.DropRowRange":             true,
	"google.bigtable.admin.v2.BigtableTableAdmin.GenerateConsistencyToken": true,
	"google.bigtable.admin.v2.BigtableTableAdmin.CheckConsistency":         true,

	"google.bigtable.admin.v2.BigtableTableAdmin.CreateAuthorizedView": true,
	"google.bigtable.admin.v2.BigtableTableAdmin.GetAuthorizedView":    true,
	"google.bigtable.admin.v2.BigtableTableAdmin.ListAuthorizedViews":  true,
	"google.bigtable.admin.v2.BigtableTableAdmin.UpdateAuthorizedView": true,
	"google.bigtable.admin.v2.BigtableTableAdmin.DeleteAuthorizedView": true,
	"google.bigtable.admin.v2.BigtableTableAdmin.GetIamPolicy":         true,
	"google.bigtable.admin.v2.BigtableTableAdmin.SetIamPolicy":         true,
	"google.bigtable.admin.v2.BigtableTableAdmin.TestIamPermissions":   true,

	"google.bigtable.admin.v2.BigtableTableAdmin.CreateBackup":  true,
	"google.bigtable.admin.v2.BigtableTableAdmin.GetBackup":     true,
	"google.bigtable.admin.v2.BigtableTableAdmin.ListBackups":   true,
	"google.bigtable.admin.v2.BigtableTableAdmin.UpdateBackup":  true,
	"google.bigtable.admin.v2.BigtableTableAdmin.DeleteBackup":  true,
	"google.bigtable.admin.v2.BigtableTableAdmin.CopyBackup":    true,
	"google.bigtable.admin.v2.BigtableTableAdmin.UndeleteTable": true,
	"google.bigtable.admin.v2.BigtableTableAdmin.RestoreTable":  true,
}

// callEmpty calls method with an empty request over conn and returns the
// call's status: unary calls once, streams send the one request, close
// their side and read until the server ends the call.
func callEmpty(ctx context.Context, conn *grpc.ClientConn, m protoreflect.MethodDescriptor) error {
	name := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
	req := dynamicpb.NewMessage(m.Input())
	if !m.IsStreamingClient() && !m.IsStreamingServer() {
		return conn.Invoke(ctx, name, req, dynamicpb.NewMessage(m.Output()))
	}
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: m.IsStreamingServer(), ClientStreams: m.IsStreamingClient()}, name)
	if err != nil {
		return err
	}
	if err := st.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if err := st.RecvMsg(dynamicpb.NewMessage(m.Output())); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// TestDevAPISurface calls every RPC of the data and table admin services
// (as the client module's descriptors list them, the session and query RPCs
// included) with an empty request: each answers within its deadline, with a
// status; the ones Tabula does not implement answer UNIMPLEMENTED naming
// the RPC, the others something else (an empty request is invalid for all
// but PingAndWarm's instance-less ping, which is refused too: it names no
// instance). Then PingAndWarm with an instance succeeds, and the
// consistency RPCs say a written table is consistent.
func TestDevAPISurface(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := StartDev(ctx, DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	services := []protoreflect.ServiceDescriptor{
		bigtablepb.File_google_bigtable_v2_bigtable_proto.Services().ByName("Bigtable"),
		adminpb.File_google_bigtable_admin_v2_bigtable_table_admin_proto.Services().ByName("BigtableTableAdmin"),
	}
	seen := map[string]bool{}
	unimplemented := 0
	for _, svc := range services {
		for i := range svc.Methods().Len() {
			m := svc.Methods().Get(i)
			full := string(m.FullName())
			seen[full] = true
			t.Run(full, func(t *testing.T) {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				err := callEmpty(cctx, conn, m)
				st, ok := status.FromError(err)
				if !ok {
					t.Fatalf("not a status: %v", err)
				}
				if st.Code() == codes.DeadlineExceeded {
					t.Fatalf("no answer within 10 s: %v", err)
				}
				if implementedRPCs[full] {
					if st.Code() == codes.Unimplemented || st.Code() == codes.OK || st.Code() == codes.Internal || st.Code() == codes.Unknown {
						t.Errorf("implemented RPC with an empty request: %v", err)
					}
					return
				}
				if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), string(m.Name())) {
					t.Errorf("got %v, want UNIMPLEMENTED naming %s", err, m.Name())
				}
			})
			if !implementedRPCs[full] {
				unimplemented++
			}
		}
	}
	for name := range implementedRPCs {
		if !seen[name] {
			t.Errorf("%s is not in the services' descriptors", name)
		}
	}
	for _, rpc := range []string{"google.bigtable.v2.Bigtable.ExecuteQuery", "google.bigtable.v2.Bigtable.ReadChangeStream", "google.bigtable.v2.Bigtable.OpenTable", "google.bigtable.admin.v2.BigtableTableAdmin.CreateBackup"} {
		if !seen[rpc] {
			t.Errorf("the descriptors lack %s: the module's services changed", rpc)
		}
	}
	t.Logf("%d RPCs, %d unimplemented: %v", len(seen), unimplemented, slices.Sorted(func(yield func(string) bool) {
		for n := range seen {
			if !implementedRPCs[n] && !yield(n[strings.LastIndex(n, ".")+1:]) {
				return
			}
		}
	}))

	// PingAndWarm with an instance succeeds.
	if _, err := bigtablepb.NewBigtableClient(conn).PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{Name: "projects/p/instances/i"}); err != nil {
		t.Errorf("PingAndWarm: %v", err)
	}
	// A written table is consistent: the consistency token is checked
	// true (one replica, writes acknowledged once durable).
	admin, data := devClients(t, ctx, d)
	if err := admin.CreateTable(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "c", "f"); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("f", "q", 1000, []byte("v"))
	if err := data.Open("c").Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	ac := adminpb.NewBigtableTableAdminClient(conn)
	tok, err := ac.GenerateConsistencyToken(ctx, &adminpb.GenerateConsistencyTokenRequest{Name: "projects/p/instances/i/tables/c"})
	if err != nil || tok.GetConsistencyToken() == "" {
		t.Fatalf("GenerateConsistencyToken: %v %v", tok, err)
	}
	cons, err := ac.CheckConsistency(ctx, &adminpb.CheckConsistencyRequest{Name: "projects/p/instances/i/tables/c", ConsistencyToken: tok.GetConsistencyToken()})
	if err != nil || !cons.GetConsistent() {
		t.Errorf("CheckConsistency: %v %v", cons, err)
	}
	if _, err := ac.CheckConsistency(ctx, &adminpb.CheckConsistencyRequest{Name: "projects/p/instances/i/tables/c", ConsistencyToken: "not-a-token"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CheckConsistency of a made-up token: %v, want INVALID_ARGUMENT", err)
	}
	if err := admin.WaitForReplication(ctx, "c"); err != nil {
		t.Errorf("WaitForReplication: %v", err)
	}
}
