// Package auth establishes who calls a Tabula server: a principal and its
// groups, from the caller's mutual-TLS client certificate or from a bearer
// token in the "authorization" request metadata — a JWT verified against
// configured keys, or an opaque token looked up in a static token file.
//
// Rules (Authenticator.Authenticate):
//   - A bearer token, if present, decides: a valid one gives its identity,
//     an invalid, expired or unknown one is refused (UNAUTHENTICATED) —
//     even if the connection also has a client certificate.
//   - Otherwise a client certificate verified by the server's TLS
//     configuration (mTLS) gives subject CN as the principal (or, without
//     a CN, the first URI, DNS or e-mail SAN) and the subject's
//     organizational units as groups (security/certs makes them so).
//   - Otherwise the call is UNAUTHENTICATED.
//   - A caller whose principal is one of Config.Forwarders (the servers of
//     a cluster: a gateway forwarding a client's request) may state the
//     identity it acts for in the metadata keys ForwardedPrincipalKey and
//     ForwardedGroupsKey; anyone else's statements are ignored.
//
// The package knows no table and no RPC; security/guard decides what an
// identity may do.
package auth

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Identity is an authenticated caller.
type Identity struct {
	Principal string
	Groups    []string
	// Method says how it was established: "cert", "jwt", "token",
	// "forwarded" (stated by a forwarder) or "none" (authentication off).
	Method string
}

type identityKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity NewContext stored; ok is false if none.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Metadata keys.
const (
	// AuthorizationKey carries "Bearer <token>".
	AuthorizationKey = "authorization"
	// ForwardedPrincipalKey and ForwardedGroupsKey (comma-separated)
	// state, from a forwarder, the identity a forwarded call acts for.
	ForwardedPrincipalKey = "tabula-forwarded-principal"
	ForwardedGroupsKey    = "tabula-forwarded-groups"
)

// Config configures an Authenticator. At least one way in (a JWT key, a
// token file, or client certificates: AllowCerts) must be configured.
type Config struct {
	// JWTKeyFiles are PEM public keys (RSA, ECDSA or Ed25519; "PUBLIC
	// KEY" or "CERTIFICATE" blocks, several per file allowed) that verify
	// JWTs signed with RS*/PS*, ES* or EdDSA.
	JWTKeyFiles []string
	// JWTSecretFiles hold HMAC secrets (the file's bytes, a trailing
	// newline trimmed) that verify HS256/384/512 JWTs.
	JWTSecretFiles []string
	// JWTIssuer and JWTAudience, when set, must match the token's iss
	// and one of its aud.
	JWTIssuer, JWTAudience string
	// JWTGroupsClaim names the claim holding the groups (a list of
	// strings or one string); default "groups". The principal is "sub".
	JWTGroupsClaim string
	// TokenFile is a static token file (see ParseTokenFile). It is read
	// again when it changes (checked at most once per TokenFileCheck).
	TokenFile string
	// TokenFileCheck is how often the token file's modification time is
	// checked; default 2 s.
	TokenFileCheck time.Duration
	// AllowCerts accepts verified client certificates.
	AllowCerts bool
	// Forwarders are principals that may state the identity they act for.
	Forwarders []string
	// Now is the clock of token expiry; default time.Now.
	Now func() time.Time
}

// Authenticator checks credentials. It is safe for concurrent use.
type Authenticator struct {
	cfg        Config
	jwtKeys    []crypto.PublicKey
	jwtSecrets [][]byte
	parser     *jwt.Parser
	tokens     *tokenFile
	forwarders map[string]bool
}

// New returns an Authenticator; it reads the key and token files once
// (errors name the file).
func New(cfg Config) (*Authenticator, error) {
	if cfg.JWTGroupsClaim == "" {
		cfg.JWTGroupsClaim = "groups"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TokenFileCheck <= 0 {
		cfg.TokenFileCheck = 2 * time.Second
	}
	a := &Authenticator{cfg: cfg, forwarders: map[string]bool{}}
	for _, f := range cfg.Forwarders {
		a.forwarders[f] = true
	}
	for _, f := range cfg.JWTKeyFiles {
		keys, err := readPublicKeys(f)
		if err != nil {
			return nil, err
		}
		a.jwtKeys = append(a.jwtKeys, keys...)
	}
	for _, f := range cfg.JWTSecretFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("auth: JWT secret: %w", err)
		}
		b = []byte(strings.TrimRight(string(b), "\r\n"))
		if len(b) < 32 {
			return nil, fmt.Errorf("auth: JWT secret %s is %d bytes; at least 32 are needed", f, len(b))
		}
		a.jwtSecrets = append(a.jwtSecrets, b)
	}
	var methods []string
	if len(a.jwtKeys) > 0 {
		methods = append(methods, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
	}
	if len(a.jwtSecrets) > 0 {
		methods = append(methods, "HS256", "HS384", "HS512")
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithTimeFunc(cfg.Now), jwt.WithLeeway(30 * time.Second)}
	if cfg.JWTIssuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.JWTIssuer))
	}
	if cfg.JWTAudience != "" {
		opts = append(opts, jwt.WithAudience(cfg.JWTAudience))
	}
	a.parser = jwt.NewParser(opts...)
	if cfg.TokenFile != "" {
		tf, err := openTokenFile(cfg.TokenFile, cfg.TokenFileCheck)
		if err != nil {
			return nil, err
		}
		a.tokens = tf
	}
	if len(methods) == 0 && a.tokens == nil && !cfg.AllowCerts {
		return nil, errors.New("auth: authentication is on but no way in is configured (a JWT key or secret, a token file, or client certificates)")
	}
	return a, nil
}

// readPublicKeys parses every PUBLIC KEY or CERTIFICATE block of a PEM file.
func readPublicKeys(file string) ([]crypto.PublicKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth: JWT key: %w", err)
	}
	var keys []crypto.PublicKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("auth: JWT key %s: %w", file, err)
			}
			keys = append(keys, k)
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("auth: JWT key %s: %w", file, err)
			}
			keys = append(keys, c.PublicKey)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("auth: JWT key %s holds no PEM PUBLIC KEY or CERTIFICATE block", file)
	}
	return keys, nil
}

// Authenticate returns the caller's identity, or an error with gRPC code
// UNAUTHENTICATED saying why (never echoing the token).
func (a *Authenticator) Authenticate(ctx context.Context) (Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	id, err := a.authenticate(ctx, md)
	if err != nil {
		return Identity{}, err
	}
	if a.forwarders[id.Principal] {
		if p := first(md, ForwardedPrincipalKey); p != "" {
			fid := Identity{Principal: p, Method: "forwarded"}
			if g := first(md, ForwardedGroupsKey); g != "" {
				fid.Groups = strings.Split(g, ",")
			}
			return fid, nil
		}
	}
	return id, nil
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (a *Authenticator) authenticate(ctx context.Context, md metadata.MD) (Identity, error) {
	if h := md.Get(AuthorizationKey); len(h) > 0 {
		if len(h) > 1 {
			return Identity{}, status.Error(codes.Unauthenticated, "more than one authorization header")
		}
		scheme, token, ok := strings.Cut(h[0], " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
			return Identity{}, status.Error(codes.Unauthenticated, `authorization must be "Bearer <token>"`)
		}
		return a.verifyToken(strings.TrimSpace(token))
	}
	if a.cfg.AllowCerts {
		if id, ok := certIdentity(ctx); ok {
			return id, nil
		}
	}
	return Identity{}, status.Error(codes.Unauthenticated, "no credentials: send a bearer token (authorization metadata) or a client certificate")
}

// verifyToken checks a bearer token: a JWT (three dot-separated parts)
// against the keys, anything else against the token file.
func (a *Authenticator) verifyToken(token string) (Identity, error) {
	if strings.Count(token, ".") == 2 && (len(a.jwtKeys) > 0 || len(a.jwtSecrets) > 0) {
		return a.verifyJWT(token)
	}
	if a.tokens != nil {
		if id, ok := a.tokens.lookup(token); ok {
			return id, nil
		}
	}
	return Identity{}, status.Error(codes.Unauthenticated, "invalid token")
}

func (a *Authenticator) verifyJWT(token string) (Identity, error) {
	claims := jwt.MapClaims{}
	_, err := a.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		var keys []jwt.VerificationKey
		if _, hmac := t.Method.(*jwt.SigningMethodHMAC); hmac {
			for _, s := range a.jwtSecrets {
				keys = append(keys, s)
			}
		} else {
			for _, k := range a.jwtKeys {
				keys = append(keys, k)
			}
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	})
	if err != nil {
		return Identity{}, status.Errorf(codes.Unauthenticated, "invalid token: %v", err)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return Identity{}, status.Error(codes.Unauthenticated, "invalid token: no sub claim (the principal)")
	}
	id := Identity{Principal: sub, Method: "jwt"}
	switch g := claims[a.cfg.JWTGroupsClaim].(type) {
	case string:
		id.Groups = []string{g}
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	return id, nil
}

// certIdentity reads the verified client certificate of the connection.
func certIdentity(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, false // no certificate, or one the server did not verify
	}
	return CertIdentity(ti.State.VerifiedChains[0][0])
}

// CertIdentity is the identity of a verified client certificate: subject
// CN (else the first URI, DNS or e-mail SAN) and the subject's OUs as
// groups.
func CertIdentity(c *x509.Certificate) (Identity, bool) {
	id := Identity{Principal: c.Subject.CommonName, Groups: c.Subject.OrganizationalUnit, Method: "cert"}
	if id.Principal == "" {
		switch {
		case len(c.URIs) > 0:
			id.Principal = c.URIs[0].String()
		case len(c.DNSNames) > 0:
			id.Principal = c.DNSNames[0]
		case len(c.EmailAddresses) > 0:
			id.Principal = c.EmailAddresses[0]
		}
	}
	return id, id.Principal != ""
}
