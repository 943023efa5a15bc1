//go:build integration

package crashtest

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestKill9ObjectLogInFlight is TestKill9DuringWrites with the commit log
// in MinIO and up to four log objects in flight at once (EnvLogBucket): the
// writer is killed with SIGKILL at random moments, at least 20 times (100
// with TABULA_LONG=1), and after every kill the reopened tablet must hold
// every acknowledged write and no half-applied row mutation. It also
// checks that objects really were written with others in flight (their
// names carry a watermark) and counts the torn tails (gaps) the kills left.
func TestKill9ObjectLogInFlight(t *testing.T) {
	kills := 20
	if os.Getenv("TABULA_LONG") != "" {
		kills = 100
	}
	cfg := blobtest.S3Config(t) // fails without the server; removes the bucket
	t.Setenv(EnvLogBucket, cfg.Bucket)
	ctx := context.Background()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	h := newHistory()
	watermarked := map[string]bool{}
	torn := map[tabletdesc.LogPosition]bool{}
	for run := 1; run <= kills; run++ {
		out := runAndKill(t, dir, int64(run)*1_000_000_000, seed+uint64(run), time.Duration(30+r.IntN(400))*time.Millisecond)
		h.record(t, run, out)
		// What the kill left in the store, before recovery adds to it.
		opts, err := engineLog(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := opts.Store.List(ctx, "log/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if strings.Count(o.Name[strings.LastIndex(o.Name, "/"):], "-") == 1 {
				watermarked[o.Name] = true
			}
		}
		res, err := replayWholeLog(ctx, opts)
		if err != nil {
			t.Fatalf("run %d: replaying the whole log: %v", run, err)
		}
		for _, p := range res.Torn {
			torn[p] = true
		}
		h.verify(t, dir, run)
	}
	t.Logf("%d kills, %d row mutations tried, %d acknowledged; %d log objects written with others in flight, %d torn tails seen",
		kills, h.tries, h.acks, len(watermarked), len(torn))
	if h.acks < kills*10 {
		t.Fatalf("only %d acknowledged writes in %d runs: the writer barely ran", h.acks, kills)
	}
	if len(watermarked) == 0 {
		t.Fatal("no log object was written while another was in flight: the test did not test that")
	}
}

// replayWholeLog replays the log from its start, to see the torn tails the
// kills left. The killed writer truncates segments behind its tablet's redo
// point, and a DELETE it sent just before the kill can still land in MinIO
// after this replay listed the segment: the object then vanishes between
// the listing and the read. Recovery never reads there (it starts at the
// redo point, and only segments wholly before it are deleted), so such a
// replay is retried with a fresh listing; any other error is the test's
// failure.
func replayWholeLog(ctx context.Context, opts commitlog.Options) (commitlog.ReplayResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := commitlog.Replay(ctx, opts, tabletdesc.LogPosition{}, func(tabletdesc.LogPosition, commitlog.Record) error { return nil })
		if err == nil || !blob.IsNotExist(err) || attempt == 5 {
			return res, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
