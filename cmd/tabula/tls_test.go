package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/cluster"
)

// TestCertsThenMutualTLSVerbs: `tabula certs` makes a CA and certificates;
// `tabula dev`'s TLS flags serve mutual TLS with them; the verbs connect with
// --tls-ca/--tls-cert/--tls-key (or TABULA_TLS_*), and fail without a client
// certificate.
func TestCertsThenMutualTLSVerbs(t *testing.T) {
	dir := t.TempDir()
	cmd := newCertsCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--dir", dir, "--hosts", "db.example", "--client", "alice:ops+analysts", "--client", "bob"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "client-alice.crt") {
		t.Fatalf("certs printed %q", out.String())
	}
	cf, kf := certs.ClientFiles(dir, "alice")
	pair, err := tlsconfig.Client(tlsconfig.Files{CAFile: filepath.Join(dir, certs.CAFile), CertFile: cf, KeyFile: kf})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf.Subject.CommonName != "alice" || !slices.Contains(cert.Leaf.Subject.OrganizationalUnit, "ops") || !slices.Contains(cert.Leaf.Subject.OrganizationalUnit, "analysts") {
		t.Fatalf("alice's certificate subject %v", cert.Leaf.Subject)
	}

	tf := serverTLSFlags{cert: filepath.Join(dir, certs.ServerFile), key: filepath.Join(dir, certs.ServerKeyFile), clientCA: filepath.Join(dir, certs.CAFile)}
	role, err := tf.role(quietDevLogger())
	if err != nil {
		t.Fatal(err)
	}
	d, err := cluster.StartDev(context.Background(), cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", TLS: role, Logger: quietDevLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tlsArgs := []string{"--tls-ca", filepath.Join(dir, certs.CAFile), "--tls-cert", cf, "--tls-key", kf}
	withTLS := func(args ...string) []string { return append(args, tlsArgs...) }
	runCLISteps(t, d.Addr(), []cliStep{
		{args: withTLS("createtable", "t", "families=f")},
		{args: withTLS("set", "t", "r1", "f:c=v1")},
		{args: withTLS("lookup", "t", "r1"), contain: []string{"\"v1\""}},
		{args: []string{"set", "t", "r2", "f:c=plaintext", "--timeout", "5s"}, errWant: "UNAVAILABLE"},
		{args: []string{"set", "t", "r2", "f:c=no-client-cert", "--tls-ca", filepath.Join(dir, certs.CAFile), "--timeout", "5s"}, errWant: "UNAVAILABLE"},
		{args: []string{"set", "t", "r2", "f:c=v", "--tls-ca", filepath.Join(dir, certs.CAFile), "--tls-cert", cf}, errWant: "--tls-key"},
		{args: withTLS("count", "t"), want: "1\n"},
	})
	// The environment variables stand in for the flags.
	t.Setenv(tlsconfig.EnvCA, filepath.Join(dir, certs.CAFile))
	t.Setenv(tlsconfig.EnvCert, cf)
	t.Setenv(tlsconfig.EnvKey, kf)
	runCLISteps(t, d.Addr(), []cliStep{{args: []string{"lookup", "t", "r1"}, contain: []string{"\"v1\""}}})

	// Bad input to certs: an empty principal, a negative validity.
	for _, args := range [][]string{{"--dir", dir, "--client", ":ops"}, {"--dir", dir, "--client", "x:"}, {"--dir", dir, "--valid-for", "-1h"}} {
		c := newCertsCommand()
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(args)
		if err := c.ExecuteContext(context.Background()); err == nil {
			t.Errorf("certs %v succeeded", args)
		}
	}
	// A client CA without a certificate is refused at start.
	if _, err := (&serverTLSFlags{clientCA: filepath.Join(dir, certs.CAFile)}).role(quietDevLogger()); err == nil {
		t.Fatal("--tls-client-ca without --tls-cert accepted")
	}
}

// TestConsulTokenFromFile: --consul-token @FILE reads the token from a file
// (trailing newline trimmed); a missing file is an error; a plain value is
// the token.
func TestConsulTokenFromFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("s3cr3t-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := (&backendFlags{consulToken: "@" + f}).token(); err != nil || got != "s3cr3t-token" {
		t.Fatalf("@file: %q, %v", got, err)
	}
	if _, err := (&backendFlags{consulToken: "@" + f + ".missing"}).token(); err == nil {
		t.Fatal("a missing token file accepted")
	}
	if got, _ := (&backendFlags{consulToken: "plain"}).token(); got != "plain" {
		t.Fatalf("plain token: %q", got)
	}
}
