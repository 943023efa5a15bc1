package blob

import "testing"

func TestIsLoopback(t *testing.T) {
	for ep, want := range map[string]bool{
		"127.0.0.1:9000": true, "127.8.9.10:9000": true, "[::1]:9000": true, "localhost:9000": true, "LOCALHOST:1": true,
		"10.0.0.1:9000": false, "minio:9000": false, "s3.amazonaws.com:443": false, "[2001:db8::1]:9000": false, "localhost.example.com:9000": false,
	} {
		if got := isLoopback(ep); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", ep, got, want)
		}
	}
}
