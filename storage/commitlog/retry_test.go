package commitlog

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
)

// The package's other tests inject Put failures that must fail the log at
// once: no retry window unless a test sets one.
func init() { objectFlushRetryFor = 0 }

// withFlushRetry sets the object log's retry window for one test.
func withFlushRetry(t *testing.T, d time.Duration) {
	old, oldBackoff := objectFlushRetryFor, objectFlushBackoff
	objectFlushRetryFor, objectFlushBackoff = d, time.Millisecond
	t.Cleanup(func() { objectFlushRetryFor, objectFlushBackoff = old, oldBackoff })
}

// TestObjectLogRidesOutStoreOutage is the campaign's MinIO restart (#15):
// a log object's write failing for a moment (the store restarting) failed
// the log for good, and with it every tablet of the server, which kept
// answering UNAVAILABLE — METADATA's tablet among them, so the whole
// cluster stalled. Now the write is retried for a few seconds.
func TestObjectLogRidesOutStoreOutage(t *testing.T) {
	withFlushRetry(t, 5*time.Second)
	store := &faultyStore{Store: blob.NewMemory(), fail: func(n int) bool { return n >= 2 && n <= 4 }}
	l := openLog(t, Options{Store: store, Prefix: "logs"})
	recs := records(21, 3)
	pos := writeAll(t, l, recs)
	select {
	case <-l.Failed():
		t.Fatal("the log failed after a short store outage")
	default:
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if store.puts != 6 {
		t.Fatalf("%d PUTs, want 6 (3 records, 3 failed attempts)", store.puts)
	}
	got, _, err := replayAll(t, Options{Store: store, Prefix: "logs"}, pos[0])
	if err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, got, recs, pos)
}

// TestFailedSignalled: a flush that gives up closes Failed, which a tablet
// server watches to stop (so the master recovers its tablets) instead of
// serving errors forever.
func TestFailedSignalled(t *testing.T) {
	for _, concurrency := range []int{1, 2} {
		t.Run(fmt.Sprintf("flushes-in-flight-%d", concurrency), func(t *testing.T) {
			testFailedSignalled(t, concurrency)
		})
	}
}

func testFailedSignalled(t *testing.T, concurrency int) {
	store := &faultyStore{Store: blob.NewMemory(), fail: func(n int) bool { return true }}
	l := openLog(t, Options{Store: store, Prefix: "logs", FlushConcurrency: concurrency})
	select {
	case <-l.Failed():
		t.Fatal("Failed closed before any flush")
	default:
	}
	if err := l.Append(records(22, 1)[0]).Wait(context.Background()); !errors.Is(err, errInjected) {
		t.Fatalf("Wait = %v, want the PUT error", err)
	}
	select {
	case <-l.Failed():
	default:
		t.Fatal("Failed not closed after a failed flush")
	}
}
