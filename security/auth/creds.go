package auth

import (
	"context"
	"os"
)

// TokenEnv is the environment variable the CLI and the clients read a
// bearer token from when no flag gives one.
const TokenEnv = "TABULA_TOKEN"

// TokenFromEnv returns flagValue, or $TABULA_TOKEN when it is empty.
func TokenFromEnv(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(TokenEnv)
}

// BearerToken is a gRPC credentials.PerRPCCredentials sending a bearer
// token with every call (grpc.WithPerRPCCredentials). Tabula servers accept
// it over plaintext too, for tabula dev on loopback; on a network use it
// with TLS (security/tlsconfig), or the token can be read off the wire.
type BearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{AuthorizationKey: "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (t BearerToken) RequireTransportSecurity() bool { return false }
