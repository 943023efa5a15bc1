package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// handshake runs a real TLS handshake between a server presenting srv and
// trusting clientCAs, and a client presenting cli (may be nil) and trusting
// roots; it returns the client certificate the server verified.
func handshake(t *testing.T, srv tls.Certificate, clientCAs, roots *x509.CertPool, cli *tls.Certificate, serverName string) (*x509.Certificate, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sc := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert})
	ccfg := &tls.Config{RootCAs: roots, ServerName: serverName}
	if cli != nil {
		ccfg.Certificates = []tls.Certificate{*cli}
	}
	cc := tls.Client(b, ccfg)
	serr := make(chan error, 1)
	go func() { serr <- sc.Handshake(); b.Close() }()
	cerr := cc.Handshake()
	a.Close()
	if err := <-serr; err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return sc.ConnectionState().PeerCertificates[0], nil
}

func TestMutualTLSWithIssuedCertificates(t *testing.T) {
	ca, err := NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	srvPair, err := ca.Server("tabula-server", []string{"db.example", "10.1.2.3"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := srvPair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	cliPair, err := ca.Client("alice", []string{"analysts", "ops"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := cliPair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "127.0.0.1", "db.example", "10.1.2.3"} {
		peer, err := handshake(t, srv, ca.Pool(), ca.Pool(), &cli, name)
		if err != nil {
			t.Fatalf("server name %s: %v", name, err)
		}
		if peer.Subject.CommonName != "alice" || !slices.Equal(slices.Sorted(slices.Values(peer.Subject.OrganizationalUnit)), []string{"analysts", "ops"}) {
			t.Fatalf("peer subject = %v, want CN alice OU [analysts ops]", peer.Subject)
		}
	}
	if _, err := handshake(t, srv, ca.Pool(), ca.Pool(), &cli, "other.example"); err == nil {
		t.Fatal("handshake for a name not in the server certificate succeeded")
	}
	// A server certificate serves as a client certificate too (servers
	// calling servers).
	if peer, err := handshake(t, srv, ca.Pool(), ca.Pool(), &srv, "localhost"); err != nil || peer.Subject.CommonName != "tabula-server" {
		t.Fatalf("server cert as client: peer %v, err %v", peer, err)
	}
	// A client certificate from another authority is refused, and so is none.
	other, err := NewCA("other CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	strangerPair, err := other.Client("mallory", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := strangerPair.TLSCertificate()
	if _, err := handshake(t, srv, ca.Pool(), ca.Pool(), &stranger, "localhost"); err == nil {
		t.Fatal("client certificate from another CA accepted")
	}
	if _, err := handshake(t, srv, ca.Pool(), ca.Pool(), nil, "localhost"); err == nil {
		t.Fatal("handshake without a client certificate accepted")
	}
	// A client trusting another authority refuses the server.
	if _, err := handshake(t, srv, ca.Pool(), other.Pool(), &cli, "localhost"); err == nil {
		t.Fatal("client accepted a server from an untrusted CA")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := NewCA("", 0); err == nil {
		t.Fatal("NewCA with empty name succeeded")
	}
	ca, err := NewCA("ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Client("", nil, 0); err == nil {
		t.Fatal("Client with empty principal succeeded")
	}
	if _, err := ca.Server("", nil, 0); err == nil {
		t.Fatal("Server with empty name succeeded")
	}
	if _, err := ca.Client("bob", nil, -1); err == nil {
		t.Fatal("negative validity accepted")
	}
	if _, err := Generate(t.TempDir(), Spec{Clients: []ClientSpec{{Principal: "../x"}}}); err == nil {
		t.Fatal("principal with a path separator accepted")
	}
}

func TestGenerateDirectoryReusesAuthority(t *testing.T) {
	dir := t.TempDir()
	ca1, err := Generate(dir, Spec{Hosts: []string{"node1"}, Clients: []ClientSpec{{Principal: "alice", Groups: []string{"g"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile, "client-alice.crt", "client-alice.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode %v, want 0600", st.Mode().Perm())
	}
	ca2, err := Generate(dir, Spec{Clients: []ClientSpec{{Principal: "bob"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca1.CertPEM, ca2.CertPEM) {
		t.Fatal("second Generate made a new CA instead of reusing the directory's")
	}
	// alice's certificate, made before, still verifies against the CA.
	cf, kf := ClientFiles(dir, "alice")
	alice, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(alice.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca2.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("earlier client cert no longer verifies: %v", err)
	}
	if _, err := LoadCA(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile)); err == nil {
		t.Fatal("LoadCA accepted a non-CA certificate")
	}
}
