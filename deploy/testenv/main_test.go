package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/security/tlsconfig"
)

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || p > 65535 || seen[p] {
			t.Fatalf("freePorts(5) = %v: want 5 distinct valid ports", ports)
		}
		seen[p] = true
	}
}

func TestWaitHTTP(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Unhealthy for the first two polls, as a server still starting.
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := waitHTTP(srv.URL, 10*time.Second, tlsconfig.Files{}); err != nil {
		t.Fatalf("waitHTTP on a server that becomes healthy: %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("waitHTTP polled %d times, want 3", calls.Load())
	}
}

func TestWaitHTTPTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	err := waitHTTP(srv.URL, 300*time.Millisecond, tlsconfig.Files{})
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("waitHTTP on an unhealthy server = %v, want a timeout naming the last status", err)
	}
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"free-ports"}, {"free-ports", "x"}, {"wait-http", "u"}, {"wait-http", "u", "soon"}} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) succeeded, want a usage error", args)
		}
	}
}

// TestWaitHTTPSWithCA: an https URL is verified with the CA given, and
// fails without it.
func TestWaitHTTPSWithCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitHTTP(srv.URL, 10*time.Second, tlsconfig.Files{CAFile: ca}); err != nil {
		t.Fatal(err)
	}
	if err := waitHTTP(srv.URL, 300*time.Millisecond, tlsconfig.Files{}); err == nil {
		t.Fatal("https without the CA succeeded")
	}
}

// TestMakeCerts: the certificate set MinIO reads, signed by the CA written
// beside it.
func TestMakeCerts(t *testing.T) {
	dir := t.TempDir()
	if err := makeCerts(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := tlsconfig.Server(tlsconfig.Files{CertFile: filepath.Join(dir, "minio", "public.crt"), KeyFile: filepath.Join(dir, "minio", "private.key")})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	hs.TLS = srv
	hs.StartTLS()
	defer hs.Close()
	if err := waitHTTP(hs.URL, 10*time.Second, tlsconfig.Files{CAFile: filepath.Join(dir, "ca.crt")}); err != nil {
		t.Fatal(err)
	}
}
