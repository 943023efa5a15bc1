package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"
)

func TestLoopbackAndPlaintextWarning(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8086": true, "127.0.0.2:1": true, "[::1]:8086": true, "localhost:8086": true,
		"[::]:8086": false, "0.0.0.0:8086": false, ":8086": false, "10.0.0.5:8086": false, "db.example:1": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	WarnPlaintext(log, "dev", "127.0.0.1:8086", nil)
	WarnPlaintext(log, "dev", "[::]:8086", &tls.Config{})
	if buf.Len() != 0 {
		t.Fatalf("warned for loopback or TLS: %s", buf.String())
	}
	WarnPlaintext(log, "tabletserver", "[::]:8086", nil)
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "role=tabletserver") {
		t.Fatalf("no warning for plaintext on every interface: %q", buf.String())
	}
}

func TestEnvClient(t *testing.T) {
	t.Setenv(EnvCA, "")
	t.Setenv(EnvCert, "")
	t.Setenv(EnvKey, "")
	if c, err := ClientFromEnv(); c != nil || err != nil {
		t.Fatalf("no variables: %v, %v; want plaintext", c, err)
	}
	t.Setenv(EnvCA, "/does/not/exist")
	if _, err := ClientFromEnv(); err == nil {
		t.Fatal("a missing CA file accepted")
	}
}
