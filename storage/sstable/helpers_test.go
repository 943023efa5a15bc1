package sstable

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

type entry struct{ key, value []byte }

var allCompressions = []Compression{NoCompression, SnappyCompression, ZstdCompression}

// randomRow draws from a small alphabet that includes the escape byte 0x00
// and 0xff, so escaping and its ordering are exercised.
func randomBytes(rng *rand.Rand, maxLen int) []byte {
	const alphabet = "\x00\x01abcxyz\xfe\xff"
	b := make([]byte, rng.IntN(maxLen+1))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return b
}

// compressibleValue alternates runs of noise with runs of a repeated
// pattern, so every codec compresses it, but not to nothing.
func compressibleValue(rng *rand.Rand, n int) []byte {
	const pattern = "tabula-value-0123456789-abcdefghijklmnopqrstuvwxyz-"
	v := make([]byte, 0, n)
	for len(v) < n {
		run := min(n-len(v), 4+rng.IntN(28))
		if rng.IntN(2) == 0 {
			for range run {
				v = append(v, byte(rng.IntN(256)))
			}
		} else {
			start := rng.IntN(len(pattern) - run + 1)
			v = append(v, pattern[start:start+run]...)
		}
	}
	return v
}

// randomEntries returns n distinct entries of every kind, sorted by key,
// spread over about n/6 rows. Values range from empty to bigValue bytes.
func randomEntries(rng *rand.Rand, n, bigValue int) []entry {
	rows := make([][]byte, n/6+1)
	for i := range rows {
		rows[i] = randomBytes(rng, 10)
	}
	families := []string{"a", "cf", "f0", "meta"}
	seen := make(map[string]bool, n)
	out := make([]entry, 0, n)
	for len(out) < n {
		k := cell.Key{
			Row:       rows[rng.IntN(len(rows))],
			Family:    families[rng.IntN(len(families))],
			Qualifier: randomBytes(rng, 6),
			Timestamp: rng.Int64N(1 << 50),
			Seq:       rng.Uint64N(1 << 40),
			Kind:      cell.KindSet,
		}
		var value []byte
		switch r := rng.IntN(100); {
		case r < 4:
			k.Kind = cell.KindRowDelete
		case r < 8:
			k.Kind = cell.KindFamilyDelete
		case r < 12:
			k.Kind = cell.KindColumnDelete
			value = cell.EncodeTimeRange(k.Timestamp/2, k.Timestamp)
		case r < 20:
			value = []byte{}
		case r < 80:
			value = compressibleValue(rng, rng.IntN(100))
		case r < 98:
			value = compressibleValue(rng, 100+rng.IntN(1900))
		default:
			value = compressibleValue(rng, bigValue)
		}
		key := cell.EncodeKey(k)
		if seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		out = append(out, entry{key, value})
	}
	slices.SortFunc(out, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	return out
}

// buildFile writes entries into a new file and returns its bytes.
func buildFile(t testing.TB, entries []entry, opts WriterOptions) ([]byte, Properties) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range entries {
		if err := w.Add(e.key, e.value); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	props, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if props.FileSize != int64(buf.Len()) {
		t.Fatalf("Finish: FileSize %d, wrote %d bytes", props.FileSize, buf.Len())
	}
	return buf.Bytes(), props
}

func openBytes(t testing.TB, data []byte, opts ReaderOptions) *Reader {
	t.Helper()
	r, err := Open(bytes.NewReader(data), "test.sst", opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

// readAll iterates the whole file forwards.
func readAll(r *Reader) ([]entry, error) {
	it := r.NewIterator()
	var out []entry
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, entry{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	err := it.Error()
	if cerr := it.Close(); cerr != err {
		return out, cerr
	}
	return out, err
}

func sameEntries(t testing.TB, got, want []entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].value, want[i].value) {
			t.Fatalf("entry %d: got (%q, %d-byte value), want (%q, %d-byte value)",
				i, got[i].key, len(got[i].value), want[i].key, len(want[i].value))
		}
	}
}
