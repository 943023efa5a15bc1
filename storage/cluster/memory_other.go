//go:build !linux

package cluster

// physicalMemory returns 0 (unknown) where Sysinfo is not available: the
// block cache then gets MinBlockCacheBytes.
func physicalMemory() int64 { return 0 }
