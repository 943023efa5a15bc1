// Package tlsconfig builds the *tls.Config of Tabula's servers and clients
// from PEM files, and reloads certificates when those files change, so a
// certificate is rotated by replacing its files: no restart.
//
// A server (Server) presents its certificate and key; given a client CA it
// requires and verifies client certificates (mutual TLS). A client
// (Client) verifies servers against a CA (the system roots without one)
// and, given a certificate and key, presents them (for mutual TLS).
//
// Reloading: before each handshake the files' modification time, size and
// identity are checked (a stat each: handshakes are rare, connections are
// long-lived), and the files are read again when any changed. A file
// replaced by a certificate that does not parse, or a key that does not
// match, leaves the last good certificate in use and the error is logged
// through the given logger. Write new files with rename (as package certs
// does) so no handshake sees half a file; replace the key before the
// certificate.
//
// The package imports nothing of Tabula's engine.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names one side's PEM files.
type Files struct {
	// CertFile and KeyFile are this side's certificate (chain) and key.
	// Required for a server; optional for a client (needed when the
	// server requires client certificates).
	CertFile, KeyFile string
	// CAFile holds the CA certificates this side verifies its peer with:
	// for a server, the client CA (setting it requires client
	// certificates); for a client, the roots that sign servers'
	// certificates (the system roots when empty).
	CAFile string
	// ClientCertOptional, for a server with a client CA, accepts clients
	// that present no certificate (they must then authenticate with a
	// bearer token); a certificate that is presented is still verified
	// against CAFile, so a wrong or expired one fails the handshake.
	ClientCertOptional bool
	// Logger receives reload failures; default slog.Default().
	Logger *slog.Logger
}

// Enabled reports whether the files configure TLS for a server (a
// certificate is named).
func (f Files) Enabled() bool { return f.CertFile != "" }

// ServerProtocols are the ALPN protocols a server offers: HTTP/2 (gRPC, and
// the ops port's HTTP/2) and HTTP/1.1 (the ops port).
var ServerProtocols = []string{"h2", "http/1.1"}

// Server returns the configuration of a TLS server presenting CertFile and
// KeyFile, requiring and verifying client certificates signed by CAFile
// when it is set (verifying them when given, with ClientCertOptional).
// Both reload when their files change. It fails when a file is missing or
// does not parse, or when CertFile or KeyFile is empty.
func Server(f Files) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("tlsconfig: a server needs both a certificate (--tls-cert) and a key (--tls-key)")
	}
	kp, err := newKeyPair(f.CertFile, f.KeyFile, f.logger())
	if err != nil {
		return nil, err
	}
	var ca *caPool
	if f.CAFile != "" {
		if ca, err = newCAPool(f.CAFile, f.logger()); err != nil {
			return nil, err
		}
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: ServerProtocols}
	// GetConfigForClient (rather than GetCertificate alone) so the client
	// CA pool reloads too; it returns a fresh config carrying the current
	// certificate and pool.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: ServerProtocols}
		cert, err := kp.get()
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{*cert}
		if ca != nil {
			pool, err := ca.get()
			if err != nil {
				return nil, err
			}
			c.ClientCAs = pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
			if f.ClientCertOptional {
				c.ClientAuth = tls.VerifyClientCertIfGiven
			}
		}
		return c, nil
	}
	return base, nil
}

// Client returns the configuration of a TLS client verifying servers
// against CAFile (the system roots when empty) and presenting CertFile and
// KeyFile when set (reloaded when they change). Setting only one of
// CertFile and KeyFile is an error.
func Client(f Files) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		kp, err := newKeyPair(f.CertFile, f.KeyFile, f.logger())
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("tlsconfig: a client certificate needs both --tls-cert and --tls-key")
	}
	return c, nil
}

func (f Files) logger() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}

// stamp identifies a version of a file: when any part changes, the file is
// read again.
type stamp struct {
	info os.FileInfo
}

func statFile(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{info: fi}, nil
}

func (s stamp) same(o stamp) bool {
	return s.info != nil && o.info != nil && s.info.ModTime().Equal(o.info.ModTime()) &&
		s.info.Size() == o.info.Size() && os.SameFile(s.info, o.info)
}

// keyPair is a certificate and key read from files, reread when they
// change.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu                  sync.Mutex
	certStamp, keyStamp stamp
	cert                *tls.Certificate
}

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	k := &keyPair{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := k.get(); err != nil {
		return nil, err
	}
	return k, nil
}

// get returns the current certificate, reading the files again if they
// changed since the last read. Once one load succeeded, a failing reload
// keeps the old certificate (and is logged).
func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cs, cerr := statFile(k.certFile)
	ks, kerr := statFile(k.keyFile)
	if cerr == nil && kerr == nil && k.cert != nil && cs.same(k.certStamp) && ks.same(k.keyStamp) {
		return k.cert, nil
	}
	err := errors.Join(cerr, kerr)
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.LoadX509KeyPair(k.certFile, k.keyFile)
	}
	if err == nil && cert.Leaf == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		err = fmt.Errorf("tlsconfig: loading %s and %s: %w", k.certFile, k.keyFile, err)
		if k.cert == nil {
			return nil, err
		}
		k.log.Warn("certificate reload failed; keeping the previous certificate", "cert", k.certFile, "key", k.keyFile, "err", err)
		// Do not retry on every handshake until the files change again.
		k.certStamp, k.keyStamp = cs, ks
		return k.cert, nil
	}
	if k.cert != nil {
		k.log.Info("certificate reloaded", "cert", k.certFile, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	k.cert, k.certStamp, k.keyStamp = &cert, cs, ks
	return k.cert, nil
}

// caPool is a CA bundle read from a file, reread when it changes.
type caPool struct {
	file string
	log  *slog.Logger

	mu    sync.Mutex
	stamp stamp
	pool  *x509.CertPool
}

func newCAPool(file string, log *slog.Logger) (*caPool, error) {
	c := &caPool{file: file, log: log}
	if _, err := c.get(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *caPool) get() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := statFile(c.file)
	if err == nil && c.pool != nil && st.same(c.stamp) {
		return c.pool, nil
	}
	var pool *x509.CertPool
	if err == nil {
		pool, err = readPool(c.file)
	}
	if err != nil {
		if c.pool == nil {
			return nil, err
		}
		c.log.Warn("CA reload failed; keeping the previous CA certificates", "ca", c.file, "err", err)
		c.stamp = st
		return c.pool, nil
	}
	if c.pool != nil {
		c.log.Info("CA certificates reloaded", "ca", c.file)
	}
	c.pool, c.stamp = pool, st
	return c.pool, nil
}

// readPool reads a PEM bundle of CA certificates.
func readPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: reading CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsconfig: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Role is the TLS of a server role: Server for its listeners (gRPC and the
// HTTP ops port) and Client for the calls it makes to other servers. A nil
// config means plaintext.
type Role struct {
	Server, Client *tls.Config
}

// RoleFiles are a role's TLS flags.
type RoleFiles struct {
	// CertFile and KeyFile (--tls-cert, --tls-key) are the role's
	// certificate: it serves with it and presents it to other servers.
	CertFile, KeyFile string
	// ClientCAFile (--tls-client-ca) requires client certificates signed
	// by it on the role's listeners.
	ClientCAFile string
	// CAFile (--tls-ca) is what the role verifies other servers with;
	// default ClientCAFile (one CA signs the whole cluster), else the
	// system roots.
	CAFile string
	// ClientCertOptional (--tls-client-cert-optional) lets clients
	// without a certificate connect to a role with ClientCAFile: callers
	// with tokens only, while the servers still present and verify
	// certificates among themselves (Files.ClientCertOptional).
	ClientCertOptional bool
	Logger             *slog.Logger
}

// ForRole returns the role's TLS: plaintext (the zero Role) when no
// certificate is named; otherwise a server config from CertFile, KeyFile
// and ClientCAFile, and a client config presenting the same certificate
// and trusting CAFile (or ClientCAFile). It fails when a CA is named
// without a certificate, or a file does not load.
func ForRole(f RoleFiles) (Role, error) {
	if f.CertFile == "" && f.KeyFile == "" {
		if f.ClientCAFile != "" {
			return Role{}, errors.New("tlsconfig: --tls-client-ca needs --tls-cert and --tls-key")
		}
		return Role{}, nil
	}
	if f.ClientCertOptional && f.ClientCAFile == "" {
		return Role{}, errors.New("tlsconfig: --tls-client-cert-optional needs --tls-client-ca (without it no client certificate is asked for)")
	}
	srv, err := Server(Files{CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: f.ClientCAFile, ClientCertOptional: f.ClientCertOptional, Logger: f.Logger})
	if err != nil {
		return Role{}, err
	}
	ca := f.CAFile
	if ca == "" {
		ca = f.ClientCAFile
	}
	cli, err := Client(Files{CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: ca, Logger: f.Logger})
	if err != nil {
		return Role{}, err
	}
	return Role{Server: srv, Client: cli}, nil
}
