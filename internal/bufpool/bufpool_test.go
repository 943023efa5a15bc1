package bufpool

import "testing"

// TestDirtyTiers: Get returns a buffer of the asked length with its
// tier's capacity (the smallest that fits; a fresh one of exactly the
// length above the largest), and Put keeps for later Gets only buffers
// of a tier's capacity — a buffer of another capacity handed out again
// as a tier's would be too small for a request its tier serves.
func TestDirtyTiers(t *testing.T) {
	p := NewDirty(1<<20, 4<<10, 32<<10, 16<<10, 4<<10)
	for _, c := range []struct{ n, cap int }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 16 << 10}, {16 << 10, 16 << 10},
		{20 << 10, 32 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1},
	} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.cap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.n, len(*b), cap(*b), c.n, c.cap)
		}
		p.Put(b)
	}
	odd := make([]byte, 100, 5000)
	p.Put(&odd) // not a tier's capacity: dropped
	for range 100 {
		if b := p.Get(4 << 10); cap(*b) != 4<<10 {
			t.Fatalf("Get(4 KiB) returned a buffer of capacity %d", cap(*b))
		}
	}
}
