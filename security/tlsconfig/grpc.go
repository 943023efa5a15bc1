package tlsconfig

import (
	"crypto/tls"
	"log/slog"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Environment variables a client's TLS comes from when no flag or option
// sets it: the CA that signs the servers' certificates, and the client's
// own certificate and key (for servers requiring client certificates).
const (
	EnvCA   = "TABULA_TLS_CA"
	EnvCert = "TABULA_TLS_CERT"
	EnvKey  = "TABULA_TLS_KEY"
)

// EnvFiles returns the client files the environment names.
func EnvFiles() Files {
	return Files{CAFile: os.Getenv(EnvCA), CertFile: os.Getenv(EnvCert), KeyFile: os.Getenv(EnvKey)}
}

// ClientFromEnv returns the client config the environment variables
// describe, or nil (plaintext) when none is set. It fails as Client does.
func ClientFromEnv() (*tls.Config, error) {
	f := EnvFiles()
	if f.CAFile == "" && f.CertFile == "" && f.KeyFile == "" {
		return nil, nil
	}
	return Client(f)
}

// DialOption is the one transport-credentials option every gRPC client in
// Tabula dials with: TLS with c, or plaintext when c is nil.
func DialOption(c *tls.Config) grpc.DialOption {
	if c == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c))
}

// EnvDialOption is DialOption of ClientFromEnv: what a process dials other
// Tabula servers with when nothing passed it a config (a MapReduce or Beam
// worker started with the TABULA_TLS_* variables, say).
func EnvDialOption() (grpc.DialOption, error) {
	c, err := ClientFromEnv()
	if err != nil {
		return nil, err
	}
	return DialOption(c), nil
}

// ServerOptions returns the gRPC server options of a role's server config:
// TLS credentials, or none (plaintext) when c is nil.
func ServerOptions(c *tls.Config) []grpc.ServerOption {
	if c == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(c))}
}

// Loopback reports whether addr (host:port, as a listener reports it)
// listens on a loopback address only: "localhost", 127.0.0.0/8 or ::1. An
// empty host, 0.0.0.0 and :: listen on every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WarnPlaintext logs a warning when a role listens on a non-loopback
// address without TLS: anyone on the network can then read its traffic.
func WarnPlaintext(log *slog.Logger, role, addr string, c *tls.Config) {
	if c == nil && !Loopback(addr) {
		log.Warn("listening on a non-loopback address without TLS: traffic is readable on the network; set --tls-cert and --tls-key", "role", role, "addr", addr)
	}
}
