// Package bufpool has a gRPC buffer pool (mem.BufferPool) that does not
// clear the buffers it hands out again, for the uses where every byte of
// a buffer is written before any is read: gRPC's default pool clears
// each buffer on Get, which for a scan means as many bytes cleared as are
// sent or received.
package bufpool

import (
	"slices"
	"sync"
)

// Dirty is a mem.BufferPool whose Get returns a buffer of the asked
// length whose bytes are whatever its last user left. It keeps buffers
// of its tiers' capacities: Get serves a request from the smallest tier
// that fits it; a request above the largest tier gets a fresh buffer,
// which Put drops, as it drops any buffer not of a tier's capacity.
// Safe for concurrent use.
type Dirty struct {
	tiers []int
	pools []sync.Pool
}

// NewDirty returns a pool with the given tier capacities (bytes, in any
// order).
func NewDirty(tiers ...int) *Dirty {
	tiers = slices.Clone(tiers)
	slices.Sort(tiers)
	tiers = slices.Compact(tiers)
	return &Dirty{tiers: tiers, pools: make([]sync.Pool, len(tiers))}
}

// Get returns a buffer of length n, not cleared.
func (p *Dirty) Get(n int) *[]byte {
	for i, size := range p.tiers {
		if n <= size {
			if b, ok := p.pools[i].Get().(*[]byte); ok {
				*b = (*b)[:n]
				return b
			}
			b := make([]byte, n, size)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

// Put keeps b for a later Get when its capacity is one of the tiers'.
func (p *Dirty) Put(b *[]byte) {
	if i, ok := slices.BinarySearch(p.tiers, cap(*b)); ok {
		p.pools[i].Put(b)
	}
}
