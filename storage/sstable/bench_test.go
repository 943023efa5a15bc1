package sstable

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// benchEntries are n cells of distinct rows with 1000-byte values (the
// paper's benchmark size), in key order.
func benchEntries(n int) []entry {
	rng := rand.New(rand.NewPCG(51, 52))
	out := make([]entry, n)
	for i := range out {
		k := cell.Key{Row: fmt.Appendf(nil, "row%010d", i), Family: "f", Qualifier: []byte("q"),
			Timestamp: 1_700_000_000_000_000, Seq: uint64(i + 1), Kind: cell.KindSet}
		out[i] = entry{cell.EncodeKey(k), compressibleValue(rng, 1000)}
	}
	return out
}

const benchN = 16 << 10 // about 16 MiB of entries

func BenchmarkWrite(b *testing.B) {
	entries := benchEntries(benchN)
	for _, c := range allCompressions {
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(int64(len(entries[0].key) + len(entries[0].value)))
			b.ReportAllocs()
			w := NewWriter(io.Discard, WriterOptions{Compression: c})
			i := 0
			for b.Loop() {
				if i == len(entries) {
					if _, err := w.Finish(); err != nil {
						b.Fatal(err)
					}
					w, i = NewWriter(io.Discard, WriterOptions{Compression: c}), 0
				}
				if err := w.Add(entries[i].key, entries[i].value); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if _, err := w.Finish(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRead scans a file sequentially without a cache: every block is
// read, checked and decompressed once per pass.
func BenchmarkRead(b *testing.B) {
	entries := benchEntries(benchN)
	for _, c := range allCompressions {
		b.Run(c.String(), func(b *testing.B) {
			data, _ := buildFile(b, entries, WriterOptions{Compression: c})
			r := openBytes(b, data, ReaderOptions{})
			defer r.Close()
			it := r.NewIterator()
			defer it.Close()
			b.SetBytes(int64(len(entries[0].key) + len(entries[0].value)))
			b.ReportAllocs()
			ok := it.First()
			for b.Loop() {
				if !ok {
					if err := it.Error(); err != nil {
						b.Fatal(err)
					}
					ok = it.First()
				}
				ok = it.Next()
			}
		})
	}
}

// BenchmarkSeek seeks to random existing keys, with every block cached
// (decoded once) and without a cache (a block read and decoded per seek).
func BenchmarkSeek(b *testing.B) {
	entries := benchEntries(benchN)
	for _, c := range allCompressions {
		data, _ := buildFile(b, entries, WriterOptions{Compression: c})
		for _, cached := range []bool{true, false} {
			name := c.String() + "/uncached"
			opts := ReaderOptions{}
			if cached {
				name = c.String() + "/cached"
				opts.Cache = NewCache(64 << 20)
			}
			b.Run(name, func(b *testing.B) {
				r := openBytes(b, data, opts)
				defer r.Close()
				it := r.NewIterator()
				defer it.Close()
				rng := rand.New(rand.NewPCG(53, 54))
				b.SetBytes(int64(len(entries[0].key) + len(entries[0].value)))
				b.ReportAllocs()
				for b.Loop() {
					e := entries[rng.IntN(len(entries))]
					if !it.SeekGE(e.key) || !bytes.Equal(it.Key(), e.key) {
						b.Fatalf("SeekGE(%q): %v", e.key, it.Error())
					}
				}
			})
			if opts.Cache != nil {
				opts.Cache.Close()
			}
		}
	}
}
