package blob

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// TestLocalWriterStartsWriteback: a local Writer asks for the writeback of
// every writebackEvery bytes as it goes, in order and without gaps, before
// its Close; the object is written whole.
func TestLocalWriterStartsWriteback(t *testing.T) {
	type call struct{ off, n int64 }
	var calls []call
	real := startWriteback
	startWriteback = func(f *os.File, off, n int64) {
		calls = append(calls, call{off, n})
		real(f, off, n) // the real call too: it must not disturb the file
	}
	defer func() { startWriteback = real }()

	s, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := s.Create(ctx, "a/sstable")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3*writebackEvery+writebackEvery/2)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(100<<10)) // writes of any size
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if len(calls) < 2 {
		t.Fatalf("%d writeback calls while %d bytes went to the file", len(calls), len(data))
	}
	var next int64
	for _, c := range calls {
		if c.off != next || c.n < writebackEvery {
			t.Fatalf("writeback calls %v: want consecutive ranges of at least %d bytes from 0", calls, writebackEvery)
		}
		next = c.off + c.n
	}
	if next > int64(len(data)) {
		t.Fatalf("writeback asked up to %d, past the %d bytes written", next, len(data))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "a/sstable")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("object of %d bytes differs from the %d written", len(got), len(data))
	}
}

// BenchmarkWritebackLogSync measures what a local Writer's early writeback
// is for: while it writes a 64 MiB object (an SSTable of a full memtable)
// and commits it, another file takes appends of 300 KiB each made durable
// with fdatasync (a commit log's flushes). Reported: the log syncs'
// p50, p99 and longest (µs) and the object's commit (ms), with the
// writeback as Create sets it up (on) and without it (off).
func BenchmarkWritebackLogSync(b *testing.B) {
	real := startWriteback
	defer func() { startWriteback = real }()
	for _, mode := range []string{"on", "off"} {
		b.Run("writeback="+mode, func(b *testing.B) {
			startWriteback = real
			if mode == "off" {
				startWriteback = func(*os.File, int64, int64) {}
			}
			dir := b.TempDir()
			s, err := NewLocal(dir)
			if err != nil {
				b.Fatal(err)
			}
			block := make([]byte, 256<<10)
			for i := range block {
				block[i] = byte(i * 13)
			}
			var syncs []time.Duration
			var commits time.Duration
			for b.Loop() {
				done := make(chan struct{})
				logged := make(chan []time.Duration)
				go func() { logged <- appendAndSync(b, dir+"/log", done) }()
				w, err := s.Create(context.Background(), "sst")
				if err != nil {
					b.Fatal(err)
				}
				for range 256 {
					if _, err := w.Write(block); err != nil {
						b.Fatal(err)
					}
					time.Sleep(200 * time.Microsecond) // a paced compaction
				}
				start := time.Now()
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				commits += time.Since(start)
				close(done)
				syncs = append(syncs, <-logged...)
			}
			slices.Sort(syncs)
			n := len(syncs)
			b.ReportMetric(float64(syncs[n/2].Microseconds()), "log-sync-p50-µs")
			b.ReportMetric(float64(syncs[n*99/100].Microseconds()), "log-sync-p99-µs")
			b.ReportMetric(float64(syncs[n-1].Microseconds()), "log-sync-max-µs")
			b.ReportMetric(float64(commits.Milliseconds())/float64(b.N), "commit-ms/op")
		})
	}
}

// appendAndSync appends 300 KiB to path and fdatasyncs it, over and over
// until done, and returns how long each sync took.
func appendAndSync(b *testing.B, path string, done chan struct{}) []time.Duration {
	f, err := os.Create(path)
	if err != nil {
		b.Error(err)
		return nil
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 300<<10)
	var out []time.Duration
	for {
		select {
		case <-done:
			return out
		default:
		}
		if _, err := f.Write(buf); err != nil {
			b.Error(err)
			return out
		}
		start := time.Now()
		if err := f.Sync(); err != nil {
			b.Error(err)
			return out
		}
		out = append(out, time.Since(start))
	}
}
