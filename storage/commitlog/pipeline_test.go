package commitlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// gatedStore wraps a Store: Put of the n-th object (from 1), named name,
// waits until gate(n) and gateName(name) return (nil: at once) and fails
// with errInjected when failName(name).
type gatedStore struct {
	blob.Store
	mu       sync.Mutex
	puts     int
	inFlight int
	maxIn    int
	names    []string
	gate     func(n int)
	gateName func(name string)
	failName func(name string) bool
}

func (s *gatedStore) Put(ctx context.Context, name string, data []byte) error {
	s.mu.Lock()
	s.puts++
	n := s.puts
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	s.names = append(s.names, name)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if s.gate != nil {
		s.gate(n)
	}
	if s.gateName != nil {
		s.gateName(name)
	}
	if s.failName != nil && s.failName(name) {
		return errInjected
	}
	return s.Store.Put(ctx, name, data)
}

// TestPipelinedFlushesAckInOrder: with four PUTs in flight that finish in
// random order, every Wait succeeds, no record is acknowledged before an
// earlier one, the PUTs really overlap, and replay returns every record at
// its position.
func TestPipelinedFlushesAckInOrder(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 7))
	var rmu sync.Mutex
	store := &gatedStore{Store: blob.NewMemory(), gate: func(int) {
		rmu.Lock()
		d := time.Duration(r.IntN(3000)) * time.Microsecond
		rmu.Unlock()
		time.Sleep(d)
	}}
	opts := Options{Store: store, Prefix: "logs", FlushConcurrency: 4, ConcurrentFlushBytes: 1, MaxBatchBytes: 2000, SegmentBytes: 40_000}
	l := openLog(t, opts)
	recs := records(21, 300)
	commits := make([]*Commit, len(recs))
	var wg sync.WaitGroup
	for i, rec := range recs {
		commits[i] = l.Append(rec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := commits[i].Wait(ctx); err != nil {
				t.Errorf("record %d: %v", i, err)
			}
			// Acknowledged: so is every earlier record.
			for j := i - 1; j >= 0 && j >= i-50; j-- {
				select {
				case <-commits[j].b.done:
				default:
					t.Errorf("record %d acknowledged before record %d", i, j)
					return
				}
			}
		}()
		if i%17 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	for i := 1; i < len(commits); i++ {
		if commits[i].b != commits[i-1].b && commits[i].Pos.Compare(commits[i-1].Pos) <= 0 {
			t.Fatalf("record %d at %v is not after record %d at %v", i, commits[i].Pos, i-1, commits[i-1].Pos)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if store.maxIn < 2 {
		t.Errorf("at most %d PUT in flight, want several", store.maxIn)
	}
	withMark := 0
	for _, n := range store.names {
		if strings.Count(n, "-") == 1 {
			withMark++
		}
	}
	if withMark == 0 {
		t.Errorf("no object carries a watermark: %v", store.names[:min(5, len(store.names))])
	}
	got, res, err := replayAll(t, Options{Store: store.Store, Prefix: "logs"}, tabletdesc.LogPosition{})
	if err != nil || res.TornTail {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	pos := make([]tabletdesc.LogPosition, len(commits))
	for i, c := range commits {
		pos[i] = c.Pos
	}
	checkReplayed(t, got, recs, pos)
	if st := l.Stats(); st.FlushedRecords != int64(len(recs)) || st.Flushes < 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestPipelinedFailedPut: the second of several PUTs in flight fails while
// the third and fourth are stored. The first batch is acknowledged; the
// second fails with the PUT's error, the later ones with ErrFailed although
// their objects exist; no PUT starts afterwards; and replay (and the sorted
// path) end the segment at the gap as a torn tail, with exactly the first
// batch's records.
func TestPipelinedFailedPut(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	recs := records(22, 6)
	// The second record's object: it starts where the first record's
	// frame ends.
	second := fmt.Sprintf("/%020d", len(appendRecordFrame(nil, &recs[0])))
	store := &gatedStore{Store: blob.NewMemory(),
		gateName: func(name string) {
			if strings.Contains(name, second) {
				<-release // fails only once 3 and 4 are stored
			}
		},
		failName: func(name string) bool { return strings.Contains(name, second) },
	}
	opts := Options{Store: store, Prefix: "logs", FlushConcurrency: 4, ConcurrentFlushBytes: 1, MaxBatchBytes: 1}
	l := openLog(t, opts)
	// MaxBatchBytes 1: every record is a batch (an object) of its own.
	commits := make([]*Commit, len(recs))
	first := l.Append(recs[0])
	if err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	commits[0] = first
	// Hold object 2's PUT while 3 and 4 go through, then fail it.
	for i := 1; i < 4; i++ {
		commits[i] = l.Append(recs[i])
	}
	waitFor(t, func() bool {
		objs, _ := store.Store.List(ctx, "logs/")
		return len(objs) == 3
	})
	close(release)
	if err := commits[1].Wait(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("the failed batch: %v", err)
	}
	for i := 2; i < 4; i++ {
		if err := commits[i].Wait(ctx); !errors.Is(err, ErrFailed) {
			t.Fatalf("record %d, stored after the hole: %v, want ErrFailed", i, err)
		}
	}
	puts := store.puts
	for i := 4; i < 6; i++ {
		if err := l.Append(recs[i]).Wait(ctx); !errors.Is(err, ErrFailed) {
			t.Fatalf("append after the failure: %v", err)
		}
	}
	if store.puts != puts {
		t.Fatalf("%d PUTs after the failure", store.puts-puts)
	}
	l.Close()

	plain := Options{Store: store.Store, Prefix: "logs"}
	got, res, err := replayAll(t, plain, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, got, recs[:1], []tabletdesc.LogPosition{commits[0].Pos})
	if !res.TornTail || res.TornAt != commits[1].Pos {
		t.Fatalf("replay %+v, want a torn tail at %v", res, commits[1].Pos)
	}
	// The sorted copy agrees.
	sorted := SortedLog{Store: blob.NewMemory(), Prefix: "sorted"}
	st, err := SortSegment(ctx, plain, commits[0].Pos.Segment, sorted)
	if err != nil || st.Records != 1 {
		t.Fatalf("SortSegment: %+v, %v; want the one record before the gap", st, err)
	}
	var n int
	if _, err := ReplaySorted(ctx, plain, sorted, recs[0].Tablet, tabletdesc.LogPosition{}, func(tabletdesc.LogPosition, Record) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("ReplaySorted: %d records, %v", n, err)
	}

	// A new run appends to a later segment; replay keeps dropping the
	// objects after the gap and reads the new segment after it.
	l2 := openLog(t, plain)
	p, err := l2.Write(ctx, recs[5])
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
	got, _, err = replayAll(t, plain, tabletdesc.LogPosition{})
	if err != nil {
		t.Fatal(err)
	}
	checkReplayed(t, got, []Record{recs[0], recs[5]}, []tabletdesc.LogPosition{commits[0].Pos, p})
}

// TestGapTornOrLost: objects after a gap that were all started before the
// gap's offset was stored make a torn tail; one started after it proves a
// lost object — corruption, for Replay, SortSegment and ReplaySorted alike.
func TestGapTornOrLost(t *testing.T) {
	ctx := context.Background()
	frame := func(i int) []byte {
		rec := records(23, 3)[i]
		return appendRecordFrame(nil, &rec)
	}
	f0, f1, f2 := frame(0), frame(1), frame(2)
	o1 := int64(len(f0))
	o2 := o1 + int64(len(f1))
	for _, tc := range []struct {
		name    string
		mark2   int64 // watermark of the object after the gap
		corrupt bool
	}{
		{"started before the gap was stored", o1, false},
		{"started while only the first object was stored", 0, false},
		{"started after the gap was stored", o2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := blob.NewMemory()
			store.Put(ctx, objectNameAt("l/", 1, 0, 0), f0)
			store.Put(ctx, objectNameAt("l/", 1, o2, tc.mark2), f2) // f1 at o1 is missing
			opts := Options{Store: store, Prefix: "l"}
			got, res, err := replayAll(t, opts, tabletdesc.LogPosition{})
			sorted := SortedLog{Store: blob.NewMemory()}
			_, serr := SortSegment(ctx, opts, 1, sorted)
			if tc.corrupt {
				if !errors.Is(err, ErrCorrupt) || !errors.Is(serr, ErrCorrupt) {
					t.Fatalf("Replay %v, SortSegment %v; want ErrCorrupt", err, serr)
				}
				if len(got) != 1 {
					t.Fatalf("replay delivered %d records before the corruption, want 1", len(got))
				}
				return
			}
			if err != nil || serr != nil || len(got) != 1 || !res.TornTail || res.TornAt != (tabletdesc.LogPosition{Segment: 1, Offset: o1}) {
				t.Fatalf("Replay %d records, %+v, %v; SortSegment %v", len(got), res, err, serr)
			}
		})
	}
	// A name whose watermark lies past its offset is no log object.
	if _, ok := parseObjectName("l/", blob.Attrs{Name: "l/00000000000000000001/00000000000000000010-00000000000000000011.log"}); ok {
		t.Fatal("parsed a watermark above the offset")
	}
	if o, ok := parseObjectName("l/", blob.Attrs{Name: objectNameAt("l/", 3, 10, 4)}); !ok || o.seg != 3 || o.off != 10 || o.watermark != 4 {
		t.Fatalf("parse %+v, %v", o, ok)
	}
}

// TestPipelinedRolloverDrains: no PUT of a segment starts while a PUT of
// the previous segment is in flight.
func TestPipelinedRolloverDrains(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	active := map[string]int{} // segment → PUTs in flight
	var bad string
	store := &segWatchStore{Store: blob.NewMemory(), enter: func(seg string) {
		mu.Lock()
		defer mu.Unlock()
		for s, n := range active {
			if s != seg && n > 0 && bad == "" {
				bad = "PUT of segment " + seg + " while segment " + s + " had one in flight"
			}
		}
		active[seg]++
	}, exit: func(seg string) {
		mu.Lock()
		active[seg]--
		mu.Unlock()
	}}
	l := openLog(t, Options{Store: store, Prefix: "logs", FlushConcurrency: 8, ConcurrentFlushBytes: 1, MaxBatchBytes: 500, SegmentBytes: 3000})
	var commits []*Commit
	for _, rec := range records(24, 200) {
		commits = append(commits, l.Append(rec))
	}
	for i, c := range commits {
		if err := c.Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if commits[len(commits)-1].Pos.Segment < 3 {
		t.Fatalf("only %d segments", commits[len(commits)-1].Pos.Segment)
	}
	if bad != "" {
		t.Fatal(bad)
	}
}

type segWatchStore struct {
	blob.Store
	enter, exit func(seg string)
}

func (s *segWatchStore) Put(ctx context.Context, name string, data []byte) error {
	seg, _, _ := strings.Cut(strings.TrimPrefix(name, "logs/"), "/")
	s.enter(seg)
	defer s.exit(seg)
	time.Sleep(200 * time.Microsecond)
	return s.Store.Put(ctx, name, data)
}

func TestFlushConcurrencyBounds(t *testing.T) {
	for _, c := range []int{-1, MaxFlushConcurrency + 1} {
		if _, err := Open(context.Background(), Options{Store: blob.NewMemory(), FlushConcurrency: c}); err == nil || !strings.Contains(err.Error(), "FlushConcurrency") {
			t.Errorf("FlushConcurrency %d: %v, want an error naming it", c, err)
		}
	}
}

// waitFor polls cond until it holds (the test's own timeout bounds it).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// TestPipelinedSmallBatchesWait: with the default ConcurrentFlushBytes,
// small batches wait for the flush in flight (one PUT at a time, group
// commit as before), while batches past it overlap their PUTs.
func TestPipelinedSmallBatchesWait(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		valueLen int
		overlap  bool
	}{{"small", 100, false}, {"large", 700 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			store := &gatedStore{Store: blob.NewMemory(), gate: func(int) { time.Sleep(2 * time.Millisecond) }}
			l := openLog(t, Options{Store: store, Prefix: "logs", FlushConcurrency: 4})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						rec := records(uint64(40+w), i+1)[i]
						rec.Mutation.Mutations = []cell.Mutation{cell.Set("f", []byte("q"), 1, make([]byte, tc.valueLen))}
						if err := l.Append(rec).Wait(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			l.Close()
			if got := store.maxIn > 1; got != tc.overlap {
				t.Fatalf("%d PUTs at most in flight; want overlap %v", store.maxIn, tc.overlap)
			}
			got, _, err := replayAll(t, Options{Store: store.Store, Prefix: "logs"}, tabletdesc.LogPosition{})
			if err != nil || len(got) != 80 {
				t.Fatalf("replay: %d records, %v", len(got), err)
			}
		})
	}
}

// TestStatsFlushTime: Stats.FlushTime adds up the flushes themselves —
// here PUTs held 2 ms each — with one flush at a time and several in
// flight, and no more than the time the writes took.
func TestStatsFlushTime(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprint("in-flight=", k), func(t *testing.T) {
			const hold = 2 * time.Millisecond
			store := &gatedStore{Store: blob.NewMemory(), gate: func(int) { time.Sleep(hold) }}
			l := openLog(t, Options{Store: store, Prefix: "logs", FlushConcurrency: k})
			start := time.Now()
			writeAll(t, l, records(31, 4)) // one at a time: 4 flushes
			elapsed := time.Since(start)
			st := l.Stats()
			if st.Flushes != 4 || st.FlushTime < 4*hold || st.FlushTime > elapsed {
				t.Fatalf("stats %+v after %v: want 4 flushes of at least %v each, in all at most the elapsed time", st, elapsed, hold)
			}
		})
	}
}
