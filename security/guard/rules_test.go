package guard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabuladb/tabula/security/auth"
)

// Every method of the Cloud Bigtable data and table admin services has a
// rule of its own: a new RPC in a client library update must be decided,
// not fall to the default by accident.
func TestEveryMethodHasARule(t *testing.T) {
	known := KnownMethods()
	n := 0
	for _, sd := range []protoreflect.ServiceDescriptor{
		bigtablepb.File_google_bigtable_v2_bigtable_proto.Services().ByName("Bigtable"),
		adminpb.File_google_bigtable_admin_v2_bigtable_table_admin_proto.Services().ByName("BigtableTableAdmin"),
	} {
		m := sd.Methods()
		for i := range m.Len() {
			n++
			full := fmt.Sprintf("/%s/%s", sd.FullName(), m.Get(i).Name())
			if !slices.Contains(known, full) {
				t.Errorf("%s has no rule", full)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d methods in the descriptors", n)
	}
}

func TestTableOf(t *testing.T) {
	const tb = "projects/p/instances/i/tables/t"
	cases := []struct {
		req  proto.Message
		want string
	}{
		{&bigtablepb.ReadRowsRequest{TableName: tb}, tb},
		{&bigtablepb.ReadRowsRequest{AuthorizedViewName: tb + "/authorizedViews/v"}, tb},
		{&adminpb.UpdateTableRequest{Table: &adminpb.Table{Name: tb}}, tb},
		{&adminpb.UpdateAuthorizedViewRequest{AuthorizedView: &adminpb.AuthorizedView{Name: tb + "/authorizedViews/v"}}, tb},
		{&iampb.GetIamPolicyRequest{Resource: tb}, tb},
		{&adminpb.CreateAuthorizedViewRequest{Parent: tb}, tb},
		{&adminpb.ListTablesRequest{Parent: "projects/p/instances/i"}, ""},
		{&bigtablepb.ReadRowsRequest{TableName: "projects/p/instances/i/tables/"}, ""},
		{&bigtablepb.ReadRowsRequest{TableName: "tables/t"}, ""},
	}
	for i, c := range cases {
		if got := tableOf(c.req); got != c.want {
			t.Errorf("%d: tableOf = %q, want %q", i, got, c.want)
		}
	}
}

// aliceCalls returns an Authenticator of a token file with principal alice
// (group readers) and the incoming context of a call bearing her token.
func aliceCalls(t *testing.T) (*auth.Authenticator, context.Context) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice-token-0123456789 alice readers\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	return a, metadata.NewIncomingContext(context.Background(), metadata.Pairs(auth.AuthorizationKey, "Bearer alice-token-0123456789"))
}

// TestTerminalStatesNoIdentity: a guard states the caller's identity to
// the servers its service calls (the gateway's forwarding), unless it is
// Terminal (a master, whose calls are the control plane's own).
func TestTerminalStatesNoIdentity(t *testing.T) {
	a, in := aliceCalls(t)
	for _, terminal := range []bool{false, true} {
		g, err := New(Config{Authenticator: a, Superusers: []string{"user:root"}, Tables: NoTables{}, Terminal: terminal})
		if err != nil {
			t.Fatal(err)
		}
		var stated []string
		handler := func(ctx context.Context, _ any) (any, error) {
			if id, ok := auth.FromContext(ctx); !ok || id.Principal != "alice" {
				t.Errorf("terminal %v: the service sees %+v", terminal, id)
			}
			out, _ := metadata.FromOutgoingContext(ctx)
			stated = out.Get(auth.ForwardedPrincipalKey)
			return nil, nil
		}
		// PingAndWarm: any authenticated caller.
		if _, err := g.UnaryInterceptor()(in, nil, &grpc.UnaryServerInfo{FullMethod: dataPrefix + "PingAndWarm"}, handler); err != nil {
			t.Fatal(err)
		}
		if want := !terminal; (len(stated) == 1 && stated[0] == "alice") != want {
			t.Errorf("terminal %v: outgoing forwarded principal %v", terminal, stated)
		}
	}
}

// TestLocationTablesReadableByAll: every authenticated caller reads a
// location table (METADATA) to find tablets; writing it stays for
// superusers, and other tables keep their grants.
func TestLocationTablesReadableByAll(t *testing.T) {
	a, ctx := aliceCalls(t)
	const meta = "projects/-/instances/-/tables/METADATA"
	g, err := New(Config{Authenticator: a, Tables: NoTables{}, LocationTables: []string{meta}})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, any) (any, error) { return "served", nil }
	call := func(method string, req any) error {
		_, err := g.UnaryInterceptor()(ctx, req, &grpc.UnaryServerInfo{FullMethod: dataPrefix + method}, ok)
		return err
	}
	if err := call("SampleRowKeys", &bigtablepb.SampleRowKeysRequest{TableName: meta}); err != nil {
		t.Errorf("SampleRowKeys of METADATA: %v", err)
	}
	if err := call("MutateRow", &bigtablepb.MutateRowRequest{TableName: meta, RowKey: []byte("r")}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("MutateRow of METADATA: %v, want PERMISSION_DENIED", err)
	}
	if err := call("SampleRowKeys", &bigtablepb.SampleRowKeysRequest{TableName: "projects/p/instances/i/tables/t"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("SampleRowKeys of another table: %v, want PERMISSION_DENIED", err)
	}
}
