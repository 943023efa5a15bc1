package sstable

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkDamaged opens a damaged copy of a file and reads it every way. Each
// read must either fail with a CorruptionError that names the file, or
// return exactly the original entries. It reports whether it failed.
func checkDamaged(t *testing.T, data []byte, entries []entry, opts ReaderOptions, what string) (detected bool) {
	t.Helper()
	const name = "damaged.sst"
	mustCorrupt := func(op string, err error) {
		t.Helper()
		var ce *CorruptionError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.File != name {
			t.Fatalf("%s: %s: error %v, want a CorruptionError naming %s", what, op, err, name)
		}
	}
	r, err := Open(bytes.NewReader(data), name, opts)
	if err != nil {
		mustCorrupt("Open", err)
		return true
	}
	defer r.Close()
	got, err := readAll(r)
	if err != nil {
		mustCorrupt("scan", err)
		detected = true
	} else {
		sameEntries(t, got, entries)
	}
	it := r.NewIterator()
	defer it.Close()
	for i := 0; i < len(entries); i += 7 {
		want := entries[i]
		ok := it.SeekGE(want.key)
		if err := it.Error(); err != nil {
			mustCorrupt("SeekGE", err)
			return true
		}
		if !ok || !bytes.Equal(it.Key(), want.key) || !bytes.Equal(it.Value(), want.value) {
			t.Fatalf("%s: SeekGE(%q) returned wrong data without an error", what, want.key)
		}
		ok = it.SeekLT(want.key)
		if err := it.Error(); err != nil {
			mustCorrupt("SeekLT", err)
			return true
		}
		if ok != (i > 0) || (ok && !bytes.Equal(it.Key(), entries[i-1].key)) {
			t.Fatalf("%s: SeekLT(%q) returned wrong data without an error", what, want.key)
		}
	}
	return detected
}

func TestCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	entries := randomEntries(rng, 80, 300)
	for _, c := range allCompressions {
		t.Run(c.String(), func(t *testing.T) {
			data, _ := buildFile(t, entries, WriterOptions{Compression: c, BlockSize: 512, RestartInterval: 3})
			f, err := decodeFooter(data[len(data)-footerLen:], int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			region := func(off int) string {
				switch {
				case uint64(off) < f.filter.offset:
					return "data"
				case uint64(off) < f.index.offset:
					return "filter"
				case uint64(off) < f.properties.offset:
					return "index"
				case off < len(data)-footerLen:
					return "properties"
				}
				return "footer"
			}
			flips := map[string]int{}
			detected := map[string]int{}
			damaged := make([]byte, len(data))
			for off := 0; off < len(data); off++ {
				copy(damaged, data)
				damaged[off] ^= byte(1 + rng.IntN(255))
				// Alternate the read paths so both see every region.
				opts := ReaderOptions{InMemory: off%2 == 1}
				reg := region(off)
				flips[reg]++
				if checkDamaged(t, damaged, entries, opts, fmt.Sprintf("byte %d (%s) flipped", off, reg)) {
					detected[reg]++
				}
			}
			for _, reg := range []string{"data", "filter", "index", "properties", "footer"} {
				if flips[reg] == 0 || detected[reg] == 0 {
					t.Errorf("region %s: %d flips, %d detected", reg, flips[reg], detected[reg])
				}
			}
			t.Logf("flips per region %v, detected %v", flips, detected)

			for n := 0; n < len(data); n++ {
				if !checkDamaged(t, data[:n], entries, ReaderOptions{InMemory: n%2 == 1}, fmt.Sprintf("truncated to %d bytes", n)) {
					t.Fatalf("truncation to %d of %d bytes went unnoticed", n, len(data))
				}
			}
		})
	}
}

func TestCorruptBlockStopsIterator(t *testing.T) {
	entries := randomEntries(rand.New(rand.NewPCG(19, 20)), 300, 10)
	for _, c := range allCompressions {
		data, _ := buildFile(t, entries, WriterOptions{Compression: c, BlockSize: 1024})
		r := openBytes(t, data, ReaderOptions{})
		idx := r.Index()
		if len(idx) < 3 {
			t.Fatalf("%v: only %d blocks", c, len(idx))
		}
		bad := idx[1]
		data[bad.Offset+bad.Length/2] ^= 0x40
		it := r.NewIterator()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		var ce *CorruptionError
		if !errors.As(it.Error(), &ce) || ce.File != "test.sst" || ce.Offset != bad.Offset {
			t.Fatalf("%v: after %d entries: error %v, want corruption at offset %d", c, n, it.Error(), bad.Offset)
		}
		if first := idx[0]; n == 0 || !bytes.Equal(entries[n-1].key, first.LastKey) {
			t.Fatalf("%v: stopped after %d entries, want the whole first block", c, n)
		}
		if it.Next() || it.SeekGE(nil) || it.Key() != nil {
			t.Fatalf("%v: iterator moved after a corruption", c)
		}
		if err := it.Close(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v: Close: %v", c, err)
		}
		// Another iterator can still read the intact blocks.
		it = r.NewIterator()
		if !it.SeekGE(idx[2].LastKey) || !bytes.Equal(it.Key(), idx[2].LastKey) {
			t.Fatalf("%v: intact block unreadable: %v", c, it.Error())
		}
		it.Close()
		r.Close()
	}
}
