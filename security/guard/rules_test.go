package guard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabuladb/tabula/security/acl"
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

// TestLocationRows: a caller reads the rows of a location table (METADATA)
// that locate the tablets of tables it holds a grant on, and the location
// table's own, each range narrowed to its table's rows; not other tables'
// rows, not the whole table, and nothing else on it.
func TestLocationRows(t *testing.T) {
	a, ctx := aliceCalls(t)
	const meta = "projects/-/instances/-/tables/METADATA"
	// Keys "T/…" are table T's rows, ["T/", "T0"); "_/…" METADATA's own.
	rows := func(key []byte) (string, []byte, []byte, bool) {
		owner, _, ok := strings.Cut(string(key), "/")
		if !ok {
			return "", nil, nil, false
		}
		start, end := []byte(owner+"/"), []byte(owner+"0")
		if owner == "_" {
			return "", start, end, true
		}
		return "projects/p/instances/i/tables/" + owner, start, end, true
	}
	tables := LookupFunc(func(_ context.Context, name string) (TableInfo, error) {
		switch name {
		case "projects/p/instances/i/tables/mine":
			return TableInfo{Policy: acl.Policy{Grants: []acl.Grant{{Member: "user:alice", Family: "f", Perms: acl.Write}}}, Families: []string{"f"}}, nil
		case "projects/p/instances/i/tables/theirs":
			return TableInfo{Policy: acl.Policy{Grants: []acl.Grant{{Member: "user:bob", Perms: acl.Read}}}}, nil
		}
		return TableInfo{}, ErrTableNotFound
	})
	g, err := New(Config{Authenticator: a, Tables: NewCache(tables, time.Millisecond), LocationTables: map[string]LocationRows{meta: rows}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(method string, req any) error {
		cctx, c, err := g.begin(ctx, dataPrefix+method)
		if err != nil {
			t.Fatal(err)
		}
		return g.check(cctx, c, g.rule(dataPrefix+method), req)
	}
	scan := func(start, end string) *bigtablepb.ReadRowsRequest {
		rr := &bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: []byte(start)}}
		if end != "" {
			rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: []byte(end)}
		}
		return &bigtablepb.ReadRowsRequest{TableName: meta, Rows: &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{rr}}, RowsLimit: 1}
	}
	for _, c := range []struct {
		name    string
		req     *bigtablepb.ReadRowsRequest
		wantEnd string // the range's end after narrowing; "" for a refusal
	}{
		{"a lookup in mine, to the tablet's end", scan("mine/k", "zzz"), "mine0"},
		{"a lookup in mine, unbounded", scan("mine/k", ""), "mine0"},
		{"a lookup within mine", scan("mine/a", "mine/b"), "mine/b"},
		{"METADATA's own rows", scan("_/mine/k", ""), "_0"},
		{"theirs", scan("theirs/k", ""), ""},
		{"a table that does not exist", scan("gone/k", ""), ""},
		{"a key of no table", scan("nokey", ""), ""},
		{"the whole table", &bigtablepb.ReadRowsRequest{TableName: meta}, ""},
	} {
		err := check("ReadRows", c.req)
		if c.wantEnd == "" {
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: %v, want PERMISSION_DENIED", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		} else if got := string(c.req.Rows.RowRanges[0].GetEndKeyOpen()); got != c.wantEnd {
			t.Errorf("%s: narrowed to end %q, want %q", c.name, got, c.wantEnd)
		}
	}
	for method, req := range map[string]any{
		"MutateRow":     &bigtablepb.MutateRowRequest{TableName: meta, RowKey: []byte("mine/k")},
		"SampleRowKeys": &bigtablepb.SampleRowKeysRequest{TableName: meta},
	} {
		if err := check(method, req); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of METADATA: %v, want PERMISSION_DENIED", method, err)
		}
	}
}

// TestUndeleteByDeletedTablesGrants: UndeleteTable of a table that does
// not exist is decided by the deleted table's own grants (Config.Deleted):
// its admins may, its readers and strangers may not; without a deleted
// table (or without Config.Deleted) nobody but a superuser may. Other
// RPCs on a table that does not exist never consult the deleted grants.
func TestUndeleteByDeletedTablesGrants(t *testing.T) {
	a, ctx := aliceCalls(t) // alice, in group readers
	const gone = "projects/p/instances/i/tables/gone"
	const never = "projects/p/instances/i/tables/never"
	deleted := LookupFunc(func(_ context.Context, name string) (TableInfo, error) {
		if name == gone {
			return TableInfo{Policy: acl.Policy{Grants: []acl.Grant{{Member: "user:alice", Perms: acl.Admin}}}, Families: []string{"f"}}, nil
		}
		return TableInfo{}, ErrTableNotFound
	})
	readerOnly := LookupFunc(func(_ context.Context, name string) (TableInfo, error) {
		return TableInfo{Policy: acl.Policy{Grants: []acl.Grant{{Member: "group:readers", Perms: acl.Read}}}}, nil
	})
	for _, c := range []struct {
		name    string
		deleted Tables
		method  string
		req     any
		want    codes.Code
	}{
		{"undelete, admin of the deleted table", deleted, "UndeleteTable", &adminpb.UndeleteTableRequest{Name: gone}, codes.OK},
		{"undelete, no deleted table", deleted, "UndeleteTable", &adminpb.UndeleteTableRequest{Name: never}, codes.PermissionDenied},
		{"undelete, reader of the deleted table", readerOnly, "UndeleteTable", &adminpb.UndeleteTableRequest{Name: gone}, codes.PermissionDenied},
		{"undelete without deleted grants", nil, "UndeleteTable", &adminpb.UndeleteTableRequest{Name: gone}, codes.PermissionDenied},
		{"another RPC on the deleted table", deleted, "DeleteTable", &adminpb.DeleteTableRequest{Name: gone}, codes.PermissionDenied},
	} {
		g, err := New(Config{Authenticator: a, Superusers: []string{"user:root"}, Tables: NoTables{}, Deleted: c.deleted})
		if err != nil {
			t.Fatal(err)
		}
		cctx, call, err := g.begin(ctx, adminPrefix+c.method)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.check(cctx, call, g.rule(adminPrefix+c.method), c.req); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
