package cluster

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/iam/apiv1/iampb"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
)

// TestAuthOfficialClientTLS is the README's recipe: tabula dev with TLS,
// client certificates and a token file; the official Go client over TLS
// with an oauth2 token source, and with a client certificate (CN the
// principal, OU its groups); a certificate from another CA is refused.
func TestAuthOfficialClientTLS(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := certs.Generate(dir, certs.Spec{Clients: []certs.ClientSpec{{Principal: "alice", Groups: []string{"analysts"}}, {Principal: "root"}}}); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if _, err := certs.Generate(other, certs.Spec{Clients: []certs.ClientSpec{{Principal: "root"}}}); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("bob-token-0123456789abcdef bob\nroot-token-0123456789abcdef root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	a, err := auth.New(auth.Config{TokenFile: tokens, AllowCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	// start serves the same directory over TLS, requiring client
	// certificates when mtls is set (a token client then needs one too).
	var d *Dev
	start := func(mtls bool) {
		t.Helper()
		f := tlsconfig.RoleFiles{CertFile: filepath.Join(dir, certs.ServerFile), KeyFile: filepath.Join(dir, certs.ServerKeyFile), Logger: log}
		if mtls {
			f.ClientCAFile = filepath.Join(dir, certs.CAFile)
		}
		role, err := tlsconfig.ForRole(f)
		if err != nil {
			t.Fatal(err)
		}
		if d, err = StartDev(ctx, DevConfig{Dir: filepath.Join(dir, "data"), Addr: "127.0.0.1:0", Logger: log, TLS: role,
			Auth: &AuthConfig{Authenticator: a, Superusers: []string{"user:root"}, CacheTTL: time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
	}
	start(false)
	defer func() { d.Close() }()

	// clients returns the official data and admin clients over TLS with
	// the CA, a client certificate of principal in certDir ("" for none)
	// and a token (none if empty).
	// tryClients is clients returning the data client's creation error
	// (it pings the server first).
	var tryClients func(certDir, principal, token string) (*bigtable.Client, *bigtable.AdminClient, error)
	clients := func(certDir, principal, token string) (*bigtable.Client, *bigtable.AdminClient) {
		t.Helper()
		data, admin, err := tryClients(certDir, principal, token)
		if err != nil {
			t.Fatal(err)
		}
		return data, admin
	}
	tryClients = func(certDir, principal, token string) (*bigtable.Client, *bigtable.AdminClient, error) {
		f := tlsconfig.Files{CAFile: filepath.Join(dir, certs.CAFile)}
		if certDir != "" {
			f.CertFile, f.KeyFile = certs.ClientFiles(certDir, principal)
		}
		tc, err := tlsconfig.Client(f)
		if err != nil {
			t.Fatal(err)
		}
		opts := []option.ClientOption{option.WithEndpoint(d.Addr()), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(credentials.NewTLS(tc)))}
		if token != "" {
			ts := oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}
			opts = append(opts, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(ts)))
		}
		data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, opts...)
		if err != nil {
			return nil, nil, err
		}
		admin, err := bigtable.NewAdminClient(ctx, "p", "i", opts...)
		if err != nil {
			data.Close()
			return nil, nil, err
		}
		t.Cleanup(func() { data.Close(); admin.Close() })
		return data, admin, nil
	}
	// refused checks that a client is refused, at its first ping or its
	// first read.
	refused := func(what string, code codes.Code, certDir, principal, token string) {
		t.Helper()
		data, _, err := tryClients(certDir, principal, token)
		if err == nil {
			_, err = data.Open("t").ReadRow(ctx, "r1")
		}
		if err == nil || code != codes.Unknown && status.Code(err) != code && !strings.Contains(err.Error(), code.String()) {
			t.Errorf("%s: %v, want %v", what, err, code)
		}
	}

	// root by token creates the table, grants alice's group read on
	// family a (through the official client's IAM handle) and writes.
	rootData, rootAdmin := clients("", "", "root-token-0123456789abcdef")
	if err := rootAdmin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"a": bigtable.NoGcPolicy(), "b": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	h := rootAdmin.TableIAM("t")
	pol, err := h.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.Add("user:bob", acl.RoleReader)
	if err := h.SetPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	pol, err = h.Policy(ctx)
	if err != nil || !pol.HasRole("user:bob", acl.RoleReader) {
		t.Fatalf("IAM handle: %v %v", pol, err)
	}
	mut := bigtable.NewMutation()
	mut.Set("a", "x", bigtable.Now(), []byte("ax"))
	mut.Set("b", "y", bigtable.Now(), []byte("by"))
	if err := rootData.Open("t").Apply(ctx, "r1", mut); err != nil {
		t.Fatal(err)
	}
	// A family grant to alice's group: a conditional binding, through
	// the handle's underlying proto.
	if pol, err = h.Policy(ctx); err != nil {
		t.Fatal(err)
	}
	pol.InternalProto.Version = 3
	pol.InternalProto.Bindings = append(pol.InternalProto.Bindings, &iampb.Binding{
		Role: acl.RoleReader, Members: []string{"group:analysts"}, Condition: &expr.Expr{Expression: acl.FamilyCondition("a")},
	})
	if err := h.SetPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}

	// bob by an oauth2 token source over TLS: reads both families.
	bobData, _ := clients("", "", "bob-token-0123456789abcdef")
	r, err := bobData.Open("t").ReadRow(ctx, "r1")
	if err != nil || len(r["a"]) != 1 || len(r["b"]) != 1 {
		t.Fatalf("bob: %v %v", r, err)
	}
	perms, err := func() ([]string, error) {
		_, adm := clients("", "", "bob-token-0123456789abcdef")
		return adm.TableIAM("t").TestPermissions(ctx, []string{"bigtable.tables.readRows", "bigtable.tables.mutateRows"})
	}()
	if err != nil || strings.Join(perms, ",") != "bigtable.tables.readRows" {
		t.Errorf("bob's TestPermissions: %v %v", perms, err)
	}
	// No credentials at all (TLS without a client certificate).
	refused("no credentials", codes.Unauthenticated, "", "", "")
	// A wrong token over TLS.
	refused("wrong token", codes.Unauthenticated, "", "", "wrong-token-0123456789abcdef")

	// Mutual TLS on the same data: identities from client certificates.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	start(true)
	// alice by her client certificate (OU analysts): family a only.
	aliceData, _ := clients(dir, "alice", "")
	r, err = aliceData.Open("t").ReadRow(ctx, "r1")
	if err != nil || len(r["a"]) != 1 || len(r["b"]) != 0 {
		t.Fatalf("alice: %v %v", r, err)
	}
	// A certificate of another CA is refused.
	refused("a certificate of another CA", codes.Unknown, other, "root", "")
}
