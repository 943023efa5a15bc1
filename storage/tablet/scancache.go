package tablet

import (
	"encoding/binary"
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
	return &ScanCache{c: c}, nil
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
	s.c.Set(cacheKey(gen, row), es, entrySize(es)+int64(len(row))+64)
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
