package guard

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tabuladb/tabula/security/auth"
)

// TestTerminalStatesNoIdentity: a guard states the caller's identity to
// the servers its service calls (the gateway's forwarding), unless it is
// Terminal (a master, whose calls are the control plane's own).
func TestTerminalStatesNoIdentity(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice-token-0123456789 alice readers\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(auth.AuthorizationKey, "Bearer alice-token-0123456789"))
	for _, terminal := range []bool{false, true} {
		g, err := New(Config{Authenticator: a, Superusers: []string{"user:root"}, Tables: NoTables{}, Terminal: terminal})
		if err != nil {
			t.Fatal(err)
		}
		var stated []string
		handler := func(ctx context.Context, _ any) (any, error) {
			if id, ok := auth.FromContext(ctx); !ok || id.Principal != "alice" {
				t.Errorf("terminal %v: the service sees %+v", terminal, id)
			}
			out, _ := metadata.FromOutgoingContext(ctx)
			stated = out.Get(auth.ForwardedPrincipalKey)
			return nil, nil
		}
		// PingAndWarm: any authenticated caller.
		if _, err := g.UnaryInterceptor()(in, nil, &grpc.UnaryServerInfo{FullMethod: dataPrefix + "PingAndWarm"}, handler); err != nil {
			t.Fatal(err)
		}
		if want := !terminal; (len(stated) == 1 && stated[0] == "alice") != want {
			t.Errorf("terminal %v: outgoing forwarded principal %v", terminal, stated)
		}
	}
}
