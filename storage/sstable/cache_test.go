package sstable

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
)

// settle waits until the cache has applied every admission, which
// ristretto does asynchronously.
func (c *Cache) settle() { c.Wait() }

func TestCacheHitsAndMisses(t *testing.T) {
	entries := randomEntries(rand.New(rand.NewPCG(21, 22)), 2000, 10)
	data, _ := buildFile(t, entries, WriterOptions{BlockSize: 2048, Compression: SnappyCompression})
	cache := NewCache(16 << 20)
	defer cache.Close()
	r := openBytes(t, data, ReaderOptions{Cache: cache})
	nBlocks := uint64(len(r.Index()))

	for pass := uint64(1); pass <= 2; pass++ {
		got, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, got, entries)
		cache.settle()
		if s := cache.Stats(); s.Misses != nBlocks || s.Hits != (pass-1)*nBlocks {
			t.Fatalf("pass %d over %d blocks: %+v", pass, nBlocks, s)
		}
	}
	if s := cache.Stats(); s.Bytes <= 0 || s.Bytes > 16<<20 {
		t.Fatalf("bytes held: %d", s.Bytes)
	}
	r.Close()
	cache.settle()
	if s := cache.Stats(); s.Bytes != 0 {
		t.Fatalf("closed reader left %d bytes cached", s.Bytes)
	}
}

func TestCacheIsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	entries := randomEntries(rng, 3000, 10)
	const blockSize = 4096
	data, _ := buildFile(t, entries, WriterOptions{BlockSize: blockSize, Compression: NoCompression})
	const capacity = 64 << 10
	cache := NewCache(capacity)
	defer cache.Close()
	r := openBytes(t, data, ReaderOptions{Cache: cache})
	defer r.Close()
	if size := len(r.Index()) * blockSize; size < 4*capacity {
		t.Fatalf("file of %d block bytes does not overflow the cache", size)
	}
	// The largest entry a block can hold is the largest block.
	maxBlock := int64(blockSize + blockOverhead)
	it := r.NewIterator()
	defer it.Close()
	for round := 0; round < 20; round++ {
		for i := 0; i < 50; i++ {
			want := entries[rng.IntN(len(entries))]
			if !it.SeekGE(want.key) || !bytes.Equal(it.Value(), want.value) {
				t.Fatalf("SeekGE(%q): %v", want.key, it.Error())
			}
		}
		cache.settle()
		if b := cache.Stats().Bytes; b > capacity+maxBlock || b <= 0 {
			t.Fatalf("cache holds %d bytes, capacity %d", b, capacity)
		}
	}
}

func TestCacheSeparatesFiles(t *testing.T) {
	// Two different files opened under one name must not see each other's
	// blocks, even at equal offsets.
	rng := rand.New(rand.NewPCG(25, 26))
	a := randomEntries(rng, 500, 10)
	b := randomEntries(rng, 500, 10)
	opts := WriterOptions{BlockSize: 1024, Compression: NoCompression}
	dataA, _ := buildFile(t, a, opts)
	dataB, _ := buildFile(t, b, opts)
	cache := NewCache(8 << 20)
	defer cache.Close()
	ra := openBytes(t, dataA, ReaderOptions{Cache: cache})
	rb := openBytes(t, dataB, ReaderOptions{Cache: cache})
	for range 2 {
		for _, tc := range []struct {
			r    *Reader
			want []entry
		}{{ra, a}, {rb, b}} {
			got, err := readAll(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, got, tc.want)
			cache.settle()
		}
	}
	if cache.Stats().Hits == 0 {
		t.Fatal("second reads did not hit the cache")
	}
}

func TestCacheZeroCapacity(t *testing.T) {
	entries := randomEntries(rand.New(rand.NewPCG(27, 28)), 100, 10)
	data, _ := buildFile(t, entries, WriterOptions{BlockSize: 1024})
	cache := NewCache(0)
	defer cache.Close()
	r := openBytes(t, data, ReaderOptions{Cache: cache})
	for range 2 {
		got, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, got, entries)
	}
	if s := cache.Stats(); s.Hits != 0 || s.Misses != 2*uint64(len(r.Index())) || s.Bytes != 0 {
		t.Fatalf("zero-capacity cache: %+v", s)
	}
}

// TestConcurrentReaders is meant for -race: readers of two files share a
// cache too small for them, so blocks are admitted and evicted while other
// goroutines read them.
func TestConcurrentReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	files := make([][]entry, 2)
	readers := make([]*Reader, 2)
	cache := NewCache(32 << 10)
	defer cache.Close()
	for i := range files {
		files[i] = randomEntries(rng, 1500, 10)
		data, _ := buildFile(t, files[i], WriterOptions{BlockSize: 1024, Compression: Compression(i + 1)})
		readers[i] = openBytes(t, data, ReaderOptions{Cache: cache})
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 31))
			f := g % 2
			entries := files[f]
			it := readers[f].NewIterator()
			defer it.Close()
			for range 400 {
				i := rng.IntN(len(entries))
				if !it.SeekGE(entries[i].key) || !bytes.Equal(it.Value(), entries[i].value) {
					errs <- "SeekGE returned wrong data"
					return
				}
				if i+1 < len(entries) && (!it.Next() || !bytes.Equal(it.Key(), entries[i+1].key)) {
					errs <- "Next returned wrong data"
					return
				}
				if i > 0 && (!it.SeekLT(entries[i].key) || !bytes.Equal(it.Key(), entries[i-1].key)) {
					errs <- "SeekLT returned wrong data"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	// Admission is asynchronous and TinyLFU may turn blocks away, so hits
	// are not certain in a cache this small; its bound is.
	cache.settle()
	if s := cache.Stats(); s.Misses == 0 || s.Bytes > 32<<10+1024+blockOverhead {
		t.Fatalf("stats after concurrent reads: %+v", s)
	}
}

// buildRetained writes entries retaining every block (RetainBytes) and
// returns the file and the blocks the writer retained.
func buildRetained(t *testing.T, entries []entry, opts WriterOptions) ([]byte, []RetainedBlock) {
	t.Helper()
	opts.RetainBytes = 1 << 30
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range entries {
		if err := w.Add(e.key, e.value); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.RetainedBlocks()
}

// TestPrimeCachesWrittenBlocks: a file whose writer's blocks were primed
// into the cache is read without a single miss, compressed or not, and
// reads exactly what was written.
func TestPrimeCachesWrittenBlocks(t *testing.T) {
	for _, c := range []Compression{NoCompression, SnappyCompression, ZstdCompression} {
		entries := randomEntries(rand.New(rand.NewPCG(41, uint64(c))), 2000, 10)
		data, blocks := buildRetained(t, entries, WriterOptions{BlockSize: 2048, Compression: c})
		cache := NewCache(16 << 20)
		r := openBytes(t, data, ReaderOptions{Cache: cache})
		if len(blocks) != len(r.Index()) || len(blocks) < 10 {
			t.Fatalf("compression %d: %d blocks retained, %d in the index", c, len(blocks), len(r.Index()))
		}
		r.Prime(blocks)
		cache.settle()
		got, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, got, entries)
		if s := cache.Stats(); s.Misses != 0 || s.Hits != uint64(len(blocks)) {
			t.Fatalf("compression %d: primed file of %d blocks read with %+v", c, len(blocks), s)
		}
		r.Close()
		cache.Close()
	}
}

// TestPrimeSkipsForeignBlocks: blocks that are not the file's own — another
// file's, laid out differently — are not cached under its name; reads then
// miss and read the file, and still return the file's own entries.
func TestPrimeSkipsForeignBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	entries := randomEntries(rng, 1000, 10)
	other := randomEntries(rng, 1000, 10)
	data, _ := buildRetained(t, entries, WriterOptions{BlockSize: 2048, Compression: NoCompression})
	_, foreign := buildRetained(t, other, WriterOptions{BlockSize: 1500, Compression: NoCompression})
	cache := NewCache(16 << 20)
	defer cache.Close()
	r := openBytes(t, data, ReaderOptions{Cache: cache})
	defer r.Close()
	r.Prime(foreign)
	cache.settle()
	got, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, entries)
	if s := cache.Stats(); s.Hits != 0 || s.Misses != uint64(len(r.Index())) {
		t.Fatalf("after priming another file's blocks: %+v over %d blocks", s, len(r.Index()))
	}
}

// TestRetainBytesBoundsTheCopies: a writer keeps copies of its first
// blocks only while their bytes fit RetainBytes; priming them leaves the
// later blocks to be read from the file.
func TestRetainBytesBoundsTheCopies(t *testing.T) {
	entries := randomEntries(rand.New(rand.NewPCG(45, 46)), 2000, 10)
	_, all := buildRetained(t, entries, WriterOptions{BlockSize: 2048, Compression: NoCompression})
	budget := int64(len(all[0].Data) + len(all[1].Data) + len(all[2].Data))
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BlockSize: 2048, Compression: NoCompression, RetainBytes: budget})
	for _, e := range entries {
		if err := w.Add(e.key, e.value); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	kept := w.RetainedBlocks()
	if len(kept) != 3 || kept[2].Offset != all[2].Offset {
		t.Fatalf("a budget of the first three blocks kept %d", len(kept))
	}
	if w.RetainedBlocks() != nil {
		t.Fatal("RetainedBlocks returned the blocks twice")
	}
	cache := NewCache(16 << 20)
	defer cache.Close()
	r := openBytes(t, buf.Bytes(), ReaderOptions{Cache: cache})
	defer r.Close()
	r.Prime(kept)
	cache.settle()
	got, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, got, entries)
	if s := cache.Stats(); s.Hits != 3 || s.Misses != uint64(len(r.Index())-3) {
		t.Fatalf("three primed blocks of %d: %+v", len(r.Index()), s)
	}
}
