//go:build integration

package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// TestClusterAuthThroughGateway: a cluster of a master and two tablet
// servers with mutual TLS between every party and authentication on
// (token file; the servers' certificate name and the test's are
// superusers). Through one server's gateway — rows of both servers'
// tablets, the admin API relayed to the master — callers without
// credentials or with a wrong token are UNAUTHENTICATED, a principal
// without the grant is PERMISSION_DENIED and changes nothing, a reader of
// one family sees only it on every tablet, and grants made through the
// gateway take effect.
func TestClusterAuthThroughGateway(t *testing.T) {
	ctx := context.Background()
	c := newTestCluster(t, clusterOptions{mtls: true})
	tokens := map[string]string{"reader": "reader-token-0123456789abcdef", "fam": "fam-token-0123456789abcdef", "nobody": "nobody-token-0123456789abcdef"}
	c.enableAuth(tokens)
	c.startMaster()
	c.startServer()
	c.startServer()
	gw := c.servers[0].addr
	dial := func(token string) *grpc.ClientConn {
		opts := []grpc.DialOption{tlsconfig.DialOption(tlsFor(gw))}
		if token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerToken(token)))
		}
		cc, err := grpc.NewClient(gw, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	root := dial("") // the test's client certificate: a superuser
	const inst = "projects/p/instances/i"
	table := inst + "/tables/t"
	admin := adminpb.NewBigtableTableAdminClient(root)
	if _, err := admin.CreateTable(ctx, &adminpb.CreateTableRequest{Parent: inst, TableId: "t", Table: &adminpb.Table{
		ColumnFamilies: map[string]*adminpb.ColumnFamily{"a": {}, "b": {}},
	}, InitialSplits: []*adminpb.CreateTableRequest_Split{{Key: []byte("m")}, {Key: []byte("t")}}}); err != nil {
		t.Fatal(err)
	}
	c.waitAllServed(60*time.Second, 3)
	data := bigtablepb.NewBigtableClient(root)
	for _, row := range []string{"a1", "n1", "z1"} { // one row per tablet
		if _, err := data.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: table, RowKey: []byte(row), Mutations: []*bigtablepb.Mutation{
			setCellMut("a", "x", "va"), setCellMut("b", "y", "vb"),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	// Grants through the gateway (relayed to the master).
	if _, err := admin.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: table, Policy: &iampb.Policy{Bindings: []*iampb.Binding{
		{Role: acl.RoleReader, Members: []string{"user:reader"}},
		{Role: acl.RoleReader, Members: []string{"user:fam"}, Condition: &expr.Expr{Expression: acl.FamilyCondition("b")}},
	}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the servers' grant caches (100 ms)

	dump := func() string {
		var b strings.Builder
		rs, err := data.ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: table})
		if err != nil {
			t.Fatal(err)
		}
		for {
			r, err := rs.Recv()
			if err == io.EOF {
				return b.String()
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range r.Chunks {
				b.WriteString(string(ch.RowKey) + "/" + ch.GetFamilyName().GetValue() + "=" + string(ch.Value) + " ")
			}
		}
	}
	before := dump()
	readAll := func(cc *grpc.ClientConn) (string, error) {
		rs, err := bigtablepb.NewBigtableClient(cc).ReadRows(ctx, &bigtablepb.ReadRowsRequest{TableName: table})
		if err != nil {
			return "", err
		}
		var b strings.Builder
		var key string
		for {
			r, err := rs.Recv()
			if err == io.EOF {
				return b.String(), nil
			}
			if err != nil {
				return "", err
			}
			for _, ch := range r.Chunks {
				if len(ch.RowKey) > 0 {
					key = string(ch.RowKey) // a row's first chunk names it
				}
				b.WriteString(key + "/" + ch.GetFamilyName().GetValue() + " ")
			}
		}
	}
	calls := map[string]func(cc *grpc.ClientConn) error{
		"ReadRows": func(cc *grpc.ClientConn) error { _, err := readAll(cc); return err },
		"MutateRow": func(cc *grpc.ClientConn) error {
			_, err := bigtablepb.NewBigtableClient(cc).MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: table, RowKey: []byte("n1"), Mutations: []*bigtablepb.Mutation{setCellMut("a", "x", "new")}})
			return err
		},
		"MutateRows": func(cc *grpc.ClientConn) error {
			s, err := bigtablepb.NewBigtableClient(cc).MutateRows(ctx, &bigtablepb.MutateRowsRequest{TableName: table, Entries: []*bigtablepb.MutateRowsRequest_Entry{
				{RowKey: []byte("a1"), Mutations: []*bigtablepb.Mutation{setCellMut("b", "y", "new")}},
				{RowKey: []byte("z1"), Mutations: []*bigtablepb.Mutation{setCellMut("a", "x", "new")}},
			}})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"DropRowRange": func(cc *grpc.ClientConn) error {
			_, err := adminpb.NewBigtableTableAdminClient(cc).DropRowRange(ctx, &adminpb.DropRowRangeRequest{Name: table, Target: &adminpb.DropRowRangeRequest_DeleteAllDataFromTable{DeleteAllDataFromTable: true}})
			return err
		},
		"SetIamPolicy": func(cc *grpc.ClientConn) error {
			_, err := adminpb.NewBigtableTableAdminClient(cc).SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: table, Policy: &iampb.Policy{}})
			return err
		},
		"DeleteTable": func(cc *grpc.ClientConn) error {
			_, err := adminpb.NewBigtableTableAdminClient(cc).DeleteTable(ctx, &adminpb.DeleteTableRequest{Name: table})
			return err
		},
	}
	anon, err := tlsconfig.Client(tlsconfig.Files{CAFile: filepath.Join(c.dir, "tls", "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	// TLS without a client certificate is refused by the handshake
	// (--tls-client-ca); with the cluster's certificate but a wrong token,
	// by authentication.
	wrong := dial("wrong-token-0123456789abcdef")
	nobody := dial(tokens["nobody"])
	reader := dial(tokens["reader"])
	for name, call := range calls {
		if err := call(wrong); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s with a wrong token: %v", name, err)
		}
		cc, err := grpc.NewClient(gw, tlsconfig.DialOption(anon))
		if err != nil {
			t.Fatal(err)
		}
		if err := call(cc); err == nil {
			t.Errorf("%s without a client certificate: accepted", name)
		}
		cc.Close()
		if err := call(nobody); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s as nobody: %v", name, err)
		}
		if name != "ReadRows" {
			if err := call(reader); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s as a reader: %v", name, err)
			}
		}
	}
	if after := dump(); after != before {
		t.Errorf("refused calls changed the table:\n%s\n%s", before, after)
	}
	// The reader reads every tablet; fam only family b, on every tablet.
	if got, err := readAll(reader); err != nil || got != "a1/a a1/b n1/a n1/b z1/a z1/b " {
		t.Errorf("reader: %q %v", got, err)
	}
	if got, err := readAll(dial(tokens["fam"])); err != nil || got != "a1/b n1/b z1/b " {
		t.Errorf("fam: %q %v", got, err)
	}
}

func setCellMut(fam, col, val string) *bigtablepb.Mutation {
	return &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
		FamilyName: fam, ColumnQualifier: []byte(col), TimestampMicros: -1, Value: []byte(val),
	}}}
}
