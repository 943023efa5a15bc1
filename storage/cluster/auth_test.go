package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// The principals of the authorization tests and their grants on every test
// table (families a and b).
var authGrants = []acl.Grant{
	{Member: "user:reader", Perms: acl.Read},
	{Member: "user:writer", Perms: acl.Write},
	{Member: "user:user", Perms: acl.Read | acl.Write},
	{Member: "group:table-admins", Perms: acl.Admin},
	{Member: "user:fam", Family: "a", Perms: acl.Read | acl.Write},
	{Member: "user:jwtreader", Perms: acl.Read},
}

const (
	authInstance = "projects/p/instances/i"
	jwtSecret    = "a-secret-of-at-least-thirty-two-bytes"
)

// authEnv is a server with authentication on — a tabula dev, or a
// cluster's gateway — and a connection per principal: a token file of
// principals, an HMAC JWT key, superuser root.
type authEnv struct {
	addr      string
	transport grpc.DialOption   // TLS or plaintext
	tokens    map[string]string // principal → token
	// creds are each connection's credentials: dial options after
	// transport (a bearer token, or a transport with a client
	// certificate); conns the connections to addr with them.
	creds map[string][]grpc.DialOption
	conns map[string]*grpc.ClientConn
	// servers, in a cluster, are every tablet server's address: a call of
	// the script service (served by the tablet's own server, not routed
	// by a gateway) is made on each of them.
	servers []string
	// dev is the server, when it is a tabula dev.
	dev  *Dev
	logs *syncBuffer
	// refused are the connections whose every call must be refused, and
	// the code: UNAUTHENTICATED (bad or no credentials), or OK for "any
	// error" (a certificate the TLS handshake refuses).
	refused map[string]codes.Code
}

func jwtFor(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "aud": "tabula"}).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// authPrincipals are the principals of the token file ("admin" is in group
// table-admins; tabula-server is the servers' own, in a cluster without
// mutual TLS).
var authPrincipals = []string{"root", "reader", "writer", "user", "admin", "nobody", "fam", "tabula-server"}

// newAuthEnv writes the token file and the JWT secret into dir and returns
// the environment's tokens (the token file's, JWTs of jwtreader, an expired
// and a forged one, and a wrong token) and an Authenticator over them
// (client certificates accepted too; forwarders: the users among
// forwarders).
func newAuthEnv(t *testing.T, dir string, forwarders ...string) (*authEnv, *auth.Authenticator) {
	t.Helper()
	env := &authEnv{tokens: map[string]string{}, creds: map[string][]grpc.DialOption{}, conns: map[string]*grpc.ClientConn{}, logs: &syncBuffer{},
		refused: map[string]codes.Code{"none": codes.Unauthenticated, "wrong": codes.Unauthenticated, "forged": codes.Unauthenticated, "expired": codes.Unauthenticated}}
	var lines []string
	for _, p := range authPrincipals {
		tok := p + "-token-0123456789abcdef"
		env.tokens[p] = tok
		group := ""
		if p == "admin" {
			group = " table-admins"
		}
		lines = append(lines, tok+" "+p+group)
	}
	tokenFile := filepath.Join(dir, "tokens")
	secretFile := filepath.Join(dir, "jwt-secret")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(jwtSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	env.tokens["jwtreader"] = jwtFor(t, "jwtreader", time.Now().Add(time.Hour))
	env.tokens["expired"] = jwtFor(t, "jwtreader", time.Now().Add(-time.Hour))
	env.tokens["wrong"] = "wrong-token-0123456789abcdef"
	env.tokens["forged"] = forgeSignature(env.tokens["jwtreader"])
	a, err := auth.New(auth.Config{TokenFile: tokenFile, JWTSecretFiles: []string{secretFile}, JWTAudience: "tabula", AllowCerts: true, Forwarders: forwarders})
	if err != nil {
		t.Fatal(err)
	}
	return env, a
}

// connect dials addr once per token, once per entry of creds (which wins
// over a token of the same name), and once as "none", without
// credentials.
func (e *authEnv) connect(t *testing.T) {
	t.Helper()
	for name, tok := range e.tokens {
		if _, ok := e.creds[name]; !ok {
			e.creds[name] = []grpc.DialOption{grpc.WithPerRPCCredentials(auth.BearerToken(tok))}
		}
	}
	e.creds["none"] = nil
	for name, opts := range e.creds {
		e.conns[name] = e.dial(t, e.addr, opts...)
	}
}

func startAuthDev(t *testing.T) *authEnv { return startAuthDevWith(t, nil) }

// startAuthDevWith is startAuthDev with the DevConfig changed by tweak
// (nil: none).
func startAuthDevWith(t *testing.T, tweak func(*DevConfig)) *authEnv {
	t.Helper()
	dir := t.TempDir()
	env, a := newAuthEnv(t, dir)
	cfg := DevConfig{
		Dir: filepath.Join(dir, "data"), Addr: "127.0.0.1:0",
		Logger: slog.New(slog.NewJSONHandler(env.logs, nil)),
		// A short cache, so that grant changes show at once in the test.
		Auth: &AuthConfig{Authenticator: a, Superusers: []string{"user:root"}, CacheTTL: time.Millisecond},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	d, err := StartDev(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	env.addr, env.transport, env.dev = d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), d
	env.connect(t)
	return env
}

// dial connects to addr with the environment's transport and then opts.
func (e *authEnv) dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{e.transport}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (e *authEnv) admin(who string) adminpb.BigtableTableAdminClient {
	return adminpb.NewBigtableTableAdminClient(e.conns[who])
}

func (e *authEnv) data(who string) bigtablepb.BigtableClient {
	return bigtablepb.NewBigtableClient(e.conns[who])
}

func tablePath(table string) string { return authInstance + "/tables/" + table }

// createTable creates table (families a and b) as root, grants authGrants
// and writes rows r1 (a:x, b:y) and r2 (b:y).
func (e *authEnv) createTable(t *testing.T, table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.admin("root").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: authInstance, TableId: table, Table: &adminpb.Table{
		ColumnFamilies: map[string]*adminpb.ColumnFamily{"a": {}, "b": {}},
	}}); err != nil {
		t.Fatal(err)
	}
	e.setPolicy(t, table, acl.Policy{Grants: authGrants})
	for _, m := range []struct{ row, fam, col, val string }{{"r1", "a", "x", "ax"}, {"r1", "b", "y", "by"}, {"r2", "b", "y", "by2"}} {
		req := &bigtablepb.MutateRowRequest{TableName: tablePath(table), RowKey: []byte(m.row), Mutations: []*bigtablepb.Mutation{setCell(m.fam, m.col, m.val)}}
		// In a cluster the new table's tablet is served once the master
		// has assigned it: until then the gateway answers UNAVAILABLE.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := e.data("root").MutateRow(ctx, req)
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (e *authEnv) setPolicy(t *testing.T, table string, p acl.Policy) {
	t.Helper()
	pol := &iampb.Policy{}
	for _, b := range p.Bindings() {
		pb := &iampb.Binding{Role: b.Role, Members: b.Members}
		if b.Family != "" {
			pb.Condition = exprOf(acl.FamilyCondition(b.Family))
		}
		pol.Bindings = append(pol.Bindings, pb)
	}
	if _, err := e.admin("root").SetIamPolicy(context.Background(), &iampb.SetIamPolicyRequest{Resource: tablePath(table), Policy: pol}); err != nil {
		t.Fatal(err)
	}
}

func setCell(fam, col, val string) *bigtablepb.Mutation {
	return &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
		FamilyName: fam, ColumnQualifier: []byte(col), TimestampMicros: -1, Value: []byte(val),
	}}}
}

// snapshot is everything a refused call must leave unchanged: the cells
// (all versions), the schema and the grants, as root sees them.
func (e *authEnv) snapshot(t *testing.T, table string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	rs, err := e.data("root").ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: tablePath(table)})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := rs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Chunks {
			c.TimestampMicros = 0 // the chunks' form, not the clock
			b.WriteString(prototext.Format(c))
		}
	}
	tab, err := e.admin("root").GetTable(ctx, &adminpb.GetTableRequest{Name: tablePath(table), View: adminpb.Table_FULL})
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString(prototext.Format(tab))
	pol, err := e.admin("root").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: tablePath(table)})
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString(prototext.Format(pol))
	return b.String()
}

// invoke calls method on cc with req, whatever its kind (unary, server,
// client or bidi streaming), reading every response.
func invoke(ctx context.Context, cc *grpc.ClientConn, md protoreflect.MethodDescriptor, req proto.Message) error {
	full := fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name())
	out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return err
	}
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return cc.Invoke(ctx, full, req, out.New().Interface())
	}
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, full)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil && err != io.EOF {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		if err := cs.RecvMsg(out.New().Interface()); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// apiCase is what one RPC needs and a request for it on a table.
type apiCase struct {
	// need: the principal that holds just enough ("reader", "writer",
	// "user" (read and write), "admin", "root" (superuser), "nobody" (any
	// authenticated caller)); deniedAs holds less.
	need, deniedAs string
	// req builds a request on table.
	req func(table string) proto.Message
	// works: with the grant the call succeeds (Tabula implements it);
	// otherwise any code but UNAUTHENTICATED and PERMISSION_DENIED.
	works bool
	// local: the call is served by the server holding the table's
	// tablets (the script service), not routed by a gateway.
	local bool
}

var allCells = &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{{}}}

// apiCases covers every method of the data, admin, locality-group and
// script services; TestAuthWholeAPI fails on a method without a case.
var apiCases = map[string]apiCase{
	// google.bigtable.v2.Bigtable
	"ReadRows": {need: "reader", deniedAs: "writer", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.ReadRowsRequest{TableName: tablePath(tb)}
	}},
	"SampleRowKeys": {need: "reader", deniedAs: "nobody", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.SampleRowKeysRequest{TableName: tablePath(tb)}
	}},
	"MutateRow": {need: "writer", deniedAs: "reader", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.MutateRowRequest{TableName: tablePath(tb), RowKey: []byte("r1"), Mutations: []*bigtablepb.Mutation{setCell("a", "x", "new")}}
	}},
	"MutateRows": {need: "writer", deniedAs: "reader", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.MutateRowsRequest{TableName: tablePath(tb), Entries: []*bigtablepb.MutateRowsRequest_Entry{
			{RowKey: []byte("r1"), Mutations: []*bigtablepb.Mutation{setCell("a", "x", "new")}},
			{RowKey: []byte("r3"), Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}}}},
		}}
	}},
	"CheckAndMutateRow": {need: "user", deniedAs: "writer", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.CheckAndMutateRowRequest{TableName: tablePath(tb), RowKey: []byte("r1"), TrueMutations: []*bigtablepb.Mutation{setCell("b", "y", "new")}}
	}},
	"ReadModifyWriteRow": {need: "user", deniedAs: "writer", works: true, req: func(tb string) proto.Message {
		return &bigtablepb.ReadModifyWriteRowRequest{TableName: tablePath(tb), RowKey: []byte("r1"), Rules: []*bigtablepb.ReadModifyWriteRule{
			{FamilyName: "a", ColumnQualifier: []byte("x"), Rule: &bigtablepb.ReadModifyWriteRule_AppendValue{AppendValue: []byte("+")}},
		}}
	}},
	"PingAndWarm": {need: "nobody", works: true, req: func(string) proto.Message {
		return &bigtablepb.PingAndWarmRequest{Name: authInstance}
	}},
	"GetClientConfiguration": {need: "nobody", req: func(string) proto.Message {
		return &bigtablepb.GetClientConfigurationRequest{InstanceName: authInstance}
	}},
	"GenerateInitialChangeStreamPartitions": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &bigtablepb.GenerateInitialChangeStreamPartitionsRequest{TableName: tablePath(tb)}
	}},
	"ReadChangeStream": {need: "reader", deniedAs: "fam", req: func(tb string) proto.Message {
		return &bigtablepb.ReadChangeStreamRequest{TableName: tablePath(tb)}
	}},
	"PrepareQuery": {need: "root", deniedAs: "admin", req: func(string) proto.Message {
		return &bigtablepb.PrepareQueryRequest{InstanceName: authInstance, Query: "SELECT * FROM t"}
	}},
	"ExecuteQuery": {need: "root", deniedAs: "admin", req: func(string) proto.Message {
		return &bigtablepb.ExecuteQueryRequest{InstanceName: authInstance, Query: "SELECT * FROM t"}
	}},
	// A session's stream needs credentials only: the calls on it are
	// checked one by one as their classic calls (TestSessionsUnderAuth).
	"OpenTable":            {need: "nobody", req: newInput("google.bigtable.v2.SessionRequest")},
	"OpenAuthorizedView":   {need: "nobody", req: newInput("google.bigtable.v2.SessionRequest")},
	"OpenMaterializedView": {need: "root", deniedAs: "admin", req: newInput("google.bigtable.v2.OpenMaterializedViewRequest")},

	// google.bigtable.admin.v2.BigtableTableAdmin
	"CreateTable": {need: "root", deniedAs: "admin", works: true, req: func(tb string) proto.Message {
		return &adminpb.CreateTableRequest{Parent: authInstance, TableId: tb + "_new", Table: &adminpb.Table{}}
	}},
	"CreateTableFromSnapshot": {need: "root", deniedAs: "admin", req: func(tb string) proto.Message {
		return &adminpb.CreateTableFromSnapshotRequest{Parent: authInstance, TableId: tb + "_snap", SourceSnapshot: authInstance + "/clusters/c/snapshots/s"}
	}},
	"ListTables": {need: "nobody", works: true, req: func(string) proto.Message { return &adminpb.ListTablesRequest{Parent: authInstance} }},
	"GetTable":   {need: "reader", deniedAs: "nobody", works: true, req: func(tb string) proto.Message { return &adminpb.GetTableRequest{Name: tablePath(tb)} }},
	"UpdateTable": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		return &adminpb.UpdateTableRequest{Table: &adminpb.Table{Name: tablePath(tb), DeletionProtection: true}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}}
	}},
	"DeleteTable":   {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message { return &adminpb.DeleteTableRequest{Name: tablePath(tb)} }},
	"UndeleteTable": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message { return &adminpb.UndeleteTableRequest{Name: tablePath(tb)} }},
	"CreateAuthorizedView": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.CreateAuthorizedViewRequest{Parent: tablePath(tb), AuthorizedViewId: "v"}
	}},
	"ListAuthorizedViews": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &adminpb.ListAuthorizedViewsRequest{Parent: tablePath(tb)}
	}},
	"GetAuthorizedView": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &adminpb.GetAuthorizedViewRequest{Name: tablePath(tb) + "/authorizedViews/v"}
	}},
	"UpdateAuthorizedView": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.UpdateAuthorizedViewRequest{AuthorizedView: &adminpb.AuthorizedView{Name: tablePath(tb) + "/authorizedViews/v"}}
	}},
	"DeleteAuthorizedView": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.DeleteAuthorizedViewRequest{Name: tablePath(tb) + "/authorizedViews/v"}
	}},
	"ModifyColumnFamilies": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		return &adminpb.ModifyColumnFamiliesRequest{Name: tablePath(tb), Modifications: []*adminpb.ModifyColumnFamiliesRequest_Modification{
			{Id: "b", Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Drop{Drop: true}},
		}}
	}},
	"DropRowRange": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		return &adminpb.DropRowRangeRequest{Name: tablePath(tb), Target: &adminpb.DropRowRangeRequest_RowKeyPrefix{RowKeyPrefix: []byte("r1")}}
	}},
	"GenerateConsistencyToken": {need: "reader", deniedAs: "nobody", works: true, req: func(tb string) proto.Message {
		return &adminpb.GenerateConsistencyTokenRequest{Name: tablePath(tb)}
	}},
	"CheckConsistency": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &adminpb.CheckConsistencyRequest{Name: tablePath(tb), ConsistencyToken: "x"}
	}},
	"SnapshotTable": {need: "root", deniedAs: "admin", req: func(tb string) proto.Message {
		return &adminpb.SnapshotTableRequest{Name: tablePath(tb), Cluster: authInstance + "/clusters/c", SnapshotId: "s"}
	}},
	"GetSnapshot":    {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.GetSnapshotRequest")},
	"ListSnapshots":  {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.ListSnapshotsRequest")},
	"DeleteSnapshot": {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.DeleteSnapshotRequest")},
	"CreateBackup": {need: "root", deniedAs: "admin", req: func(tb string) proto.Message {
		return &adminpb.CreateBackupRequest{Parent: authInstance + "/clusters/c", BackupId: "b", Backup: &adminpb.Backup{SourceTable: tablePath(tb)}}
	}},
	"GetBackup":    {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.GetBackupRequest")},
	"UpdateBackup": {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.UpdateBackupRequest")},
	"DeleteBackup": {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.DeleteBackupRequest")},
	"ListBackups":  {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.ListBackupsRequest")},
	"RestoreTable": {need: "root", deniedAs: "admin", req: func(tb string) proto.Message {
		return &adminpb.RestoreTableRequest{Parent: authInstance, TableId: tb + "_restored"}
	}},
	"CopyBackup": {need: "root", deniedAs: "admin", req: newInput("google.bigtable.admin.v2.CopyBackupRequest")},
	"GetIamPolicy": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		return &iampb.GetIamPolicyRequest{Resource: tablePath(tb)}
	}},
	"SetIamPolicy": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		// Everyone keeps their grants, and user:nobody gains read.
		p, _ := acl.Policy{Grants: authGrants}.With("user:nobody", "", acl.Read)
		pol := &iampb.Policy{}
		for _, b := range p.Bindings() {
			pb := &iampb.Binding{Role: b.Role, Members: b.Members}
			if b.Family != "" {
				pb.Condition = exprOf(acl.FamilyCondition(b.Family))
			}
			pol.Bindings = append(pol.Bindings, pb)
		}
		return &iampb.SetIamPolicyRequest{Resource: tablePath(tb), Policy: pol}
	}},
	"TestIamPermissions": {need: "nobody", works: true, req: func(tb string) proto.Message {
		return &iampb.TestIamPermissionsRequest{Resource: tablePath(tb), Permissions: []string{"bigtable.tables.readRows"}}
	}},
	"CreateSchemaBundle": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.CreateSchemaBundleRequest{Parent: tablePath(tb), SchemaBundleId: "s"}
	}},
	"UpdateSchemaBundle": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.UpdateSchemaBundleRequest{SchemaBundle: &adminpb.SchemaBundle{Name: tablePath(tb) + "/schemaBundles/s"}}
	}},
	"GetSchemaBundle": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &adminpb.GetSchemaBundleRequest{Name: tablePath(tb) + "/schemaBundles/s"}
	}},
	"ListSchemaBundles": {need: "reader", deniedAs: "nobody", req: func(tb string) proto.Message {
		return &adminpb.ListSchemaBundlesRequest{Parent: tablePath(tb)}
	}},
	"DeleteSchemaBundle": {need: "admin", deniedAs: "user", req: func(tb string) proto.Message {
		return &adminpb.DeleteSchemaBundleRequest{Name: tablePath(tb) + "/schemaBundles/s"}
	}},

	// tabula.admin.v1.LocalityGroups
	"SetLocalityGroup": {need: "admin", deniedAs: "user", works: true, req: func(tb string) proto.Message {
		return &adminextpb.SetLocalityGroupRequest{Table: tablePath(tb), Group: "hot", Families: []string{"c"}, InMemory: proto.Bool(true)}
	}},
	"GetLocalityGroups": {need: "reader", deniedAs: "nobody", works: true, req: func(tb string) proto.Message {
		return &adminextpb.GetLocalityGroupsRequest{Table: tablePath(tb)}
	}},

	// tabula.scripts.v1.Scripts
	"Run": {need: "reader", deniedAs: "writer", works: true, local: true, req: func(tb string) proto.Message {
		return &scriptpb.RunRequest{TableName: tablePath(tb), Name: "count.szl", Source: "count: table sum of int;\nemit count <- 1;\n"}
	}},
	"ListTablets": {need: "reader", deniedAs: "nobody", works: true, local: true, req: func(tb string) proto.Message {
		return &scriptpb.ListTabletsRequest{TableName: tablePath(tb)}
	}},
}

// newInput returns an empty request of a message type.
func newInput(name string) func(string) proto.Message {
	return func(string) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			panic(err)
		}
		return mt.New().Interface()
	}
}

// apiServices are the services the whole-API test covers, from their
// descriptors.
func apiServices() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{
		bigtablepb.File_google_bigtable_v2_bigtable_proto.Services().ByName("Bigtable"),
		adminpb.File_google_bigtable_admin_v2_bigtable_table_admin_proto.Services().ByName("BigtableTableAdmin"),
		adminextpb.File_adminext_proto.Services().ByName("LocalityGroups"),
		scriptpb.File_scripts_proto.Services().ByName("Scripts"),
	}
}

// TestAuthWholeAPI calls every RPC of the data, admin, locality-group and
// script services of tabula dev: without credentials, with a wrong, forged
// or expired token (UNAUTHENTICATED), as a principal without the grant
// (PERMISSION_DENIED, and the table's cells, schema and grants unchanged),
// and as one with it (the call works). TestAuthWholeAPIThroughGateway
// (an integration test) runs the same table through a cluster's gateway.
func TestAuthWholeAPI(t *testing.T) {
	checkWholeAPI(t, startAuthDev(t))
}

// checkWholeAPI runs apiCases against env: every method of apiServices,
// as each refused connection, as the principal without the grant and as
// the one with it; then checks the audit lines env.logs received.
func checkWholeAPI(t *testing.T, env *authEnv) {
	ctx := context.Background()
	env.createTable(t, "t")
	before := env.snapshot(t, "t")
	refused := slices.Sorted(maps.Keys(env.refused))
	n := 0
	for _, svc := range apiServices() {
		methods := svc.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			name := string(md.Name())
			c, ok := apiCases[name]
			if !ok {
				t.Errorf("%s.%s has no case in apiCases: say what it needs", svc.FullName(), name)
				continue
			}
			n++
			t.Run(name, func(t *testing.T) {
				for _, who := range refused {
					err := invoke(ctx, env.conns[who], md, c.req("t"))
					want := env.refused[who]
					if code := status.Code(err); err == nil || (want != codes.OK && code != want) {
						t.Errorf("as %s: %v, want %v", who, err, want)
					}
				}
				if c.deniedAs != "" {
					err := invoke(ctx, env.conns[c.deniedAs], md, c.req("t"))
					if status.Code(err) != codes.PermissionDenied {
						t.Errorf("as %s (without the grant): %v, want PERMISSION_DENIED", c.deniedAs, err)
					}
				}
				if after := env.snapshot(t, "t"); after != before {
					t.Errorf("a refused call changed the table:\nbefore %s\nafter %s", before, after)
				}
				// With the grant, on a table of its own (the call may
				// change or delete it).
				table := "t_" + strings.ToLower(name)
				env.createTable(t, table)
				if c.local && len(env.servers) > 0 {
					env.checkOnHolder(t, md, c, table)
					return
				}
				err := invoke(ctx, env.conns[c.need], md, c.req(table))
				switch code := status.Code(err); {
				case c.works && err != nil:
					t.Errorf("as %s (with the grant): %v", c.need, err)
				case code == codes.Unauthenticated || code == codes.PermissionDenied:
					t.Errorf("as %s (with the grant): %v", c.need, err)
				}
			})
		}
	}
	if n != len(apiCases) {
		t.Errorf("%d methods in the services, %d cases: a case names no method", n, len(apiCases))
	}
	// Every refusal left an audit line naming who, what and why.
	logs := env.logs.String()
	for _, want := range []string{`"audit":"refused"`, `"principal":"reader"`, `"method":"/google.bigtable.v2.Bigtable/MutateRow"`, `"code":"PermissionDenied"`, `"code":"Unauthenticated"`, `"audit":"change"`, `"audit":"grant"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no audit line with %s", want)
		}
	}
	for _, who := range []string{"wrong", "reader", "root"} {
		if strings.Contains(logs, env.tokens[who]) {
			t.Errorf("the token of %s was logged", who)
		}
	}
}

// checkOnHolder makes a call of a local case with the grant on every
// tablet server of env: the server holding the table's tablet serves it,
// every other one says it does not (FAILED_PRECONDITION or NOT_FOUND) —
// none refuses the caller.
func (e *authEnv) checkOnHolder(t *testing.T, md protoreflect.MethodDescriptor, c apiCase, table string) {
	t.Helper()
	served := 0
	for _, addr := range e.servers {
		err := invoke(context.Background(), e.dial(t, addr, e.creds[c.need]...), md, c.req(table))
		switch status.Code(err) {
		case codes.OK:
			served++
		case codes.FailedPrecondition, codes.NotFound:
		default:
			t.Errorf("as %s (with the grant) on %s: %v", c.need, addr, err)
		}
	}
	if served != 1 {
		t.Errorf("as %s (with the grant): %d servers served the call, want the tablet's one", c.need, served)
	}
}

// TestAuthListTablesAndTestIam: ListTables shows a caller the tables it
// has grants on; TestIamPermissions answers from the caller's grants.
func TestAuthListTablesAndTestIam(t *testing.T) {
	env := startAuthDev(t)
	ctx := context.Background()
	env.createTable(t, "t1")
	if _, err := env.admin("root").CreateTable(ctx, &adminpb.CreateTableRequest{Parent: authInstance, TableId: "secret", Table: &adminpb.Table{}}); err != nil {
		t.Fatal(err)
	}
	names := func(who string) []string {
		r, err := env.admin(who).ListTables(ctx, &adminpb.ListTablesRequest{Parent: authInstance})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tb := range r.Tables {
			out = append(out, tb.Name[strings.LastIndex(tb.Name, "/")+1:])
		}
		return out
	}
	if got := strings.Join(names("root"), ","); got != "secret,t1" {
		t.Errorf("root sees %s", got)
	}
	if got := strings.Join(names("reader"), ","); got != "t1" {
		t.Errorf("reader sees %s", got)
	}
	if got := names("nobody"); len(got) != 0 {
		t.Errorf("nobody sees %v", got)
	}
	perms := []string{"bigtable.tables.readRows", "bigtable.tables.mutateRows", "bigtable.tables.setIamPolicy", "bigtable.instances.delete"}
	for who, want := range map[string]string{
		"reader": "bigtable.tables.readRows",
		"writer": "bigtable.tables.mutateRows",
		"admin":  "bigtable.tables.readRows,bigtable.tables.mutateRows,bigtable.tables.setIamPolicy",
		"root":   "bigtable.tables.readRows,bigtable.tables.mutateRows,bigtable.tables.setIamPolicy",
		"fam":    "bigtable.tables.readRows,bigtable.tables.mutateRows",
		"nobody": "",
	} {
		r, err := env.admin(who).TestIamPermissions(ctx, &iampb.TestIamPermissionsRequest{Resource: tablePath("t1"), Permissions: perms})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(r.Permissions, ","); got != want {
			t.Errorf("TestIamPermissions as %s = %s, want %s", who, got, want)
		}
	}
}

// TestAuthGrantsChangeWithoutRestart: a grant and a revocation through
// SetIamPolicy take effect on the next call.
func TestAuthGrantsChangeWithoutRestart(t *testing.T) {
	env := startAuthDev(t)
	ctx := context.Background()
	env.createTable(t, "t")
	read := func() error {
		_, err := env.admin("nobody").GetTable(ctx, &adminpb.GetTableRequest{Name: tablePath("t")})
		return err
	}
	if status.Code(read()) != codes.PermissionDenied {
		t.Fatal("nobody reads before the grant")
	}
	p, _ := acl.Policy{Grants: authGrants}.With("user:nobody", "", acl.Read)
	env.setPolicy(t, "t", p)
	time.Sleep(5 * time.Millisecond) // the test's cache TTL is 1 ms
	if err := read(); err != nil {
		t.Fatalf("after the grant: %v", err)
	}
	env.setPolicy(t, "t", acl.Policy{Grants: authGrants})
	time.Sleep(5 * time.Millisecond)
	if status.Code(read()) != codes.PermissionDenied {
		t.Fatal("nobody reads after the revocation")
	}
	// A stale etag is refused, a bad role named.
	pol, err := env.admin("root").GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: tablePath("t")})
	if err != nil {
		t.Fatal(err)
	}
	env.setPolicy(t, "t", acl.Policy{Grants: authGrants}) // moves the etag on
	if _, err := env.admin("root").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: tablePath("t"), Policy: pol}); status.Code(err) != codes.Aborted {
		t.Errorf("stale etag: %v", err)
	}
	bad := &iampb.Policy{Bindings: []*iampb.Binding{{Role: "roles/owner", Members: []string{"user:x"}}}}
	if _, err := env.admin("root").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: tablePath("t"), Policy: bad}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "roles/owner") {
		t.Errorf("bad role: %v", err)
	}
	bad = &iampb.Policy{Bindings: []*iampb.Binding{{Role: acl.RoleReader, Members: []string{"user:x"}, Condition: exprOf(acl.FamilyCondition("nosuch"))}}}
	if _, err := env.admin("root").SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: tablePath("t"), Policy: bad}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown family: %v", err)
	}
}

func exprOf(expression string) *expr.Expr { return &expr.Expr{Expression: expression} }

// TestAuthFamilyGrants: a principal with read on one family of two sees
// only that family in every kind of read — point, scan, filters (a cell
// limit counts only the cells it may see), CheckAndMutateRow's predicate,
// scripts — and a write touching the other family fails whole.
func TestAuthFamilyGrants(t *testing.T) {
	env := startAuthDev(t)
	ctx := context.Background()
	env.createTable(t, "t")
	// fam may read and write family b only (b sorts after a: a cell
	// limit applied before the narrowing would eat a's cell and show
	// nothing).
	env.setPolicy(t, "t", acl.Policy{Grants: []acl.Grant{{Member: "user:fam", Family: "b", Perms: acl.Read | acl.Write}}})
	time.Sleep(5 * time.Millisecond)
	before := env.snapshot(t, "t")

	cc := env.conns["fam"]
	bt, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(cc))
	if err != nil {
		t.Fatal(err)
	}
	tbl := bt.Open("t")
	families := func(r bigtable.Row) string {
		var out []string
		for fam, items := range r {
			for _, it := range items {
				out = append(out, fam+"/"+it.Column+"="+string(it.Value))
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	// Point read.
	r, err := tbl.ReadRow(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got := families(r); got != "b/b:y=by" {
		t.Errorf("point read: %s", got)
	}
	// Scans, with filters.
	scan := func(opts ...bigtable.ReadOption) string {
		var rows []string
		err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			rows = append(rows, r.Key()+":"+families(r))
			return true
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(rows, "; ")
	}
	for _, c := range []struct {
		name string
		opts []bigtable.ReadOption
		want string
	}{
		{"scan", nil, "r1:b/b:y=by; r2:b/b:y=by2"},
		{"cells per row limit", []bigtable.ReadOption{bigtable.RowFilter(bigtable.CellsPerRowLimitFilter(1))}, "r1:b/b:y=by; r2:b/b:y=by2"},
		{"family a asked for", []bigtable.ReadOption{bigtable.RowFilter(bigtable.FamilyFilter("a"))}, ""},
		{"column x asked for", []bigtable.ReadOption{bigtable.RowFilter(bigtable.ColumnFilter("x"))}, ""},
		{"interleave", []bigtable.ReadOption{bigtable.RowFilter(bigtable.InterleaveFilters(bigtable.FamilyFilter("a"), bigtable.FamilyFilter("b")))}, "r1:b/b:y=by; r2:b/b:y=by2"},
		{"condition on a", []bigtable.ReadOption{bigtable.RowFilter(bigtable.ConditionFilter(bigtable.FamilyFilter("a"), bigtable.PassAllFilter(), bigtable.StripValueFilter()))}, "r1:b/b:y=; r2:b/b:y="},
		{"rows limit", []bigtable.ReadOption{bigtable.LimitRows(1)}, "r1:b/b:y=by"},
	} {
		if got := scan(c.opts...); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// CheckAndMutateRow: a predicate on family a sees nothing.
	var matched bool
	cond := bigtable.NewCondMutation(bigtable.FamilyFilter("a"), nil, nil)
	if err := tbl.Apply(ctx, "r1", cond, bigtable.GetCondMutationResult(&matched)); err != nil {
		t.Fatal(err)
	}
	if matched {
		t.Error("CheckAndMutateRow's predicate on family a matched for a reader of b")
	}
	// Scripts: the cells a script sees.
	sc := client.New(cc, client.Options{Project: "p", Instance: "i"})
	res, err := sc.RunScript(ctx, "t", "cells: table sum[family: string] of int;\nfor (i: int = 0; i < len(input.cells); i++)\n    emit cells[input.cells[i].family] <- 1;\n", client.ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.String()); got != `cells["b"] = 2` {
		t.Errorf("script saw %q", got)
	}
	// Writes: one touching a fails whole, naming the family.
	mut := bigtable.NewMutation()
	mut.Set("b", "y", bigtable.Now(), []byte("new"))
	mut.Set("a", "x", bigtable.Now(), []byte("new"))
	err = tbl.Apply(ctx, "r1", mut)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "family a") {
		t.Errorf("write to a and b: %v", err)
	}
	m1, m2 := bigtable.NewMutation(), bigtable.NewMutation()
	m1.Set("b", "y", bigtable.Now(), []byte("new"))
	m2.DeleteRow() // every family
	errs, err := tbl.ApplyBulk(ctx, []string{"r1", "r2"}, []*bigtable.Mutation{m1, m2})
	if err == nil && errs == nil {
		t.Error("bulk with a row deletion applied")
	} else if e := errors.Join(append(errs, err)...); !strings.Contains(e.Error(), "PermissionDenied") && status.Code(err) != codes.PermissionDenied {
		t.Errorf("bulk: %v", e)
	}
	if after := env.snapshot(t, "t"); after != before {
		t.Errorf("refused writes changed the table:\nbefore %s\nafter %s", before, after)
	}
	// A write of b alone works.
	ok := bigtable.NewMutation()
	ok.Set("b", "y", bigtable.Now(), []byte("mine"))
	if err := tbl.Apply(ctx, "r1", ok); err != nil {
		t.Fatalf("write to b: %v", err)
	}
	if r, err = tbl.ReadRow(ctx, "r1", bigtable.RowFilter(bigtable.LatestNFilter(1))); err != nil || families(r) != "b/b:y=mine" {
		t.Errorf("after the write: %s %v", families(r), err)
	}
}

// forgeSignature changes the first character of a JWT's signature, so that
// it no longer verifies. (Changing the last one is not enough: in unpadded
// base64 its low bits may be padding, which decoders ignore.)
func forgeSignature(token string) string {
	i := strings.LastIndexByte(token, '.') + 1
	c := byte('A')
	if token[i] == 'A' {
		c = 'B'
	}
	return token[:i] + string(c) + token[i+1:]
}

// TestAuthUndeleteByTableAdmin: UndeleteTable is decided by the deleted
// table's own grants: a principal with admin on it (through a group)
// brings it back whole with its grants, its reader and a stranger are
// PERMISSION_DENIED and change nothing, and nobody but a superuser may
// undelete a name never deleted (no grant to find).
func TestAuthUndeleteByTableAdmin(t *testing.T) {
	env := startAuthDevWith(t, func(c *DevConfig) { c.UndeleteRetention = time.Hour })
	ctx := context.Background()
	env.createTable(t, "t")
	if _, err := env.admin("admin").DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: tablePath("t")}); err != nil {
		t.Fatalf("the table's admin deletes it: %v", err)
	}
	undelete := func(who, table string) error {
		_, err := env.admin(who).UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: tablePath(table)})
		return err
	}
	for _, who := range []string{"reader", "nobody", "writer"} {
		if err := undelete(who, "t"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s undeletes: %v, want PERMISSION_DENIED", who, err)
		}
	}
	if _, err := env.admin("root").GetTable(ctx, &adminpb.GetTableRequest{Name: tablePath("t")}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused undelete brought the table back: %v", err)
	}
	if err := undelete("admin", "never"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("undelete of a name never deleted by a non-superuser: %v, want PERMISSION_DENIED", err)
	}
	if err := undelete("admin", "t"); err != nil {
		t.Fatalf("the table's admin undeletes it: %v", err)
	}
	// Back whole, with its grants: its reader reads it.
	time.Sleep(5 * time.Millisecond) // the test's cache TTL is 1 ms
	s, err := env.data("reader").ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: tablePath("t")})
	if err != nil {
		t.Fatal(err)
	}
	cells := 0
	for {
		resp, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the reader reads the undeleted table: %v", err)
		}
		cells += len(resp.GetChunks())
	}
	if cells != 3 {
		t.Fatalf("the undeleted table has %d cells, want 3", cells)
	}
	if err := undelete("admin", "t"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("undelete of an existing table: %v, want ALREADY_EXISTS", err)
	}
}
