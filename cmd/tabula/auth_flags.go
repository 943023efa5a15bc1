package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/cluster"
)

// serverAuthFlags are the authentication and authorization flags of every
// server role (dev, master, tabletserver, worker). Authentication is on
// when --auth or any way in (a token file, a JWT key or secret) is given;
// verified mTLS client certificates are then accepted too.
type serverAuthFlags struct {
	on                             bool
	tokenFile                      string
	jwtKeys, jwtSecrets            []string
	jwtIssuer, jwtAudience, groups string
	superusers                     []string
	cacheTTL                       time.Duration
	serverTokenFile                string
}

func (a *serverAuthFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&a.on, "auth", false, "require credentials on every RPC (a client certificate with --tls-client-ca, or a token) and enforce the tables' grants; implied by --auth-token-file, --auth-jwt-key and --auth-jwt-secret")
	fs.StringVar(&a.tokenFile, "auth-token-file", "", `static token file, one "<token> <principal> [group,...]" a line; re-read when it changes`)
	fs.StringSliceVar(&a.jwtKeys, "auth-jwt-key", nil, "PEM public key (RSA, ECDSA, Ed25519) or certificate verifying JWT bearer tokens (repeatable)")
	fs.StringSliceVar(&a.jwtSecrets, "auth-jwt-secret", nil, "file holding an HMAC secret (32 bytes or more) verifying HS256/384/512 JWTs (repeatable)")
	fs.StringVar(&a.jwtIssuer, "auth-jwt-issuer", "", "required iss of JWTs (unchecked when empty)")
	fs.StringVar(&a.jwtAudience, "auth-jwt-audience", "", "required aud of JWTs (unchecked when empty)")
	fs.StringVar(&a.groups, "auth-jwt-groups-claim", "groups", "JWT claim listing the principal's groups (the principal is sub)")
	fs.StringSliceVar(&a.superusers, "auth-superuser", nil, "member allowed everything: user:NAME or group:NAME (repeatable); include the servers' certificate names (CN) in a cluster")
	fs.DurationVar(&a.cacheTTL, "auth-cache-ttl", 0, "how long a server keeps a table's grants (a grant or revocation takes effect within it; default 1s)")
	fs.StringVar(&a.serverTokenFile, "auth-server-token-file", "", "file holding the token this server sends on its calls to the cluster's other servers, for clusters without mutual TLS; its principal must be an --auth-superuser user")
}

func (a *serverAuthFlags) enabled() bool {
	return a.on || a.tokenFile != "" || len(a.jwtKeys) > 0 || len(a.jwtSecrets) > 0
}

// config returns the role's AuthConfig, nil when authentication is off
// (and then a warning if addr is not a loopback address).
func (a *serverAuthFlags) config(log *slog.Logger, role, addr string) (*cluster.AuthConfig, error) {
	if !a.enabled() {
		if !tlsconfig.Loopback(addr) {
			log.Warn("authentication is off on a non-loopback address: anyone who reaches it may read, write and delete every table (see --auth)", "role", role, "addr", addr)
		}
		return nil, nil
	}
	var forwarders []string
	for _, m := range a.superusers {
		if err := acl.ValidateMember(m); err != nil {
			return nil, fmt.Errorf("--auth-superuser: %w", err)
		}
		if p, ok := strings.CutPrefix(m, acl.UserPrefix); ok {
			forwarders = append(forwarders, p)
		}
	}
	au, err := auth.New(auth.Config{
		JWTKeyFiles: a.jwtKeys, JWTSecretFiles: a.jwtSecrets,
		JWTIssuer: a.jwtIssuer, JWTAudience: a.jwtAudience, JWTGroupsClaim: a.groups,
		TokenFile: a.tokenFile, AllowCerts: true, Forwarders: forwarders,
	})
	if err != nil {
		return nil, fmt.Errorf("--auth-*: %w", err)
	}
	if len(a.superusers) == 0 {
		log.Warn("authentication is on but no --auth-superuser is given: nobody can create tables or grant rights", "role", role)
	}
	var serverToken string
	if a.serverTokenFile != "" {
		b, err := os.ReadFile(a.serverTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--auth-server-token-file: %w", err)
		}
		serverToken = strings.TrimSpace(string(b))
		// The other servers must take it for a superuser's: check it now
		// rather than have every call between servers refused.
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(auth.AuthorizationKey, "Bearer "+serverToken))
		id, err := au.Authenticate(ctx)
		if err != nil {
			return nil, fmt.Errorf("--auth-server-token-file %s: the token does not authenticate: %v", a.serverTokenFile, status.Convert(err).Message())
		}
		if !slices.Contains(forwarders, id.Principal) {
			return nil, fmt.Errorf("--auth-server-token-file %s: its principal %s is not an --auth-superuser user", a.serverTokenFile, id.Principal)
		}
	}
	log.Info("authentication on", "role", role, "token_file", a.tokenFile != "", "jwt_keys", len(a.jwtKeys)+len(a.jwtSecrets), "superusers", a.superusers)
	return &cluster.AuthConfig{Authenticator: au, Superusers: a.superusers, CacheTTL: a.cacheTTL, ServerToken: serverToken}, nil
}
