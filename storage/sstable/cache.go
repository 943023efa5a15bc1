package sstable

import (
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// Cache holds decoded data blocks of every open file, bounded in bytes. It
// is safe for concurrent use.
//
// It is built on ristretto: a sharded, contention-free map with TinyLFU
// admission, so a long scan cannot flush the blocks that point reads keep
// hot, and a cost-bounded eviction policy that charges each block its
// decoded size. Ristretto admits new blocks asynchronously: a block may be
// absent for a moment after it was read (the next read decodes it again),
// but the bytes it holds never exceed the capacity once admitted.
type Cache struct {
	rc       *ristretto.Cache[uint64, *cachedBlock] // nil: caches nothing
	capacity int64
	hits     atomic.Uint64
	misses   atomic.Uint64
	nextID   atomic.Uint64 // identities handed to Readers
}

// cachedBlock is a cache entry. It names its file and offset because the
// cache key is a hash of the two: a hash collision is then a miss, never
// another block's data.
type cachedBlock struct {
	fileID uint64
	offset uint64
	b      *block
}

// blockOverhead approximates what a cached block costs beyond its bytes:
// the entry, the block header and the cache's own bookkeeping.
const blockOverhead = 128

// NewCache returns a cache holding at most capacityBytes of blocks. A
// capacity <= 0 gives a cache that holds nothing but still counts misses.
func NewCache(capacityBytes int64) *Cache {
	c := &Cache{capacity: max(capacityBytes, 0)}
	if capacityBytes <= 0 {
		return c
	}
	// Ristretto wants about ten counters per item it will hold; blocks are
	// typically 64 KiB but may be far smaller, so assume 4 KiB blocks.
	counters := min(max(capacityBytes/(4<<10)*10, 1000), 1<<24)
	rc, err := ristretto.NewCache(&ristretto.Config[uint64, *cachedBlock]{
		NumCounters:        counters,
		MaxCost:            capacityBytes,
		BufferItems:        64, // the value ristretto recommends
		IgnoreInternalCost: true,
		KeyToHash:          func(k uint64) (uint64, uint64) { return k, 0 },
	})
	if err != nil {
		panic(err) // only invalid numbers make NewCache fail; ours are valid
	}
	c.rc = rc
	return c
}

// CacheStats are counters of a Cache.
type CacheStats struct {
	Hits, Misses uint64
	Bytes        int64 // bytes of the blocks held now
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	s := CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load()}
	if c.rc != nil {
		s.Bytes = c.rc.MaxCost() - c.rc.RemainingCost()
	}
	return s
}

// Close stops the cache's background goroutine and drops every block.
// Readers that use the cache keep working, uncached. Closing is optional
// for a cache that lives as long as the process.
func (c *Cache) Close() {
	if c.rc != nil {
		c.rc.Close()
	}
}

// Capacity is the bytes of blocks the cache may hold.
func (c *Cache) Capacity() int64 { return c.capacity }

// Wait blocks until every block offered to the cache so far is admitted
// or rejected: ristretto admits asynchronously, so a block set a moment
// ago may not be found yet. For tests and measurements; reads never need
// it.
func (c *Cache) Wait() {
	if c.rc != nil {
		c.rc.Wait()
	}
}

// newFileID returns an identity no other Reader of this cache has: blocks
// of two files, even two opens of one name, never alias.
func (c *Cache) newFileID() uint64 { return c.nextID.Add(1) }

// cacheKey mixes a file identity and a block offset into one hash
// (splitmix64's finaliser), spreading both over all 64 bits.
func cacheKey(fileID, offset uint64) uint64 {
	x := fileID*0x9e3779b97f4a7c15 ^ offset
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (c *Cache) get(fileID, offset uint64) *block {
	if c.rc != nil {
		if e, ok := c.rc.Get(cacheKey(fileID, offset)); ok && e.fileID == fileID && e.offset == offset {
			c.hits.Add(1)
			return e.b
		}
	}
	c.misses.Add(1)
	return nil
}

func (c *Cache) set(fileID, offset uint64, b *block) {
	if c.rc != nil {
		c.rc.Set(cacheKey(fileID, offset), &cachedBlock{fileID, offset, b}, b.size()+blockOverhead)
	}
}

// drop removes a block, e.g. of a file being closed, to make room sooner
// than eviction would.
func (c *Cache) drop(fileID, offset uint64) {
	if c.rc != nil {
		c.rc.Del(cacheKey(fileID, offset))
	}
}
