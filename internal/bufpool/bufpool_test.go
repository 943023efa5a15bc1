package bufpool

import (
	"testing"

	"google.golang.org/grpc/mem"
)

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

// TestMaterialize: the bytes of every buffer, in order, in one new buffer
// that shares nothing with them — for one buffer, several, none and an
// empty one among them.
func TestMaterialize(t *testing.T) {
	for _, parts := range [][]string{{"abc"}, {"ab", "", "cde", "f"}, {}, {""}} {
		var data mem.BufferSlice
		want := ""
		for _, p := range parts {
			data = append(data, mem.SliceBuffer([]byte(p)))
			want += p
		}
		got := Materialize(data)
		if string(got) != want {
			t.Fatalf("Materialize(%q) = %q", parts, got)
		}
		for _, b := range data {
			if d := b.ReadOnlyData(); len(d) > 0 && len(got) > 0 && &d[0] == &got[0] {
				t.Fatalf("Materialize(%q) aliases its input", parts)
			}
		}
		if len(got) > 0 {
			got[0] ^= 0xff
			if data.Materialize()[0] == got[0] {
				t.Fatalf("Materialize(%q): writing the result changed the input", parts)
			}
		}
	}
}
