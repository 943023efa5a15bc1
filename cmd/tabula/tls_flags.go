package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/pflag"

	"github.com/tabuladb/tabula/security/tlsconfig"
)

// serverTLSFlags are the TLS flags of every server role (dev, master,
// tabletserver, worker): the certificate its gRPC and HTTP ports serve
// with, the CA whose client certificates it requires, and the CA it
// verifies other servers with when it calls them.
type serverTLSFlags struct {
	cert, key, clientCA, ca string
	clientCertOptional      bool
}

func (t *serverTLSFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.cert, "tls-cert", "", "PEM certificate the gRPC and HTTP ports serve TLS with (and present to other servers); reloaded when the file changes")
	fs.StringVar(&t.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&t.clientCA, "tls-client-ca", "", "PEM CA certificates: require client certificates signed by them (mutual TLS)")
	fs.StringVar(&t.ca, "tls-ca", "", "PEM CA certificates other servers' certificates are verified with when this one calls them (default --tls-client-ca)")
	fs.BoolVar(&t.clientCertOptional, "tls-client-cert-optional", false, "with --tls-client-ca: also accept clients without a certificate (they authenticate with a token); a certificate given is still verified")
}

// role returns the role's TLS; the zero Role (plaintext) without
// --tls-cert.
func (t *serverTLSFlags) role(log *slog.Logger) (tlsconfig.Role, error) {
	r, err := tlsconfig.ForRole(tlsconfig.RoleFiles{CertFile: t.cert, KeyFile: t.key, ClientCAFile: t.clientCA, CAFile: t.ca, ClientCertOptional: t.clientCertOptional, Logger: log})
	if err != nil {
		return tlsconfig.Role{}, fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca/--tls-ca/--tls-client-cert-optional: %w", err)
	}
	return r, nil
}

// clientTLSFlags are the TLS flags of a command that calls a server: the
// CA that signs the server's certificate and the caller's own certificate
// (for servers requiring one). They default to TABULA_TLS_CA,
// TABULA_TLS_CERT and TABULA_TLS_KEY; none set is plaintext.
type clientTLSFlags struct {
	ca, cert, key string
}

func (t *clientTLSFlags) register(fs *pflag.FlagSet) {
	env := tlsconfig.EnvFiles()
	fs.StringVar(&t.ca, "tls-ca", env.CAFile, "connect over TLS, verifying the server with these PEM CA certificates (default from $"+tlsconfig.EnvCA+")")
	fs.StringVar(&t.cert, "tls-cert", env.CertFile, "PEM client certificate, for servers that require one (default from $"+tlsconfig.EnvCert+")")
	fs.StringVar(&t.key, "tls-key", env.KeyFile, "PEM private key of --tls-cert (default from $"+tlsconfig.EnvKey+")")
}

// config returns the client's TLS config, nil (plaintext) when no flag is
// set.
func (t clientTLSFlags) config() (*tls.Config, error) {
	if t.ca == "" && t.cert == "" && t.key == "" {
		return nil, nil
	}
	c, err := tlsconfig.Client(tlsconfig.Files{CAFile: t.ca, CertFile: t.cert, KeyFile: t.key})
	if err != nil {
		return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
	}
	return c, nil
}

// backendFlags are the credentials of the backends a cluster role talks
// to: Consul's ACL token and TLS. Their values are never logged.
type backendFlags struct {
	consulToken, consulCA, consulCert, consulKey string
}

func (b *backendFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.consulToken, "consul-token", "", "Consul ACL token (default $CONSUL_HTTP_TOKEN); see deploy/consul-policy.hcl for the rights it needs")
	fs.StringVar(&b.consulCA, "consul-ca", "", "speak HTTPS to the Consul agent, verifying it with these PEM CA certificates (default $CONSUL_CACERT with CONSUL_HTTP_SSL=true)")
	fs.StringVar(&b.consulCert, "consul-cert", "", "PEM client certificate for a Consul agent that verifies incoming HTTPS")
	fs.StringVar(&b.consulKey, "consul-key", "", "PEM private key of --consul-cert")
}

// token is --consul-token; "@/path" reads it from a file, so the token
// stays out of the process list.
func (b *backendFlags) token() (string, error) {
	if len(b.consulToken) > 1 && b.consulToken[0] == '@' {
		data, err := os.ReadFile(b.consulToken[1:])
		if err != nil {
			return "", err
		}
		return string(bytes.TrimSpace(data)), nil
	}
	return b.consulToken, nil
}

// opsListener is a role's HTTP ops listener: TLS with the role's server
// config, plaintext without one.
func opsListener(l net.Listener, r tlsconfig.Role) net.Listener {
	if r.Server == nil {
		return l
	}
	return tls.NewListener(l, r.Server)
}

// exportClientEnv sets TABULA_TLS_CA, TABULA_TLS_CERT and TABULA_TLS_KEY
// from the role's flags when the environment does not set them: the
// MapReduce tasks a role runs in its process reach tables through
// client.Dial, which reads them, so they call the cluster with the role's
// own certificate.
func (t *serverTLSFlags) exportClientEnv() {
	if t.cert == "" || os.Getenv(tlsconfig.EnvCA)+os.Getenv(tlsconfig.EnvCert)+os.Getenv(tlsconfig.EnvKey) != "" {
		return
	}
	ca := t.ca
	if ca == "" {
		ca = t.clientCA
	}
	if ca != "" {
		os.Setenv(tlsconfig.EnvCA, ca)
	}
	os.Setenv(tlsconfig.EnvCert, t.cert)
	os.Setenv(tlsconfig.EnvKey, t.key)
}
