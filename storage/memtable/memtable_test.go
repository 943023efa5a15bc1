package memtable

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

type entry struct{ key, value []byte }

// model is the reference: a sorted slice of entries.
type model []entry

// seekGE returns the index of the first entry with key >= k.
func (md model) seekGE(k []byte) int {
	i, _ := slices.BinarySearchFunc(md, k, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
	return i
}

func randKey(r *rand.Rand) []byte {
	// Short keys over a small alphabet, including 0x00, so that prefixes
	// and near-collisions are common.
	k := make([]byte, r.IntN(6))
	for i := range k {
		k[i] = "\x00ab\xffz"[r.IntN(5)]
	}
	return k
}

func TestMatchesSortedSlice(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed))
			m := New()
			var md model
			it := m.NewIterator()
			defer it.Close()
			for step := 0; step < 3000; step++ {
				k := randKey(r)
				if i := md.seekGE(k); i < len(md) && bytes.Equal(md[i].key, k) {
					continue // keys are unique by contract
				}
				v := []byte(fmt.Sprint("v", step))
				m.Add(k, v)
				i := md.seekGE(k)
				md = slices.Insert(md, i, entry{bytes.Clone(k), v})
				if m.Len() != len(md) {
					t.Fatalf("Len = %d, want %d", m.Len(), len(md))
				}
				if step%50 == 0 {
					checkAll(t, it, md)
				}
				checkSeeks(t, it, md, randKey(r))
			}
			checkAll(t, it, md)
		})
	}
}

// checkAll compares a full forward scan with the model.
func checkAll(t *testing.T, it cell.Iterator, md model) {
	t.Helper()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(md) {
			t.Fatalf("scan has more than %d entries", len(md))
		}
		if !bytes.Equal(it.Key(), md[i].key) || !bytes.Equal(it.Value(), md[i].value) {
			t.Fatalf("entry %d = %q=%q, want %q=%q", i, it.Key(), it.Value(), md[i].key, md[i].value)
		}
		i++
	}
	if i != len(md) {
		t.Fatalf("scan saw %d entries, want %d", i, len(md))
	}
	if it.Next() {
		t.Fatal("Next after the end returned true")
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
}

// checkSeeks compares SeekGE+Next and SeekLT at k with the model.
func checkSeeks(t *testing.T, it cell.Iterator, md model, k []byte) {
	t.Helper()
	i := md.seekGE(k)
	ok := it.SeekGE(k)
	for j := i; j < min(i+3, len(md)); j++ {
		if !ok || !bytes.Equal(it.Key(), md[j].key) {
			t.Fatalf("SeekGE(%q)+%d: at %v %q, want %q", k, j-i, ok, keyOr(it, ok), md[j].key)
		}
		ok = it.Next()
	}
	if i+3 >= len(md) && ok {
		t.Fatalf("SeekGE(%q): iterator went past the end to %q", k, it.Key())
	}
	ok = it.SeekLT(k)
	if i == 0 {
		if ok {
			t.Fatalf("SeekLT(%q) = %q, want none", k, it.Key())
		}
		return
	}
	if !ok || !bytes.Equal(it.Key(), md[i-1].key) || !bytes.Equal(it.Value(), md[i-1].value) {
		t.Fatalf("SeekLT(%q): at %v %q, want %q", k, ok, keyOr(it, ok), md[i-1].key)
	}
	// Next from a SeekLT position continues forward.
	if ok := it.Next(); ok != (i < len(md)) || (ok && !bytes.Equal(it.Key(), md[i].key)) {
		t.Fatalf("SeekLT(%q)+Next: at %v", k, ok)
	}
}

func keyOr(it cell.Iterator, ok bool) []byte {
	if !ok {
		return nil
	}
	return it.Key()
}

func TestEmpty(t *testing.T) {
	m := New()
	it := m.NewIterator()
	if it.First() || it.SeekGE(nil) || it.SeekLT([]byte{0xff}) || it.Next() {
		t.Fatal("empty memtable has entries")
	}
	if m.Len() != 0 || m.Size() != 0 {
		t.Fatalf("Len, Size = %d, %d; want 0, 0", m.Len(), m.Size())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAddCopiesAndKeysAreClipped(t *testing.T) {
	m := New()
	k, v := []byte("k1"), []byte("v1")
	m.Add(k, v)
	m.Add([]byte("k2"), []byte("v2"))
	k[0], v[0] = 'X', 'X' // the caller reuses its buffers
	it := m.NewIterator()
	if !it.First() || string(it.Key()) != "k1" || string(it.Value()) != "v1" {
		t.Fatalf("first entry = %q=%q, want k1=v1", it.Key(), it.Value())
	}
	// Appending to a returned key must not overwrite the arena
	// neighbour (the value, then the next entry).
	_ = append(it.Key(), "ZZZZ"...)
	_ = append(it.Value(), "ZZZZ"...)
	if string(it.Value()) != "v1" || !it.Next() || string(it.Key()) != "k2" || string(it.Value()) != "v2" {
		t.Fatalf("arena neighbour overwritten: %q=%q", it.Key(), it.Value())
	}
}

func TestLargeValues(t *testing.T) {
	m := New()
	var md model
	for i := range 40 {
		k := binary.BigEndian.AppendUint32(nil, uint32(i*7%40))
		v := bytes.Repeat([]byte{byte(i)}, (i%4)*bigEntry/2+i) // around and above the chunk limits
		m.Add(k, v)
		md = slices.Insert(md, md.seekGE(k), entry{k, v})
	}
	checkAll(t, m.NewIterator(), md)
}

func TestSizeGrows(t *testing.T) {
	m := New()
	prev := m.Size()
	var payload int64
	for i := range 1000 {
		k := binary.BigEndian.AppendUint64(nil, uint64(i))
		v := make([]byte, i%100)
		m.Add(k, v)
		payload += int64(len(k) + len(v))
		s := m.Size()
		if s <= prev {
			t.Fatalf("Size after add %d = %d, not above %d", i, s, prev)
		}
		prev = s
	}
	if prev < payload {
		t.Fatalf("Size = %d, below the %d bytes of keys and values", prev, payload)
	}
	if got := m.PayloadBytes(); got != payload {
		t.Fatalf("PayloadBytes = %d, want the %d bytes of keys and values", got, payload)
	}
	// Overhead is per node and bounded: well under 200 bytes per entry.
	if prev > payload+200*1000 {
		t.Fatalf("Size = %d for %d payload bytes: overhead too high", prev, payload)
	}
}

// TestConcurrentReaders runs one writer and several readers under -race.
// Readers check that every scan is sorted, that every entry they see is
// complete (its value is derived from its key), that a scan never misses an
// entry added before it started, and that seeks agree with scans.
func TestConcurrentReaders(t *testing.T) {
	const n = 20000
	m := New()
	keyOf := func(i int) []byte {
		// Spread inserts over the key space so they land between
		// entries readers are walking.
		return binary.BigEndian.AppendUint64([]byte("row"), uint64(i)*0x9E3779B97F4A7C15)
	}
	valueOf := func(k []byte) []byte {
		return bytes.Repeat(k[len(k)-4:], 1+int(k[len(k)-1])%8)
	}

	var added atomic.Int64 // entries fully added
	var scans atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 0))
			it := m.NewIterator()
			defer it.Close()
			// Loop until the writer is done, then once more so every
			// reader also checks the final list.
			for last := false; !last; {
				last = done.Load()
				scans.Add(1)
				before := int(added.Load())
				count := 0
				var prev []byte
				for ok := it.First(); ok; ok = it.Next() {
					k := it.Key()
					if prev != nil && bytes.Compare(prev, k) >= 0 {
						errs <- fmt.Errorf("scan out of order: %x then %x", prev, k)
						return
					}
					if !bytes.Equal(it.Value(), valueOf(k)) {
						errs <- fmt.Errorf("incomplete entry %x = %x", k, it.Value())
						return
					}
					prev = k
					count++
				}
				if count < before {
					errs <- fmt.Errorf("scan saw %d entries, %d were added before it started", count, before)
					return
				}
				// A key already added must be found by SeekGE and
				// be the successor of SeekLT(key+1).
				if before > 0 {
					k := keyOf(rng.IntN(before))
					if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
						errs <- fmt.Errorf("SeekGE(%x) did not find an added key", k)
						return
					}
					if !it.SeekLT(append(bytes.Clone(k), 0)) || !bytes.Equal(it.Key(), k) {
						errs <- fmt.Errorf("SeekLT(%x+0) did not find an added key", k)
						return
					}
				}
			}
		}()
	}
	for i := range n {
		k := keyOf(i)
		m.Add(k, valueOf(k))
		added.Store(int64(i + 1))
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m.Len() != n {
		t.Fatalf("Len = %d, want %d", m.Len(), n)
	}
	t.Logf("%d scans ran concurrently with %d adds", scans.Load(), n)
}

func TestHeightDistribution(t *testing.T) {
	m := New()
	counts := make([]int, maxHeight+1)
	const draws = 1 << 16
	for range draws {
		counts[m.randomHeight()]++
	}
	// P(h=1) = 3/4, P(h=2) = 3/16: allow generous slack.
	if f := float64(counts[1]) / draws; f < 0.72 || f > 0.78 {
		t.Errorf("fraction of height 1 = %.3f, want ~0.75", f)
	}
	if f := float64(counts[2]) / draws; f < 0.17 || f > 0.21 {
		t.Errorf("fraction of height 2 = %.3f, want ~0.1875", f)
	}
	if counts[0] != 0 {
		t.Errorf("height 0 drawn %d times", counts[0])
	}
}

func BenchmarkAdd(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			value := make([]byte, size)
			keys := benchKeys(b.N)
			m := New()
			b.SetBytes(int64(len(keys[0]) + size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if m.Size() > 256<<20 {
					// A tablet flushes long before this; a fresh
					// memtable keeps memory bounded at high b.N.
					b.StopTimer()
					m = New()
					b.StartTimer()
				}
				m.Add(keys[i], value)
			}
		})
	}
}

func BenchmarkSeekGE(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	m := New()
	for _, k := range keys {
		m.Add(k, nil)
	}
	it := m.NewIterator()
	r := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !it.SeekGE(keys[r.IntN(n)]) {
			b.Fatal("key not found")
		}
	}
}

// benchKeys returns n distinct internal keys in random order.
func benchKeys(n int) [][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	keys := make([][]byte, n)
	for i := range keys {
		row := fmt.Appendf(nil, "user%016x", r.Uint64())
		keys[i] = cell.EncodeKey(cell.Key{Row: row, Family: "f", Qualifier: []byte("q"), Timestamp: 1, Seq: uint64(i), Kind: cell.KindSet})
	}
	return keys
}

// TestAscendingRuns adds runs of ascending keys (the finger search of Add)
// that start anywhere — before, inside and after what is there — mixed
// with single random keys, and checks the list against the model.
func TestAscendingRuns(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		r := rand.New(rand.NewPCG(seed, 77))
		m := New()
		var md model
		it := m.NewIterator()
		for run := 0; run < 200; run++ {
			base := r.IntN(1_000_000)
			n := 1 + r.IntN(40)
			if r.IntN(3) == 0 {
				n = 1
			}
			for i := 0; i < n; i++ {
				k := fmt.Appendf(nil, "row%07d/%d", base+i*r.IntN(3), run)
				if j := md.seekGE(k); j < len(md) && bytes.Equal(md[j].key, k) {
					continue
				}
				m.Add(k, k)
				md = slices.Insert(md, md.seekGE(k), entry{bytes.Clone(k), k})
			}
			if run%20 == 0 {
				checkAll(t, it, md)
				checkSeeks(t, it, md, fmt.Appendf(nil, "row%07d", r.IntN(1_000_000)))
			}
		}
		checkAll(t, it, md)
		it.Close()
	}
}

// BenchmarkAddAscending adds keys in order, as sequential writes do.
func BenchmarkAddAscending(b *testing.B) {
	m := New()
	v := make([]byte, 100)
	i := 0
	for b.Loop() {
		m.Add(fmt.Appendf(nil, "row%010d", i), v)
		i++
		if i%1_000_000 == 0 {
			m = New()
		}
	}
}

// TestNodeLayouts: keys of every length around the tower's 8-byte
// alignment and values of every length around a node's rounding, at every
// tower height the draws give, read back exactly and in order; appending to
// a returned key or value never changes another entry.
func TestNodeLayouts(t *testing.T) {
	m := New()
	var md model
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		k := make([]byte, i%70) // 0 to 69 bytes, then two unique ones
		for j := range k {
			k[j] = byte(r.IntN(256))
		}
		k = append(k, byte(i>>8), byte(i))
		if md.seekGE(k) < len(md) && bytes.Equal(md[md.seekGE(k)].key, k) {
			continue
		}
		v := bytes.Repeat([]byte{byte(i)}, i%19)
		m.Add(k, v)
		md = slices.Insert(md, md.seekGE(k), entry{k, v})
	}
	if m.height.Load() < 4 {
		t.Fatalf("list height %d: the draws gave no tall towers", m.height.Load())
	}
	it := m.NewIterator()
	for ok := it.First(); ok; ok = it.Next() {
		_ = append(it.Key(), "ZZZZZZZZ"...)
		_ = append(it.Value(), "ZZZZZZZZ"...)
	}
	checkAll(t, m.NewIterator(), md)
}

// TestArenaHoldsNoPointers: the nodes and values live in pointer-free
// chunks (the collector never scans them), the directory grows as chunks
// are added, and a memtable with one small entry holds two small chunks.
func TestArenaHoldsNoPointers(t *testing.T) {
	m := New()
	m.Add([]byte("k"), []byte("v"))
	// Chunk 0 is never used; then one for nodes and one for values.
	if n := len(*m.chunks.Load()); n != 3 {
		t.Fatalf("directory has %d slots after one small entry, want 3", n)
	}
	for i := range 100000 {
		m.Add(binary.BigEndian.AppendUint64([]byte("row"), uint64(i)), make([]byte, 100))
	}
	dir := *m.chunks.Load()
	// 100k nodes of about 40 bytes and values of 100: chunks of 8 KiB
	// doubling to 1 MiB, then 1 MiB each, for 4 and 10 MB.
	if len(dir) < 20 || len(dir) > 40 {
		t.Fatalf("%d chunks for about 14 MB of nodes and values", len(dir)-1)
	}
	if dir[0] != nil {
		t.Fatal("chunk 0 is used: the zero reference would not be nil")
	}
	if m.Len() != 100001 {
		t.Fatalf("Len = %d", m.Len())
	}
}

// TestSampleSpreadsKeys: Sample visits keys in order about every spacing
// bytes, with offsets close to the bytes of the entries up to each key,
// and ends with the last key and PayloadBytes.
func TestSampleSpreadsKeys(t *testing.T) {
	m := New()
	m.Sample(1<<10, func([]byte, int64) { t.Fatal("an empty memtable gave a sample") })

	const n, valueBytes, spacing = 50_000, 1000, 64 << 10
	r := rand.New(rand.NewPCG(7, 9))
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%09d", r.IntN(1e9)*n+i) // unique, inserted at random
	}
	value := make([]byte, valueBytes)
	for _, k := range keys {
		m.Add(k, value)
	}
	slices.SortFunc(keys, bytes.Compare)
	entryBytes := int64(len(keys[0]) + valueBytes)

	var got [][]byte
	var offsets []int64
	m.Sample(spacing, func(key []byte, offset int64) {
		got = append(got, key)
		offsets = append(offsets, offset)
	})
	payload := m.PayloadBytes()
	if want := int(payload / spacing); len(got) < want/4 || len(got) > want*4 {
		t.Fatalf("%d samples of %d bytes every %d: want about %d", len(got), payload, spacing, want)
	}
	if last := len(got) - 1; !bytes.Equal(got[last], keys[n-1]) || offsets[last] != payload {
		t.Fatalf("last sample %q at %d, want %q at %d", got[last], offsets[last], keys[n-1], payload)
	}
	for i := range got {
		if i > 0 && (bytes.Compare(got[i-1], got[i]) >= 0 || offsets[i-1] >= offsets[i]) {
			t.Fatalf("sample %d (%q at %d) does not follow %q at %d", i, got[i], offsets[i], got[i-1], offsets[i-1])
		}
		rank, found := slices.BinarySearchFunc(keys, got[i], bytes.Compare)
		if !found {
			t.Fatalf("sample %q is not a key of the memtable", got[i])
		}
		// The estimate against the bytes up to and including the key.
		if truth := int64(rank+1) * entryBytes; abs(offsets[i]-truth) > payload/20 {
			t.Fatalf("sample %d at %d, but %d bytes end at its key (payload %d)", i, offsets[i], truth, payload)
		}
	}

	// A memtable smaller than the spacing: its last key alone.
	small := New()
	small.Add([]byte("a"), []byte("1"))
	small.Add([]byte("b"), []byte("2"))
	got = got[:0]
	small.Sample(spacing, func(key []byte, offset int64) {
		got = append(got, key)
		if offset != small.PayloadBytes() {
			t.Fatalf("offset %d, want %d", offset, small.PayloadBytes())
		}
	})
	if len(got) != 1 || string(got[0]) != "b" {
		t.Fatalf("samples of a two-entry memtable: %q", got)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
