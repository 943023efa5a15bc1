package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	if err := waitHTTP(srv.URL, 10*time.Second); err != nil {
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
	err := waitHTTP(srv.URL, 300*time.Millisecond)
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
