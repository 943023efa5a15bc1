package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/tabuladb/tabula/security/certs"
)

// pki is a CA with files in a directory.
type pki struct {
	dir string
	ca  *certs.Authority
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	ca, err := certs.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteFiles(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	return &pki{dir: dir, ca: ca}
}

func (p *pki) server(t *testing.T, cn string) (cert, key string) {
	t.Helper()
	pair, err := p.ca.Server(cn, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(p.dir, "server.crt"), filepath.Join(p.dir, "server.key")
	if err := pair.WriteFiles(cert, key); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func (p *pki) client(t *testing.T, file, principal string) (cert, key string) {
	t.Helper()
	pair, err := p.ca.Client(principal, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(p.dir, file+".crt"), filepath.Join(p.dir, file+".key")
	if err := pair.WriteFiles(cert, key); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// clientConfig makes a client certificate of principal signed by p and
// returns a client config presenting it and trusting caFile.
func (p *pki) clientConfig(t *testing.T, caFile, file, principal string) *tls.Config {
	t.Helper()
	cert, key := p.client(t, file, principal)
	c, err := Client(Files{CAFile: caFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dial handshakes a client config against a server config over a pipe and
// returns the server certificate the client saw and the client
// certificate the server saw (nil without one).
func dial(t *testing.T, srv, cli *tls.Config) (server, client *x509.Certificate, err error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cli = cli.Clone()
	cli.ServerName = "localhost"
	sc, cc := tls.Server(a, srv), tls.Client(b, cli)
	serr := make(chan error, 1)
	go func() { serr <- sc.Handshake(); b.Close() }()
	cerr := cc.Handshake()
	a.Close()
	if err := <-serr; err != nil {
		return nil, nil, err
	}
	if cerr != nil {
		return nil, nil, cerr
	}
	server = cc.ConnectionState().PeerCertificates[0]
	if pc := sc.ConnectionState().PeerCertificates; len(pc) > 0 {
		client = pc[0]
	}
	return server, client, nil
}

func TestServerCertificateReloadsWhenFilesChange(t *testing.T) {
	p := newPKI(t, t.TempDir(), "ca")
	cert, key := p.server(t, "first")
	srv, err := Server(Files{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Client(Files{CAFile: filepath.Join(p.dir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := dial(t, srv, cli)
	if err != nil || got.Subject.CommonName != "first" {
		t.Fatalf("first handshake: cert %v, err %v", got, err)
	}
	p.server(t, "second") // rewrites the same files
	got, _, err = dial(t, srv, cli)
	if err != nil || got.Subject.CommonName != "second" {
		t.Fatalf("after rewrite: cert %v, err %v; want the new certificate", got, err)
	}
	// A broken replacement keeps the last good certificate.
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, err = dial(t, srv, cli)
	if err != nil || got.Subject.CommonName != "second" {
		t.Fatalf("after a broken rewrite: cert %v, err %v; want the previous certificate", got, err)
	}
	p.server(t, "third")
	if got, _, err = dial(t, srv, cli); err != nil || got.Subject.CommonName != "third" {
		t.Fatalf("after repair: cert %v, err %v", got, err)
	}
}

func TestMutualTLSRequiresVerifiedClientCertificates(t *testing.T) {
	p := newPKI(t, t.TempDir(), "ca")
	cert, key := p.server(t, "srv")
	caFile := filepath.Join(p.dir, "ca.crt")
	srv, err := Server(Files{CertFile: cert, KeyFile: key, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	anon, err := Client(Files{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(t, srv, anon); err == nil {
		t.Fatal("handshake without a client certificate succeeded")
	}
	alice := p.clientConfig(t, caFile, "alice", "alice")
	_, peer, err := dial(t, srv, alice)
	if err != nil || peer == nil || peer.Subject.CommonName != "alice" {
		t.Fatalf("alice: peer %v, err %v", peer, err)
	}
	// The client's certificate reloads too.
	p.client(t, "alice", "alice2")
	if _, peer, err = dial(t, srv, alice); err != nil || peer.Subject.CommonName != "alice2" {
		t.Fatalf("after the client's rewrite: peer %v, err %v", peer, err)
	}
	// A certificate from another CA is refused...
	other := newPKI(t, t.TempDir(), "other")
	mallory := other.clientConfig(t, caFile, "mallory", "mallory")
	if _, _, err := dial(t, srv, mallory); err == nil {
		t.Fatal("client certificate of another CA accepted")
	}
	// ...until the server's client CA file is replaced by that CA: the
	// pool reloads, and alice's certificate stops being accepted.
	otherPEM, err := os.ReadFile(filepath.Join(other.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile+".new", otherPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(caFile+".new", caFile); err != nil {
		t.Fatal(err)
	}
	if _, peer, err := dial(t, srv, mallory); err != nil || peer.Subject.CommonName != "mallory" {
		t.Fatalf("after the CA rotation: peer %v, err %v", peer, err)
	}
	if _, _, err := dial(t, srv, alice); err == nil {
		t.Fatal("old CA's client accepted after the CA rotation")
	}
}

// TestOptionalClientCertificates: with ClientCertOptional a client without
// a certificate connects (it then needs a token), one with a certificate
// of the client CA is seen with it, and one of another CA is still refused.
func TestOptionalClientCertificates(t *testing.T) {
	p := newPKI(t, t.TempDir(), "ca")
	cert, key := p.server(t, "srv")
	caFile := filepath.Join(p.dir, "ca.crt")
	role, err := ForRole(RoleFiles{CertFile: cert, KeyFile: key, ClientCAFile: caFile, ClientCertOptional: true})
	if err != nil {
		t.Fatal(err)
	}
	anon, err := Client(Files{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, peer, err := dial(t, role.Server, anon); err != nil || peer != nil {
		t.Fatalf("without a client certificate: peer %v, err %v; want a connection without one", peer, err)
	}
	alice := p.clientConfig(t, caFile, "alice", "alice")
	if _, peer, err := dial(t, role.Server, alice); err != nil || peer == nil || peer.Subject.CommonName != "alice" {
		t.Fatalf("alice: peer %v, err %v", peer, err)
	}
	mallory := newPKI(t, t.TempDir(), "other").clientConfig(t, caFile, "mallory", "mallory")
	if _, _, err := dial(t, role.Server, mallory); err == nil {
		t.Fatal("client certificate of another CA accepted")
	}
	if _, err := ForRole(RoleFiles{CertFile: cert, KeyFile: key, ClientCertOptional: true}); err == nil || !strings.Contains(err.Error(), "--tls-client-ca") {
		t.Errorf("optional client certificates without a client CA: %v", err)
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "ca")
	cert, key := p.server(t, "srv")
	cases := map[string]func() error{
		"server without key": func() error { _, err := Server(Files{CertFile: cert}); return err },
		"missing cert":       func() error { _, err := Server(Files{CertFile: cert + "x", KeyFile: key}); return err },
		"missing client CA": func() error {
			_, err := Server(Files{CertFile: cert, KeyFile: key, CAFile: filepath.Join(dir, "nope")})
			return err
		},
		"CA not PEM":         func() error { _, err := Client(Files{CAFile: key + ".does-not-exist"}); return err },
		"key as CA":          func() error { _, err := Client(Files{CAFile: key}); return err },
		"client cert no key": func() error { _, err := Client(Files{CertFile: cert}); return err },
		"client CA without cert": func() error {
			_, err := ForRole(RoleFiles{ClientCAFile: filepath.Join(dir, "ca.crt")})
			return err
		},
	}
	for name, f := range cases {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if r, err := ForRole(RoleFiles{}); err != nil || r.Server != nil || r.Client != nil {
		t.Fatalf("ForRole with no files = %+v, %v; want plaintext", r, err)
	}
}

// TestGRPCAndHTTPOverRoleConfig serves gRPC and HTTP with a role's server
// config and calls them with another role's client config: ALPN (h2) and
// mutual TLS work through grpc's credentials and net/http.
func TestGRPCAndHTTPOverRoleConfig(t *testing.T) {
	p := newPKI(t, t.TempDir(), "ca")
	cert, key := p.server(t, "tabula-server")
	role, err := ForRole(RoleFiles{CertFile: cert, KeyFile: key, ClientCAFile: filepath.Join(p.dir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(role.Server)), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
					seen = ti.State.VerifiedChains[0][0].Subject.CommonName
				}
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(role.Client)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC over mTLS: %v", err)
	}
	if seen != "tabula-server" {
		t.Fatalf("server saw client %q, want tabula-server", seen)
	}
	anon, err := Client(Files{CAFile: filepath.Join(p.dir, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	cc2, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(anon)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	if _, err := healthpb.NewHealthClient(cc2).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("gRPC without a client certificate succeeded")
	}

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok "+r.Proto) })}
	go func() { _ = hs.Serve(tls.NewListener(hl, role.Server)) }()
	defer hs.Close()
	for _, h2 := range []bool{false, true} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: role.Client.Clone(), ForceAttemptHTTP2: h2}}
		resp, err := hc.Get("https://" + hl.Addr().String() + "/")
		if err != nil {
			t.Fatalf("HTTPS (h2 %v): %v", h2, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "ok HTTP/1.1"
		if h2 {
			want = "ok HTTP/2.0"
		}
		if string(body) != want {
			t.Fatalf("HTTPS body %q, want %q", body, want)
		}
		hc.CloseIdleConnections()
	}
}
