package cluster

import (
	"runtime"
	"testing"
)

func TestBlockCacheFor(t *testing.T) {
	for _, c := range []struct{ mem, want int64 }{
		{0, MinBlockCacheBytes},         // unknown
		{1 << 30, MinBlockCacheBytes},   // 1 GiB: an eighth is below the floor
		{8 << 30, 1 << 30},              // 8 GiB
		{24 << 30, 3 << 30},             // this project's CI machines
		{256 << 30, MaxBlockCacheBytes}, // capped
	} {
		if got := blockCacheFor(c.mem); got != c.want {
			t.Errorf("blockCacheFor(%d) = %d, want %d", c.mem, got, c.want)
		}
	}
	if mem := physicalMemory(); runtime.GOOS == "linux" && mem <= 0 {
		t.Fatalf("physicalMemory() = %d on this machine", mem)
	}
}
