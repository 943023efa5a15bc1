package blob

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// notInitialized is MinIO's answer while it starts.
const notInitialized = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>XMinioServerNotInitialized</Code><Message>Server not initialized yet, please try again.</Message><Resource>/bkt</Resource><RequestId>1</RequestId><HostId>h</HostId></Error>`

// startingStore is an S3 endpoint that answers every request with MinIO's
// "not initialized" 503 until ready is set, then says bucket bkt exists.
func startingStore(t *testing.T, ready *atomic.Bool, requests *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !ready.Load() {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(notInitialized))
			return
		}
		if _, ok := r.URL.Query()["location"]; ok {
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">us-east-1</LocationConstraint>`))
			return
		}
		w.WriteHeader(http.StatusOK) // HEAD /bkt: the bucket exists
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestS3WaitsForAStartingStore: NewS3 against a store that says it is
// still starting tries again until it is up, and gives up with the
// store's error after s3StartupWait.
func TestS3WaitsForAStartingStore(t *testing.T) {
	var ready atomic.Bool
	var requests atomic.Int64
	ep := startingStore(t, &ready, &requests)
	time.AfterFunc(300*time.Millisecond, func() { ready.Store(true) })
	if _, err := NewS3(context.Background(), S3Config{Endpoint: ep, Bucket: "bkt", AccessKey: "k", SecretKey: "s"}); err != nil {
		t.Fatalf("NewS3 against a store that came up after 300 ms: %v", err)
	}
	if n := requests.Load(); n < 3 {
		t.Fatalf("%d requests: the starting store was not asked again", n)
	}

	defer func(w time.Duration) { s3StartupWait = w }(s3StartupWait)
	s3StartupWait = 200 * time.Millisecond
	var never atomic.Bool
	ep = startingStore(t, &never, &requests)
	start := time.Now()
	_, err := NewS3(context.Background(), S3Config{Endpoint: ep, Bucket: "bkt", AccessKey: "k", SecretKey: "s"})
	if err == nil || !strings.Contains(err.Error(), "not initialized") {
		t.Fatalf("NewS3 against a store that never comes up: %v, want its not-initialized error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("gave up after %v, the wait is %v", d, s3StartupWait)
	}
}
