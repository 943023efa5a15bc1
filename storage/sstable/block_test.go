package sstable

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRestartSearchIndex: with the restart search index, searchRestarts
// answers as the plain binary search over decoded restart keys does, for
// keys built to make windows tie and pad — long shared prefixes, keys
// shorter than the prefix plus eight bytes, zero bytes, targets that are
// prefixes of keys or outside the block — and so do the seeks built on it.
func TestRestartSearchIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	alphabet := []byte{0x00, 0x01, 0x7f, 0xff}
	randomKey := func(prefix []byte) []byte {
		k := slices.Clone(prefix[:rng.IntN(len(prefix)+1)])
		for range rng.IntN(12) {
			k = append(k, alphabet[rng.IntN(len(alphabet))])
		}
		return k
	}
	for round := range 300 {
		prefix := bytes.Repeat([]byte{alphabet[round%len(alphabet)]}, rng.IntN(10))
		set := map[string]bool{}
		for range 1 + rng.IntN(60) {
			set[string(randomKey(prefix))] = true
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range set {
				if !yield(k) {
					return
				}
			}
		})
		bb := blockBuilder{restartInterval: 1 + rng.IntN(3)}
		for _, k := range keys {
			bb.add([]byte(k), []byte("v"))
		}
		data := bb.finish()
		indexed, err := parseDataBlock(slices.Clone(data))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := parseBlock(slices.Clone(data))
		if err != nil {
			t.Fatal(err)
		}
		if !indexed.indexed || plain.indexed {
			t.Fatal("parseDataBlock's block searches without the index, or parseBlock's with one")
		}
		for range 100 {
			target := randomKey(prefix)
			if rng.IntN(4) == 0 {
				target = []byte(keys[rng.IntN(len(keys))])
			}
			want, err := plain.searchRestarts(target)
			if err != nil {
				t.Fatal(err)
			}
			got, err := indexed.searchRestarts(target)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("round %d: searchRestarts(%x) = %d with the index, %d without (keys %x)", round, target, got, want, keys)
			}
			var it blockIter
			it.init(indexed)
			ok, err := it.seekGE(target)
			i, _ := slices.BinarySearch(keys, string(target))
			if err != nil || ok != (i < len(keys)) || (ok && string(it.key) != keys[i]) {
				t.Fatalf("round %d: seekGE(%x) = %v %x (%v), want key %d of %x", round, target, ok, it.key, err, i, keys)
			}
		}
	}
}

func TestWindowOrdersKeys(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		off  int
		want int // sign of window(a) - window(b); 0: tie
	}{
		{"ab", "ab\x00", 0, 0}, // padding ties: the keys must be compared
		{"ab", "ab\x01", 0, -1},
		{"abcdefghX", "abcdefghY", 0, 0}, // beyond the window: tie
		{"xxabc", "xxabd", 2, -1},
		{"xx", "xx\xff", 2, -1},
		{"xx\xff\xff\xff\xff\xff\xff\xff\xff", "xx\xff\xff\xff\xff\xff\xff\xff", 2, 1},
		{"xx\xff\xff\xff\xff\xff\xff\xff\xffA", "xx\xff\xff\xff\xff\xff\xff\xff\xffB", 2, 0},
	} {
		wa, wb := window([]byte(tc.a), tc.off), window([]byte(tc.b), tc.off)
		got := 0
		if wa < wb {
			got = -1
		} else if wa > wb {
			got = 1
		}
		if got != tc.want {
			t.Errorf("window(%q) vs window(%q) at %d: %d, want %d", tc.a, tc.b, tc.off, got, tc.want)
		}
	}
}
