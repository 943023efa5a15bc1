package sstable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the FuzzReader seed corpus in testdata")

const corpusDir = "testdata/fuzz/FuzzReader"

// fuzzBlockLimit keeps the fuzzer's hostile size claims small.
const fuzzBlockLimit = 64 << 10

// FuzzReader opens arbitrary bytes as an SSTable and reads them every way.
// Nothing may panic, and every error must be a CorruptionError. Because
// checksums stop almost every mutation at the block level, each input is
// also tried with its checksums recomputed, which lets the fuzzer reach the
// decoders of blocks, index, filters and properties.
func FuzzReader(f *testing.F) {
	// One cache for every input, as in a server: it also checks that
	// files of one name never see each other's blocks.
	cache := NewCache(1 << 20)
	f.Cleanup(cache.Close)
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise(t, data, cache)
		if fixed := fixChecksums(data); fixed != nil {
			exercise(t, fixed, cache)
		}
	})
}

func exercise(t *testing.T, data []byte, cache *Cache) {
	for _, inMemory := range []bool{false, true} {
		exerciseOnce(t, data, ReaderOptions{InMemory: inMemory, Cache: cache, blockLimit: fuzzBlockLimit})
	}
}

func exerciseOnce(t *testing.T, data []byte, opts ReaderOptions) {
	mustCorrupt := func(op string, err error) {
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.File != "fuzz.sst" {
			t.Fatalf("%s: %v is not a CorruptionError naming the file", op, err)
		}
	}
	r, err := Open(bytes.NewReader(data), "fuzz.sst", opts)
	if err != nil {
		mustCorrupt("Open", err)
		return
	}
	defer r.Close()
	_ = r.Properties()
	idx := r.Index()
	r.MayContainRow([]byte("row"))
	r.MayContainColumn([]byte("row"), "f", []byte("q"))

	it := r.NewIterator()
	var keys [][]byte
	n := 0
	for ok := it.First(); ok && n < 10000; ok = it.Next() {
		if n%5 == 0 && len(keys) < 8 {
			keys = append(keys, bytes.Clone(it.Key()))
		}
		n++
	}
	if err := it.Error(); err != nil {
		mustCorrupt("scan", err)
	}
	it.Close()
	for i, e := range idx {
		if i%4 == 0 && i < 32 {
			keys = append(keys, e.LastKey)
		}
	}
	keys = append(keys, nil, bytes.Repeat([]byte{0xff}, 24))
	for _, k := range keys {
		it := r.NewIterator()
		if it.SeekGE(k) {
			it.Next()
		}
		if it.SeekLT(k) {
			it.Next()
		}
		if err := it.Close(); err != nil {
			mustCorrupt("seek", err)
		}
	}
}

// fixChecksums returns a copy of data whose footer and block checksums are
// recomputed wherever the footer and index locate blocks, or nil when data
// has no footer.
func fixChecksums(data []byte) []byte {
	if len(data) < footerLen || string(data[len(data)-8:]) != magic {
		return nil
	}
	d := bytes.Clone(data)
	ft := d[len(d)-footerLen:]
	binary.LittleEndian.PutUint32(ft[52:], crc32.Checksum(ft[:52], crcTable))
	fix := func(off, length uint64) []byte {
		if length < trailerLen || off > uint64(len(d)) || length > uint64(len(d))-off {
			return nil
		}
		b := d[off : off+length]
		stored := b[:len(b)-trailerLen]
		c := Compression(b[len(stored)])
		binary.LittleEndian.PutUint32(b[len(stored)+1:], blockChecksum(stored, c))
		raw, err := decompress(stored, c, fuzzBlockLimit)
		if err != nil {
			return nil
		}
		return raw
	}
	var index []byte
	for i := range 3 {
		raw := fix(binary.LittleEndian.Uint64(ft[16*i:]), binary.LittleEndian.Uint64(ft[16*i+8:]))
		if i == 1 {
			index = raw
		}
	}
	if index == nil {
		return d
	}
	b, err := parseBlock(index)
	if err != nil {
		return d
	}
	var it blockIter
	it.init(b)
	ok, err := it.first()
	for n := 0; ok && err == nil && n < 100000; n++ {
		off, k := binary.Uvarint(it.val)
		if k > 0 {
			if length, m := binary.Uvarint(it.val[k:]); m > 0 {
				fix(off, length)
			}
		}
		ok, err = it.step()
	}
	return d
}

// corpusFiles are the seed inputs: small valid files of every codec, with
// and without filters, and an empty one.
func corpusFiles(t testing.TB) map[string][]byte {
	rng := rand.New(rand.NewPCG(41, 42))
	entries := randomEntries(rng, 10, 40)
	for i := range entries {
		// Small seeds make the fuzzer fast, and quick to minimise.
		// Repetitive values let every codec compress the blocks.
		if cell.KindOf(entries[i].key) == cell.KindSet && len(entries[i].value) > 0 {
			entries[i].value = bytes.Repeat([]byte{'v', byte(i)}, 1+i%12)
		}
	}
	files := map[string][]byte{}
	for _, c := range allCompressions {
		files["seed-"+c.String()], _ = buildFile(t, entries, WriterOptions{Compression: c, BlockSize: 256, RestartInterval: 2})
	}
	files["seed-nobloom"], _ = buildFile(t, entries[:4], WriterOptions{BloomBitsPerKey: -1, Compression: NoCompression})
	files["seed-empty"], _ = buildFile(t, nil, WriterOptions{})
	return files
}

// TestFuzzCorpus checks that the committed seed corpus holds valid files of
// every kind; -update-corpus rewrites it from corpusFiles.
func TestFuzzCorpus(t *testing.T) {
	if *updateCorpus {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range corpusFiles(t) {
			text := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := corpusFiles(t)
	for name := range want {
		text, err := os.ReadFile(filepath.Join(corpusDir, name))
		if err != nil {
			t.Fatalf("seed %s: %v (run go test -run TestFuzzCorpus -update-corpus)", name, err)
		}
		data := parseCorpusFile(t, name, string(text))
		r, err := Open(bytes.NewReader(data), name, ReaderOptions{})
		if err != nil {
			t.Fatalf("seed %s does not open: %v", name, err)
		}
		got, err := readAll(r)
		if err != nil {
			t.Fatalf("seed %s: %v", name, err)
		}
		if name != "seed-empty" && len(got) == 0 {
			t.Fatalf("seed %s holds no entries", name)
		}
		for _, c := range allCompressions {
			if name == "seed-"+c.String() && !usesCodec(data, r.Index(), c) {
				t.Fatalf("seed %s has no block stored with %v", name, c)
			}
		}
		for _, e := range got {
			if _, err := cell.DecodeKey(e.key); err != nil {
				t.Fatalf("seed %s: %v", name, err)
			}
		}
	}
}

// parseCorpusFile reads the one []byte value of a "go test fuzz v1" file.
func parseCorpusFile(t *testing.T, name, text string) []byte {
	const header = "go test fuzz v1\n[]byte("
	if !strings.HasPrefix(text, header) || !strings.HasSuffix(text, ")\n") {
		t.Fatalf("seed %s is not a go test fuzz v1 file with one []byte", name)
	}
	s, err := strconv.Unquote(text[len(header) : len(text)-2])
	if err != nil {
		t.Fatalf("seed %s: %v", name, err)
	}
	return []byte(s)
}

// usesCodec reports whether a data block of the file is stored with c.
func usesCodec(data []byte, index []IndexEntry, c Compression) bool {
	for _, e := range index {
		if Compression(data[e.Offset+e.Length-trailerLen]) == c {
			return true
		}
	}
	return false
}
