package tablet

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// ScanCache is the paper's scan cache (§6): recently read rows, as the
// entries the SSTables of one locality group returned for them, bounded in
// bytes and shared by every tablet of a server.
//
// Entries never go stale: they are keyed by a generation number that names
// one exact, immutable list of SSTables of one group, and every change of
// that list (flush, compaction, split) takes a new generation. Recent
// writes live in the memtable, which reads merge on top of the cached
// entries, so writes invalidate nothing.
type ScanCache struct {
	c            *ristretto.Cache[string, []entry]
	gen          atomic.Uint64
	hits, misses atomic.Uint64
	door         doorkeeper
}

// NewScanCache returns a cache holding about capacityBytes of entries.
func NewScanCache(capacityBytes int64) (*ScanCache, error) {
	counters := capacityBytes / 100
	counters = max(counters, 1000)
	c, err := ristretto.NewCache(&ristretto.Config[string, []entry]{
		NumCounters: counters,
		MaxCost:     capacityBytes,
		BufferItems: 64,
	})
	if err != nil {
		return nil, err
	}
	sc := &ScanCache{c: c}
	sc.door.init(capacityBytes)
	return sc, nil
}

// admit reports whether a row that missed should be copied into the
// cache: only when it missed before, recently (see doorkeeper).
func (s *ScanCache) admit(gen uint64, row []byte) bool {
	return s.door.seen(maphash.Bytes(s.door.seed, row) ^ gen*0x9e3779b97f4a7c15)
}

// doorkeeper is a Bloom filter of the rows that missed in the scan cache
// since it was last cleared, in front of the cache as TinyLFU's doorkeeper
// is (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
// Admission Policy", 2017): a row enters the cache on its second miss
// within the window. The filter is cleared after as many misses as the
// cache holds rows (its capacity over the mean size of the rows it was
// given), so a row is copied only when it came back sooner than the cache
// would have evicted it — reads spread evenly over a table many times the
// cache's size (where caching them could not pay) cost neither the copy of
// every version of the row nor the cache's bookkeeping, while rows read
// again and again still get in. Concurrent use is safe; a bit lost to a
// concurrent clear only delays one row's admission.
type doorkeeper struct {
	words     []atomic.Uint64
	mask      uint64 // bit positions: hash & mask
	capacity  int64
	maxWindow int64
	window    atomic.Int64 // misses between clears
	misses    atomic.Int64
	given     atomic.Int64 // rows the cache was given, and their bytes:
	givenSize atomic.Int64 // the mean row size, for the window
	seed      maphash.Seed
}

// doorkeeperRowBytes bounds the window from above: the cache is assumed to
// hold no more rows than of this size. Smaller rows only make the window
// shorter than ideal.
const doorkeeperRowBytes = 512

func (d *doorkeeper) init(capacityBytes int64) {
	d.capacity = capacityBytes
	d.maxWindow = max(capacityBytes/doorkeeperRowBytes, 1<<10)
	// Eight bits a row of the longest window and two probes: at most
	// about 5% of the rows seen once pass for seen twice.
	size := uint64(1) << bits.Len64(uint64(d.maxWindow*8-1))
	d.words = make([]atomic.Uint64, size/64)
	d.mask = size - 1
	d.window.Store(min(max(capacityBytes>>10, 1), d.maxWindow)) // 1 KiB rows until sizes are known
	d.seed = maphash.MakeSeed()
}

// givenRow records the size of a row the cache was given.
func (d *doorkeeper) givenRow(bytes int64) {
	d.given.Add(1)
	d.givenSize.Add(bytes)
}

// seen records hash h and reports whether it was recorded before, since
// the last clear.
func (d *doorkeeper) seen(h uint64) bool {
	b1, b2 := h&d.mask, (h>>32|h<<32)&d.mask
	w1, w2 := &d.words[b1/64], &d.words[b2/64]
	m1, m2 := uint64(1)<<(b1%64), uint64(1)<<(b2%64)
	if w1.Load()&m1 != 0 && w2.Load()&m2 != 0 {
		return true
	}
	w1.Or(m1)
	w2.Or(m2)
	if d.misses.Add(1) >= d.window.Load() {
		d.clear()
	}
	return false
}

// clear empties the filter and sets the next window from the rows given
// to the cache so far.
func (d *doorkeeper) clear() {
	d.misses.Store(0)
	for i := range d.words {
		d.words[i].Store(0)
	}
	if n := d.given.Load(); n > 0 {
		mean := max(d.givenSize.Load()/n, 1)
		d.window.Store(min(max(d.capacity/mean, 1), d.maxWindow))
	}
}

// newGeneration returns a number never returned before by this cache.
func (s *ScanCache) newGeneration() uint64 { return s.gen.Add(1) }

func cacheKey(gen uint64, row []byte) string {
	b := make([]byte, 8, 8+len(row))
	binary.BigEndian.PutUint64(b, gen)
	return string(append(b, row...))
}

func (s *ScanCache) get(gen uint64, row []byte) ([]entry, bool) {
	es, ok := s.c.Get(cacheKey(gen, row))
	if ok {
		s.hits.Add(1)
	} else {
		s.misses.Add(1)
	}
	return es, ok
}

func (s *ScanCache) set(gen uint64, row []byte, es []entry) {
	cost := entrySize(es) + int64(len(row)) + 64
	s.door.givenRow(cost)
	s.c.Set(cacheKey(gen, row), es, cost)
}

// ScanCacheStats are counters of a ScanCache.
type ScanCacheStats struct {
	Hits, Misses uint64
}

// Stats returns the cache's counters.
func (s *ScanCache) Stats() ScanCacheStats {
	return ScanCacheStats{Hits: s.hits.Load(), Misses: s.misses.Load()}
}

// Close releases the cache's goroutines.
func (s *ScanCache) Close() { s.c.Close() }
