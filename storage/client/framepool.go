package client

import (
	"sync"

	"google.golang.org/grpc/mem"
)

// framePool is the buffer pool of the connections a client dials. gRPC's
// transport takes from it the buffer it reads each HTTP/2 data frame into
// (io.ReadFull: every byte of it overwritten before use) and puts it back
// once the message is decoded; its other users (compressing and
// decompressing messages, which this client does not ask for) also hand
// on only bytes they wrote (mem.ReadAll slices to what it read), and
// messages are marshalled into gRPC's default pool. gRPC's default pool
// clears every buffer it hands out again, for users that might read
// before writing: for a scan, as many bytes cleared as received, a sixth
// of the client's CPU beyond the system calls. This pool does not clear.
var framePool mem.BufferPool = &dirtyPool{}

// dirtyPoolTiers are the capacities dirtyPool keeps buffers of: gRPC's
// default tiers from 4 KiB up (frames are at most 16 KiB here; larger
// requests are for whole messages).
var dirtyPoolTiers = [...]int{4 << 10, 16 << 10, 32 << 10, 1 << 20}

// dirtyPool is a mem.BufferPool whose Get returns a buffer of the asked
// length whose bytes are whatever its last user left: its callers write
// every byte before they read any. Requests above the largest tier get a
// fresh buffer, which Put drops.
type dirtyPool struct {
	tiers [len(dirtyPoolTiers)]sync.Pool
}

// Get returns a buffer of length n, not cleared.
func (p *dirtyPool) Get(n int) *[]byte {
	for i, size := range dirtyPoolTiers {
		if n <= size {
			if b, ok := p.tiers[i].Get().(*[]byte); ok {
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
func (p *dirtyPool) Put(b *[]byte) {
	for i, size := range dirtyPoolTiers {
		if cap(*b) == size {
			p.tiers[i].Put(b)
			return
		}
	}
}
