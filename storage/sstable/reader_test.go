package sstable

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// wantProperties computes the properties a file of entries must report.
func wantProperties(entries []entry, group string) Properties {
	p := Properties{NumEntries: uint64(len(entries)), LocalityGroup: group}
	haveTS := false
	for _, e := range entries {
		k, err := cell.DecodeKey(e.key)
		if err != nil {
			panic(err)
		}
		p.RawKeyBytes += uint64(len(e.key))
		p.RawValueBytes += uint64(len(e.value))
		p.MaxSeq = max(p.MaxSeq, k.Seq)
		if k.Kind != cell.KindSet {
			p.NumDeletions++
			continue
		}
		if !haveTS {
			p.MinTimestamp, p.MaxTimestamp, haveTS = k.Timestamp, k.Timestamp, true
		}
		p.MinTimestamp = min(p.MinTimestamp, k.Timestamp)
		p.MaxTimestamp = max(p.MaxTimestamp, k.Timestamp)
	}
	if len(entries) > 0 {
		p.SmallestKey = entries[0].key
		p.LargestKey = entries[len(entries)-1].key
	}
	return p
}

func checkProperties(t *testing.T, got, want Properties) {
	t.Helper()
	if got.NumEntries != want.NumEntries || got.NumDeletions != want.NumDeletions ||
		got.RawKeyBytes != want.RawKeyBytes || got.RawValueBytes != want.RawValueBytes ||
		got.MinTimestamp != want.MinTimestamp || got.MaxTimestamp != want.MaxTimestamp ||
		got.MaxSeq != want.MaxSeq || got.LocalityGroup != want.LocalityGroup ||
		!bytes.Equal(got.SmallestKey, want.SmallestKey) || !bytes.Equal(got.LargestKey, want.LargestKey) {
		t.Fatalf("properties:\n got %+v\nwant %+v", got, want)
	}
}

// seekTargets returns keys present in entries and keys near and between
// them, plus extremes.
func seekTargets(rng *rand.Rand, entries []entry, n int) [][]byte {
	targets := [][]byte{nil, {}, {0}, {0xff, 0xff, 0xff}, bytes.Repeat([]byte{0xff}, 100)}
	for len(targets) < n {
		k := entries[rng.IntN(len(entries))].key
		switch rng.IntN(6) {
		case 0, 1:
			targets = append(targets, k)
		case 2:
			targets = append(targets, k[:rng.IntN(len(k))])
		case 3:
			targets = append(targets, append(bytes.Clone(k), 0))
		case 4:
			b := bytes.Clone(k)
			b[len(b)-1]++
			targets = append(targets, b)
		default:
			targets = append(targets, cell.RowPrefix(randomBytes(rng, 10)))
		}
	}
	return targets
}

// checkSeeks compares SeekGE, SeekLT and the Next calls after them with a
// binary search over the reference entries.
func checkSeeks(t *testing.T, it cell.Iterator, entries []entry, targets [][]byte) {
	t.Helper()
	expect := func(op string, target []byte, ok bool, i int) {
		t.Helper()
		if !ok {
			if i >= 0 && i < len(entries) {
				t.Fatalf("%s(%q): no entry (error %v), want entry %d", op, target, it.Error(), i)
			}
			if err := it.Error(); err != nil {
				t.Fatalf("%s(%q): %v", op, target, err)
			}
			return
		}
		if i < 0 || i >= len(entries) {
			t.Fatalf("%s(%q): got %q, want no entry", op, target, it.Key())
		}
		if !bytes.Equal(it.Key(), entries[i].key) || !bytes.Equal(it.Value(), entries[i].value) {
			t.Fatalf("%s(%q): got key %q, want entry %d %q", op, target, it.Key(), i, entries[i].key)
		}
	}
	for _, target := range targets {
		ge := sort.Search(len(entries), func(i int) bool { return bytes.Compare(entries[i].key, target) >= 0 })
		ok := it.SeekGE(target)
		expect("SeekGE", target, ok, ge)
		for j := 1; ok && j <= 3; j++ {
			ok = it.Next()
			expect("Next after SeekGE", target, ok, ge+j)
		}
		lt := ge - 1
		ok = it.SeekLT(target)
		if lt < 0 {
			expect("SeekLT", target, ok, -1)
			continue
		}
		expect("SeekLT", target, ok, lt)
		for j := 1; ok && j <= 3; j++ {
			ok = it.Next()
			expect("Next after SeekLT", target, ok, lt+j)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	entries := randomEntries(rng, 3000, 80<<10)
	targets := seekTargets(rng, entries, 600)
	type variant struct {
		name     string
		wopts    WriterOptions
		inMemory bool
		cache    bool
	}
	var variants []variant
	for _, c := range allCompressions {
		variants = append(variants,
			variant{name: fmt.Sprintf("%v/default", c), wopts: WriterOptions{Compression: c, LocalityGroup: "lg"}},
			variant{name: fmt.Sprintf("%v/small-blocks", c), wopts: WriterOptions{Compression: c, BlockSize: 512, RestartInterval: 4}, cache: true},
			variant{name: fmt.Sprintf("%v/restart-1", c), wopts: WriterOptions{Compression: c, BlockSize: 2048, RestartInterval: 1}, inMemory: true},
			variant{name: fmt.Sprintf("%v/in-memory-cached", c), wopts: WriterOptions{Compression: c, BlockSize: 4096}, inMemory: true, cache: true},
		)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			data, wprops := buildFile(t, entries, v.wopts)
			opts := ReaderOptions{InMemory: v.inMemory}
			if v.cache {
				opts.Cache = NewCache(1 << 20)
				defer opts.Cache.Close()
			}
			r := openBytes(t, data, opts)
			defer r.Close()

			want := wantProperties(entries, v.wopts.LocalityGroup)
			checkProperties(t, wprops, want)
			props := r.Properties()
			checkProperties(t, props, want)
			if props.FileSize != int64(len(data)) || wprops.FileSize != int64(len(data)) {
				t.Fatalf("FileSize: reader %d, writer %d, file %d", props.FileSize, wprops.FileSize, len(data))
			}
			checkIndex(t, r, entries, data, v.wopts.Compression)

			got, err := readAll(r)
			if err != nil {
				t.Fatal(err)
			}
			sameEntries(t, got, entries)

			it := r.NewIterator()
			checkSeeks(t, it, entries, targets)
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkIndex checks that the index tiles the data region, that each block's
// last key is an entry's key, and that the codec was used for some block.
func checkIndex(t *testing.T, r *Reader, entries []entry, data []byte, c Compression) {
	t.Helper()
	idx := r.Index()
	if uint64(len(idx)) != r.Properties().NumDataBlocks {
		t.Fatalf("index has %d entries, properties say %d blocks", len(idx), r.Properties().NumDataBlocks)
	}
	var next int64
	used := false
	pos := 0
	for i, e := range idx {
		if e.Offset != next || e.Length <= trailerLen {
			t.Fatalf("index entry %d: offset %d length %d, want offset %d", i, e.Offset, e.Length, next)
		}
		next = e.Offset + e.Length
		used = used || Compression(data[next-trailerLen]) == c
		for pos < len(entries) && bytes.Compare(entries[pos].key, e.LastKey) < 0 {
			pos++
		}
		if pos == len(entries) || !bytes.Equal(entries[pos].key, e.LastKey) {
			t.Fatalf("index entry %d: last key %q is not an entry", i, e.LastKey)
		}
	}
	if !bytes.Equal(idx[len(idx)-1].LastKey, entries[len(entries)-1].key) {
		t.Fatalf("last block ends at %q, want the last key", idx[len(idx)-1].LastKey)
	}
	if !used {
		t.Fatalf("no data block is stored with %v", c)
	}
}

func TestBlocksRespectBlockSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	entries := randomEntries(rng, 2000, 5000)
	const blockSize = 1024
	data, _ := buildFile(t, entries, WriterOptions{Compression: NoCompression, BlockSize: blockSize})
	r := openBytes(t, data, ReaderOptions{})
	defer r.Close()
	if n := len(r.Index()); n < 100 {
		t.Fatalf("%d blocks for %d entries of 1 KiB blocks", n, len(entries))
	}
	for i, e := range r.Index() {
		b, err := r.dataBlock(i)
		if err != nil {
			t.Fatal(err)
		}
		// A block exceeds the target only when it holds a single entry.
		if len(b.data) > blockSize && b.numRestarts != 1 {
			t.Fatalf("block at %d: %d bytes with %d restarts", e.Offset, len(b.data), b.numRestarts)
		}
	}
}

func TestEmptyFile(t *testing.T) {
	for _, c := range allCompressions {
		data, props := buildFile(t, nil, WriterOptions{Compression: c})
		if props.NumEntries != 0 || props.NumDataBlocks != 0 || props.SmallestKey != nil || props.LargestKey != nil {
			t.Fatalf("%v: properties of an empty file: %+v", c, props)
		}
		r := openBytes(t, data, ReaderOptions{})
		it := r.NewIterator()
		if it.First() || it.SeekGE(nil) || it.SeekLT(bytes.Repeat([]byte{0xff}, 30)) || it.Next() {
			t.Fatalf("%v: iterator of an empty file found an entry", c)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if len(r.Index()) != 0 || r.MayContainRow([]byte("r")) || r.MayContainColumn([]byte("r"), "f", nil) {
			t.Fatalf("%v: empty file claims content", c)
		}
	}
}

func TestIteratorUnpositioned(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	entries := randomEntries(rng, 50, 10)
	data, _ := buildFile(t, entries, WriterOptions{})
	r := openBytes(t, data, ReaderOptions{})
	it := r.NewIterator()
	if it.Next() || it.Key() != nil || it.Value() != nil {
		t.Fatal("Next before positioning found an entry")
	}
	if !it.SeekLT(bytes.Repeat([]byte{0xff}, 40)) || !bytes.Equal(it.Key(), entries[len(entries)-1].key) {
		t.Fatalf("SeekLT(max) = %q, want the last key", it.Key())
	}
	if it.Next() || it.Next() || it.Error() != nil {
		t.Fatalf("Next past the end found an entry (error %v)", it.Error())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	it = r.NewIterator()
	if it.First() || !errors.Is(it.Error(), ErrClosed) {
		t.Fatalf("iterator of a closed reader: error %v, want ErrClosed", it.Error())
	}
}

// failingReaderAt fails every read at or after failFrom.
type failingReaderAt struct {
	*bytes.Reader
	failFrom int64
}

var errDisk = errors.New("disk on fire")

func (f failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.failFrom {
		return 0, errDisk
	}
	return f.Reader.ReadAt(p, off)
}

func TestReadErrorsAreNotCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	entries := randomEntries(rng, 500, 10)
	data, _ := buildFile(t, entries, WriterOptions{BlockSize: 1024})

	_, err := Open(failingReaderAt{bytes.NewReader(data), 0}, "x.sst", ReaderOptions{})
	if !errors.Is(err, errDisk) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open over a failing disk: %v", err)
	}

	r, err := Open(bytes.NewReader(data), "x.sst", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.src = failingReaderAt{bytes.NewReader(data), r.Index()[1].Offset}
	it := r.NewIterator()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if !errors.Is(it.Error(), errDisk) || errors.Is(it.Error(), ErrCorrupt) || n == 0 {
		t.Fatalf("after %d entries: error %v, want the disk's", n, it.Error())
	}
	if it.SeekGE(nil) {
		t.Fatal("iterator kept going after an error")
	}
	if err := it.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close: %v, want the first error", err)
	}
}

// shortReaderAt claims a size larger than the bytes it has.
type shortReaderAt struct {
	*bytes.Reader
	size int64
}

func (s shortReaderAt) Size() int64 { return s.size }

func TestShortReadIsCorruption(t *testing.T) {
	data, _ := buildFile(t, randomEntries(rand.New(rand.NewPCG(9, 10)), 20, 10), WriterOptions{})
	_, err := Open(shortReaderAt{bytes.NewReader(data), int64(len(data)) + 100}, "short.sst", ReaderOptions{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != "short.sst" {
		t.Fatalf("Open with a short read: %v, want a CorruptionError", err)
	}
	_, err = Open(shortReaderAt{bytes.NewReader(data[:100]), int64(len(data))}, "short.sst", ReaderOptions{InMemory: true})
	if !errors.As(err, &ce) || ce.File != "short.sst" {
		t.Fatalf("InMemory Open with a short read: %v, want a CorruptionError", err)
	}
}

// countingReaderAt counts reads, each a request on an object store.
type countingReaderAt struct {
	*bytes.Reader
	reads int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.Reader.ReadAt(p, off)
}

func TestOpenReadsTwice(t *testing.T) {
	data, _ := buildFile(t, randomEntries(rand.New(rand.NewPCG(31, 32)), 500, 10), WriterOptions{BlockSize: 1024})
	src := &countingReaderAt{Reader: bytes.NewReader(data)}
	r, err := Open(src, "x.sst", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if src.reads != 2 {
		t.Fatalf("Open made %d reads, want 2 (footer, then the meta blocks)", src.reads)
	}
	it := r.NewIterator()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil || n != 500 {
		t.Fatalf("read %d entries: %v", n, err)
	}
	if want := 2 + len(r.Index()); src.reads != want {
		t.Fatalf("a scan made %d reads in all, want %d (one per block)", src.reads, want)
	}
}

// TestIteratorCache: iterators lent by one IteratorCache over two files in
// turn answer as fresh ones do, and the cache lets go of each file when
// Done.
func TestIteratorCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var files []*Reader
	var contents [][]entry
	for range 2 {
		entries := randomEntries(rng, 500, 1<<10)
		data, _ := buildFile(t, entries, WriterOptions{BlockSize: 1024})
		r := openBytes(t, data, ReaderOptions{})
		defer r.Close()
		files = append(files, r)
		contents = append(contents, entries)
	}
	var c IteratorCache
	for round := range 6 {
		i := round % 2
		it := c.Iterator(files[i])
		checkSeeks(t, it, contents[i], seekTargets(rng, contents[i], 50))
		if err := c.Done(it); err != nil {
			t.Fatal(err)
		}
		if c.it.r != nil || c.it.bi.b != nil {
			t.Fatalf("round %d: the cache still holds file %d or one of its blocks after Done", round, i)
		}
	}
}
