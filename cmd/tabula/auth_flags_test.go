package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --auth-server-token-file: the token must authenticate, as a superuser
// user; the role then sends it on its calls to other servers.
func TestServerTokenFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens := write("tokens", "srv-token-0123456789abcdef tabula-server\nbob-token-0123456789abcdef bob\n")
	for _, c := range []struct {
		token, want string // want: "" for success, else a part of the error
	}{
		{"srv-token-0123456789abcdef\n", ""},
		{"bob-token-0123456789abcdef", "not an --auth-superuser user"},
		{"unknown-token-0123456789abcdef", "does not authenticate"},
	} {
		f := serverAuthFlags{tokenFile: tokens, superusers: []string{"user:tabula-server"}, serverTokenFile: write("server-token", c.token)}
		cfg, err := f.config(slog.New(slog.DiscardHandler), "tabletserver", "127.0.0.1:0")
		switch {
		case c.want == "" && (err != nil || cfg.ServerToken != strings.TrimSpace(c.token)):
			t.Errorf("token %q: config %+v, %v", c.token, cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("token %q: %v, want an error saying %q", c.token, err, c.want)
		}
	}
}
