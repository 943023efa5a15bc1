package mapreduce

import (
	"bytes"
	"hash/fnv"
	"sort"
)

// Partitioner assigns a map output key to one of n reduce partitions. It
// must be deterministic: every map attempt sends a key to the same
// partition.
type Partitioner interface {
	Partition(key []byte, n int) int
}

// HashPartitioner spreads keys by an FNV-1a hash: the default.
type HashPartitioner struct{}

// Partition returns hash(key) mod n.
func (HashPartitioner) Partition(key []byte, n int) int {
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % uint32(n))
}

// TotalOrderPartitioner sends keys to partitions by range, so that the
// reducers' outputs, concatenated in partition order, are globally sorted.
// Bounds are the n-1 sorted split points: partition i holds the keys in
// [Bounds[i-1], Bounds[i]). SampleBounds picks them from sampled keys.
type TotalOrderPartitioner struct {
	Bounds [][]byte
}

// Partition returns the number of bounds ≤ key (capped at n-1).
func (p TotalOrderPartitioner) Partition(key []byte, n int) int {
	i := sort.Search(len(p.Bounds), func(i int) bool { return bytes.Compare(p.Bounds[i], key) > 0 })
	return min(i, n-1)
}

// SampleBounds picks n-1 split points from sampled keys (in any order), at
// evenly spaced quantiles, dropping duplicates: fewer bounds than n-1 come
// back when the sample has fewer distinct keys.
func SampleBounds(sample [][]byte, n int) [][]byte {
	if n <= 1 || len(sample) == 0 {
		return nil
	}
	s := make([][]byte, len(sample))
	copy(s, sample)
	sort.Slice(s, func(i, j int) bool { return bytes.Compare(s[i], s[j]) < 0 })
	var bounds [][]byte
	for i := 1; i < n; i++ {
		k := s[i*len(s)/n]
		if len(bounds) > 0 && bytes.Compare(k, bounds[len(bounds)-1]) <= 0 {
			continue
		}
		bounds = append(bounds, bytes.Clone(k))
	}
	return bounds
}
