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

// Frames is the buffer pool of Tabula's gRPC connections, clients'
// (experimental.WithBufferPool) and servers' (experimental.BufferPool).
// gRPC's transport takes from it the buffer it reads each HTTP/2 data
// frame into (io.ReadFull: every byte of it overwritten before use) and
// puts it back once the message is decoded; its other users (compressing
// and decompressing messages, which Tabula does not ask for) also hand on
// only bytes they wrote (mem.ReadAll slices to what it read), and
// messages are marshalled into gRPC's default pool. gRPC's default pool
// clears every buffer it hands out again, for users that might read
// before writing: for a scan, as many bytes cleared as received (about 3
// ms of client CPU per 100 MB), and the same on a server for every bulk
// write. Its tiers are gRPC's default ones from 4 KiB up (frames are at
// most 16 KiB).
var Frames = NewDirty(4<<10, 16<<10, 32<<10, 1<<20)

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
