package cluster

// DefaultBlockCacheBytes is the block cache a server gets when its
// configuration names none: blockCacheFor the machine's physical memory
// (MinBlockCacheBytes where the platform does not tell it).
//
// Why it grows with the machine: a point read looks in every SSTable that
// holds a version of its row, and a miss costs a read of a whole block, its
// checksum and its decoding — 4 to 5 times a hit (BENCHMARKS.md, "The block
// cache and point reads"). A fixed 256 MiB cache served reads at twice the
// CPU per read once a table of 100,000 rows had been written three times.
func DefaultBlockCacheBytes() int64 {
	return blockCacheFor(physicalMemory())
}

// blockCacheFor is an eighth of mem, bounded by MinBlockCacheBytes and
// MaxBlockCacheBytes (HBase gives its block cache 40% of a heap that is
// itself a fraction of the machine; a tablet server also needs room for
// its memtables, and tabula dev shares the machine with its users).
func blockCacheFor(mem int64) int64 {
	return min(max(mem/8, MinBlockCacheBytes), MaxBlockCacheBytes)
}
