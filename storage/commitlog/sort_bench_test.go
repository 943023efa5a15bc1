package commitlog

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// BenchmarkRecoverTablets compares the two ways K tablets of a dead server
// recover from its log (16 MiB in 2 MiB segments, 64 KiB flush objects,
// 1 KB values, records of the K tablets interleaved): "raw" replays the
// whole log once per tablet, as every recovering tablet did before
// sorting; "sorted" sorts the log once (segment after segment, in one
// process) and then replays each tablet from the sorted copy. One op is
// the recovery of all K tablets. Besides time it reports the bytes and
// requests read from the store per op. The latency variants add a fixed
// delay to every store request, a crude model of an object store.
func BenchmarkRecoverTablets(b *testing.B) {
	for _, latency := range []time.Duration{0, time.Millisecond} {
		for _, k := range []int{8, 32} {
			for _, mode := range []string{"raw", "sorted"} {
				b.Run(fmt.Sprintf("latency=%v/tablets=%d/%s", latency, k, mode), func(b *testing.B) {
					benchRecover(b, k, latency, mode == "sorted")
				})
			}
		}
	}
}

func benchRecover(b *testing.B, k int, latency time.Duration, sorted bool) {
	ctx := context.Background()
	store := &countingStore{Store: blob.NewMemory()}
	opts := Options{Store: store, Prefix: "logs/dead"}
	// The objects are written directly, so that every run has the same
	// ones: a live Log's flush sizes depend on timing.
	const segmentBytes, objectBytes, logBytes = 2 << 20, 64 << 10, 16 << 20
	value := make([]byte, 1000)
	var obj []byte
	seg, off, records := uint64(1), int64(0), 0
	put := func() {
		if err := store.Put(ctx, objectName(logPrefix(opts.Prefix), seg, off), obj); err != nil {
			b.Fatal(err)
		}
		off += int64(len(obj))
		obj = obj[:0]
		if off >= segmentBytes {
			seg, off = seg+1, 0
		}
	}
	for i := 0; int64(seg-1)*segmentBytes+off < logBytes; i++ {
		obj = appendRecordFrame(obj, &Record{
			Tablet:   fmt.Sprintf("table/tablet-%03d", i%k),
			FirstSeq: uint64(i),
			Mutation: cell.RowMutation{Row: fmt.Appendf(nil, "user%012d", i), Mutations: []cell.Mutation{cell.Set("cf", []byte("field0"), 1, value)}},
		})
		records++
		if len(obj) >= objectBytes {
			put()
		}
	}
	if len(obj) > 0 {
		put()
	}
	dst := SortedLog{Store: store, Prefix: "sortedlogs/dead"}
	store.latency = latency
	store.bytes.Store(0)
	store.requests.Store(0)
	b.ResetTimer()
	for range b.N {
		if sorted {
			if _, err := Sort(ctx, opts, dst); err != nil {
				b.Fatal(err)
			}
		}
		for t := range k {
			tablet := fmt.Sprintf("table/tablet-%03d", t)
			n := 0
			fn := func(_ tabletdesc.LogPosition, rec Record) error {
				if rec.Tablet == tablet {
					n++
				}
				return nil
			}
			var err error
			if sorted {
				_, err = ReplaySorted(ctx, opts, dst, tablet, tabletdesc.LogPosition{}, fn)
			} else {
				_, err = Replay(ctx, opts, tabletdesc.LogPosition{}, fn)
			}
			if err != nil {
				b.Fatal(err)
			}
			if n < records/k {
				b.Fatalf("tablet %s: %d records", tablet, n)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(store.bytes.Load())/float64(b.N)/(1<<20), "MiB-read/op")
	b.ReportMetric(float64(store.requests.Load())/float64(b.N), "requests/op")
}

// countingStore counts the bytes read and the requests made through it,
// and may delay every request.
type countingStore struct {
	blob.Store
	latency  time.Duration
	bytes    atomic.Int64
	requests atomic.Int64
}

func (s *countingStore) wait() {
	s.requests.Add(1)
	if s.latency > 0 {
		time.Sleep(s.latency)
	}
}

func (s *countingStore) Get(ctx context.Context, name string) ([]byte, error) {
	s.wait()
	data, err := s.Store.Get(ctx, name)
	s.bytes.Add(int64(len(data)))
	return data, err
}

func (s *countingStore) Open(ctx context.Context, name string) (blob.Object, error) {
	o, err := s.Store.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingObject{Object: o, s: s}, nil
}

func (s *countingStore) List(ctx context.Context, prefix string) ([]blob.Attrs, error) {
	s.wait()
	return s.Store.List(ctx, prefix)
}

func (s *countingStore) Put(ctx context.Context, name string, data []byte) error {
	s.wait()
	return s.Store.Put(ctx, name, data)
}

type countingObject struct {
	blob.Object
	s *countingStore
}

func (o *countingObject) ReadAt(p []byte, off int64) (int, error) {
	o.s.wait()
	n, err := o.Object.ReadAt(p, off)
	o.s.bytes.Add(int64(n))
	return n, err
}
