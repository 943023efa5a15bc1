package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemPublic(t *testing.T, k any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func withToken(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWT(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	secret := []byte("0123456789abcdef0123456789abcdef")
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherEC, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	a, err := New(Config{
		JWTKeyFiles:    []string{writeFile(t, "rsa.pem", pemPublic(t, &rsaKey.PublicKey)+pemPublic(t, &ecKey.PublicKey))},
		JWTSecretFiles: []string{writeFile(t, "secret", string(secret)+"\n")},
		JWTIssuer:      "https://issuer", JWTAudience: "tabula",
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "alice", "groups": []string{"eng", "ops"}, "iss": "https://issuer", "aud": "tabula", "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	cases := []struct {
		name string
		tok  string
		err  string // "" = accepted
	}{
		{"hmac", sign(t, jwt.SigningMethodHS256, secret, good()), ""},
		{"rsa", sign(t, jwt.SigningMethodRS256, rsaKey, good()), ""},
		{"ecdsa", sign(t, jwt.SigningMethodES256, ecKey, good()), ""},
		{"unknown ec key", sign(t, jwt.SigningMethodES256, otherEC, good()), "invalid token"},
		{"wrong secret", sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two byt"), good()), "invalid token"},
		{"expired", sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Hour).Unix())), "expired"},
		{"no exp", sign(t, jwt.SigningMethodHS256, secret, with("exp", nil)), "exp"},
		{"not yet", sign(t, jwt.SigningMethodHS256, secret, with("nbf", now.Add(time.Hour).Unix())), "not valid yet"},
		{"issuer", sign(t, jwt.SigningMethodHS256, secret, with("iss", "https://evil")), "iss"},
		{"audience", sign(t, jwt.SigningMethodHS256, secret, with("aud", "other")), "aud"},
		{"no sub", sign(t, jwt.SigningMethodHS256, secret, with("sub", nil)), "sub"},
		{"none alg", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good()), "invalid token"},
		{"garbage", "a.b.c", "invalid token"},
	}
	for _, c := range cases {
		id, err := a.Authenticate(withToken(c.tok))
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if id.Principal != "alice" || !reflect.DeepEqual(id.Groups, []string{"eng", "ops"}) || id.Method != "jwt" {
				t.Errorf("%s: identity %+v", c.name, id)
			}
			continue
		}
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err %v, want UNAUTHENTICATED with %q", c.name, err, c.err)
		}
	}
}

func TestTokenFile(t *testing.T) {
	path := writeFile(t, "tokens", "# comment\n\nalice-token-0123456789 alice eng,ops\nbob-token-0123456789ab bob\n")
	a, err := New(Config{TokenFile: path, TokenFileCheck: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate(withToken("alice-token-0123456789"))
	if err != nil || id.Principal != "alice" || !reflect.DeepEqual(id.Groups, []string{"eng", "ops"}) {
		t.Fatalf("%+v %v", id, err)
	}
	if _, err := a.Authenticate(withToken("nope-nope-nope-nope")); status.Code(err) != codes.Unauthenticated || strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown token: %v", err)
	}
	// Changed without a restart: bob removed, carol added.
	if err := os.WriteFile(path, []byte("carol-token-0123456789abcdef carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(withToken("bob-token-0123456789ab")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("removed token accepted: %v", err)
	}
	if id, err := a.Authenticate(withToken("carol-token-0123456789abcdef")); err != nil || id.Principal != "carol" {
		t.Fatalf("added token: %+v %v", id, err)
	}
	// A broken file keeps the last good tokens.
	if err := os.WriteFile(path, []byte("short carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(withToken("carol-token-0123456789abcdef")); err != nil {
		t.Fatalf("broken reload dropped tokens: %v", err)
	}
	for _, bad := range []string{"short alice\n", "x-token-0123456789 a\nx-token-0123456789 b\n", "only-a-token-0123456789\n"} {
		if _, err := ParseTokenFile(strings.NewReader(bad)); err == nil || strings.Contains(err.Error(), "token-0123456789") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func certCtx(t *testing.T, md metadata.MD, cert *x509.Certificate) context.Context {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(), md)
	info := credentials.TLSInfo{State: tls.ConnectionState{}}
	if cert != nil {
		info.State.PeerCertificates = []*x509.Certificate{cert}
		info.State.VerifiedChains = [][]*x509.Certificate{{cert}}
	}
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: info})
}

func TestCertsAndForwarding(t *testing.T) {
	tokens := writeFile(t, "tokens", "gateway-token-0123456789 gw\n")
	a, err := New(Config{AllowCerts: true, TokenFile: tokens, Forwarders: []string{"server", "gw"}})
	if err != nil {
		t.Fatal(err)
	}
	alice := &x509.Certificate{Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}}}
	server := &x509.Certificate{Subject: pkix.Name{CommonName: "server"}}
	id, err := a.Authenticate(certCtx(t, metadata.MD{}, alice))
	if err != nil || id.Principal != "alice" || !reflect.DeepEqual(id.Groups, []string{"eng"}) || id.Method != "cert" {
		t.Fatalf("cert: %+v %v", id, err)
	}
	if _, err := a.Authenticate(certCtx(t, metadata.MD{}, nil)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no cert: %v", err)
	}
	// An unverified peer certificate (no verified chain) is not an identity.
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice}}}})
	if _, err := a.Authenticate(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unverified cert: %v", err)
	}
	// A bad token wins over a good certificate.
	if _, err := a.Authenticate(certCtx(t, metadata.Pairs("authorization", "Bearer wrong-wrong-wrong-wrong"), alice)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad token + cert: %v", err)
	}
	fwd := metadata.Pairs(ForwardedPrincipalKey, "carol", ForwardedGroupsKey, "x,y")
	id, err = a.Authenticate(certCtx(t, fwd, server))
	if err != nil || id.Principal != "carol" || !reflect.DeepEqual(id.Groups, []string{"x", "y"}) || id.Method != "forwarded" {
		t.Fatalf("forwarded by a server: %+v %v", id, err)
	}
	fwd.Set("authorization", "Bearer gateway-token-0123456789")
	if id, err = a.Authenticate(metadata.NewIncomingContext(context.Background(), fwd)); err != nil || id.Principal != "carol" {
		t.Fatalf("forwarded by token: %+v %v", id, err)
	}
	// Anyone else's statement is ignored.
	id, err = a.Authenticate(certCtx(t, metadata.Pairs(ForwardedPrincipalKey, "root"), alice))
	if err != nil || id.Principal != "alice" {
		t.Fatalf("statement of a non-forwarder: %+v %v", id, err)
	}
	// Malformed headers.
	for _, h := range []string{"Basic abc", "Bearer ", "token"} {
		if _, err := a.Authenticate(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", h))); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%q: %v", h, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no way in accepted")
	}
	if _, err := New(Config{JWTSecretFiles: []string{writeFile(t, "s", "short")}}); err == nil || !strings.Contains(err.Error(), "32") {
		t.Errorf("short secret: %v", err)
	}
	if _, err := New(Config{JWTKeyFiles: []string{writeFile(t, "k", "not pem")}}); err == nil || !strings.Contains(err.Error(), "PEM") {
		t.Errorf("bad key file: %v", err)
	}
	if _, err := New(Config{TokenFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("missing token file accepted")
	}
}
