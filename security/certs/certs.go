// Package certs makes the X.509 certificates a Tabula deployment needs for
// TLS and mutual TLS: a certificate authority, server certificates (with
// subject alternative names for the hosts they answer on) and client
// certificates whose subject names a principal and its groups.
//
// It is meant for development, tests and small setups (`tabula certs`);
// a production deployment may bring certificates from its own PKI instead,
// as long as they follow the same conventions:
//
//   - a client certificate's subject common name (CN) is the principal;
//   - its organizational units (OU) are the principal's groups.
//
// Keys are ECDSA P-256: fast handshakes, small files. Everything is
// standard library crypto/x509; files are PEM ("CERTIFICATE" and PKCS #8
// "PRIVATE KEY" blocks).
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultValidity is how long a certificate made with a zero validity lasts.
const DefaultValidity = 365 * 24 * time.Hour

// clockSkew backdates NotBefore so a certificate is valid at once on a
// machine whose clock is a little behind the one that made it.
const clockSkew = 5 * time.Minute

// Authority is a certificate authority able to sign server and client
// certificates.
type Authority struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte // Cert, PEM-encoded
}

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed certificate authority named commonName, valid
// for validFor (DefaultValidity if zero).
func NewCA(commonName string, validFor time.Duration) (*Authority, error) {
	if commonName == "" {
		return nil, errors.New("certs: CA common name is empty")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate CA key: %w", err)
	}
	tmpl, err := template(commonName, validFor)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: parse CA: %w", err)
	}
	return &Authority{Cert: cert, Key: key, CertPEM: encodeCert(der)}, nil
}

// LoadCA reads an authority written by WriteFiles (or any PEM CA certificate
// and its PKCS #8, PKCS #1 or SEC 1 private key).
func LoadCA(certFile, keyFile string) (*Authority, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("certs: parse CA %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", certFile)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("certs: CA key in %s cannot sign", keyFile)
	}
	return &Authority{Cert: cert, Key: signer, CertPEM: encodeCert(cert.Raw)}, nil
}

// Pool returns a certificate pool holding only this authority: what a
// server verifying client certificates, or a client verifying servers,
// trusts.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// WriteFiles writes the authority's certificate and key (the key readable
// by its owner only).
func (a *Authority) WriteFiles(certFile, keyFile string) error {
	keyPEM, err := encodeKey(a.Key)
	if err != nil {
		return err
	}
	return (&Pair{CertPEM: a.CertPEM, KeyPEM: keyPEM}).WriteFiles(certFile, keyFile)
}

// Server signs a server certificate for commonName whose subject
// alternative names are localhost, 127.0.0.1, ::1 and hosts (each an IP
// address or a DNS name). It may also be used as a client certificate, so a
// server can present it when it calls another server over mutual TLS; its
// common name is then the principal the other server sees.
func (a *Authority) Server(commonName string, hosts []string, validFor time.Duration) (*Pair, error) {
	if commonName == "" {
		return nil, errors.New("certs: server common name is empty")
	}
	tmpl, err := template(commonName, validFor)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	seen := map[string]bool{}
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		h = strings.TrimSpace(h)
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return a.sign(tmpl)
}

// Client signs a client certificate for principal (the subject's common
// name) in groups (the subject's organizational units; DER encoding sorts
// them, so their order is not kept).
func (a *Authority) Client(principal string, groups []string, validFor time.Duration) (*Pair, error) {
	if principal == "" {
		return nil, errors.New("certs: client principal is empty")
	}
	tmpl, err := template(principal, validFor)
	if err != nil {
		return nil, err
	}
	tmpl.Subject.OrganizationalUnit = append([]string(nil), groups...)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return a.sign(tmpl)
}

func (a *Authority) sign(tmpl *x509.Certificate) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Pair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// TLSCertificate returns the pair as a tls.Certificate (with Leaf set).
func (p *Pair) TLSCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: %w", err)
	}
	return c, nil
}

// Leaf parses the pair's certificate.
func (p *Pair) Leaf() (*x509.Certificate, error) {
	b, _ := pem.Decode(p.CertPEM)
	if b == nil {
		return nil, errors.New("certs: no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// WriteFiles writes the certificate (mode 0644) and the key (mode 0600).
// Each file is written to a temporary name and renamed into place, so a
// server reloading them never reads half a file.
func (p *Pair) WriteFiles(certFile, keyFile string) error {
	if err := writeAtomic(keyFile, p.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, p.CertPEM, 0o644)
}

// File names Generate writes into a directory.
const (
	CAFile          = "ca.crt"
	CAKeyFile       = "ca.key"
	ServerFile      = "server.crt"
	ServerKeyFile   = "server.key"
	clientSuffix    = ".crt"
	clientKeySuffix = ".key"
)

// ClientFiles returns the certificate and key file names Generate uses for
// principal's client certificate in dir.
func ClientFiles(dir, principal string) (certFile, keyFile string) {
	base := filepath.Join(dir, "client-"+principal)
	return base + clientSuffix, base + clientKeySuffix
}

// Spec says what Generate makes.
type Spec struct {
	// ServerName is the server certificate's common name: the principal
	// servers present to each other ("tabula-server" if empty).
	ServerName string
	// Hosts are the server certificate's extra subject alternative names
	// (localhost, 127.0.0.1 and ::1 are always there).
	Hosts []string
	// Clients are the client certificates to make.
	Clients []ClientSpec
	// ValidFor is each certificate's validity (DefaultValidity if zero).
	ValidFor time.Duration
}

// ClientSpec is one client certificate: a principal and its groups.
type ClientSpec struct {
	Principal string
	Groups    []string
}

// Generate writes a development certificate set into dir: the authority
// (ca.crt, ca.key), reused if dir already holds one so certificates made
// earlier stay valid; a server certificate (server.crt, server.key); and one
// client certificate per spec.Clients (client-<principal>.crt/.key). It
// returns the authority.
func Generate(dir string, spec Spec) (*Authority, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	caCert, caKey := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	var ca *Authority
	if _, err := os.Stat(caCert); err == nil {
		if ca, err = LoadCA(caCert, caKey); err != nil {
			return nil, err
		}
	} else {
		if ca, err = NewCA("Tabula development CA", spec.ValidFor); err != nil {
			return nil, err
		}
		if err := ca.WriteFiles(caCert, caKey); err != nil {
			return nil, err
		}
	}
	name := spec.ServerName
	if name == "" {
		name = "tabula-server"
	}
	srv, err := ca.Server(name, spec.Hosts, spec.ValidFor)
	if err != nil {
		return nil, err
	}
	if err := srv.WriteFiles(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile)); err != nil {
		return nil, err
	}
	for _, c := range spec.Clients {
		if strings.ContainsAny(c.Principal, `/\`) || c.Principal == "." || c.Principal == ".." {
			return nil, fmt.Errorf("certs: principal %q cannot name a file", c.Principal)
		}
		p, err := ca.Client(c.Principal, c.Groups, spec.ValidFor)
		if err != nil {
			return nil, err
		}
		cf, kf := ClientFiles(dir, c.Principal)
		if err := p.WriteFiles(cf, kf); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

func template(commonName string, validFor time.Duration) (*x509.Certificate, error) {
	if validFor < 0 {
		return nil, fmt.Errorf("certs: validity %v is negative", validFor)
	}
	if validFor == 0 {
		validFor = DefaultValidity
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validFor),
	}, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certs: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("certs: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
