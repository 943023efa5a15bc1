package sstable

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/tabuladb/tabula/storage/cell"
)

func TestBloomFilters(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	entries := randomEntries(rng, 4000, 10)
	data, _ := buildFile(t, entries, WriterOptions{})
	r := openBytes(t, data, ReaderOptions{})
	defer r.Close()

	type column struct {
		row  string
		fam  string
		qual string
	}
	rows := map[string]bool{}
	columns := map[column]bool{}
	var rowMarkers, famMarkers int
	for _, e := range entries {
		k, err := cell.DecodeKey(e.key)
		if err != nil {
			t.Fatal(err)
		}
		rows[string(k.Row)] = true
		if !r.MayContainRow(k.Row) {
			t.Fatalf("MayContainRow(%q) = false for a row in the file", k.Row)
		}
		switch k.Kind {
		case cell.KindSet, cell.KindColumnDelete:
			columns[column{string(k.Row), k.Family, string(k.Qualifier)}] = true
			if !r.MayContainColumn(k.Row, k.Family, k.Qualifier) {
				t.Fatalf("MayContainColumn(%q, %q, %q) = false for a column in the file", k.Row, k.Family, k.Qualifier)
			}
		case cell.KindFamilyDelete:
			famMarkers++
			// The marker shadows every column of its family, present or not.
			q := randomBytes(rng, 8)
			if !r.MayContainColumn(k.Row, k.Family, q) {
				t.Fatalf("MayContainColumn(%q, %q, %q) = false under a family marker", k.Row, k.Family, q)
			}
		case cell.KindRowDelete:
			rowMarkers++
			q := randomBytes(rng, 8)
			if !r.MayContainColumn(k.Row, "zz-absent", q) {
				t.Fatalf("MayContainColumn(%q, zz-absent, %q) = false under a row marker", k.Row, q)
			}
		}
	}
	if rowMarkers == 0 || famMarkers == 0 {
		t.Fatalf("test data lacks markers: %d row, %d family", rowMarkers, famMarkers)
	}

	// Absent rows and columns: most must be rejected (10 bits per key give
	// about 1% false positives; allow ten times that).
	const probes = 2000
	var rowFP, colFP, colProbes int
	for i := 0; i < probes; i++ {
		row := append([]byte("absent-"), randomBytes(rng, 10)...)
		if rows[string(row)] {
			continue
		}
		if r.MayContainRow(row) {
			rowFP++
		}
	}
	for i := 0; i < probes; i++ {
		// Absent columns of rows that exist but have no row marker.
		e := entries[rng.IntN(len(entries))]
		k, _ := cell.DecodeKey(e.key)
		c := column{string(k.Row), "absent", string(randomBytes(rng, 8))}
		if columns[c] || hasRowMarker(entries, k.Row) {
			continue
		}
		colProbes++
		if r.MayContainColumn([]byte(c.row), c.fam, []byte(c.qual)) {
			colFP++
		}
	}
	if rowFP > probes/10 || colProbes < probes/2 || colFP > colProbes/10 {
		t.Fatalf("false positives: rows %d/%d, columns %d/%d", rowFP, probes, colFP, colProbes)
	}
}

func hasRowMarker(entries []entry, row []byte) bool {
	marker := cell.RowPrefix(row)
	for _, e := range entries {
		if cell.KindOf(e.key) == cell.KindRowDelete && bytes.HasPrefix(e.key, marker) && cell.RowPrefixLen(e.key) == len(marker) {
			return true
		}
	}
	return false
}

func TestNoBloomFilters(t *testing.T) {
	entries := randomEntries(rand.New(rand.NewPCG(13, 14)), 100, 10)
	data, _ := buildFile(t, entries, WriterOptions{BloomBitsPerKey: -1})
	r := openBytes(t, data, ReaderOptions{})
	defer r.Close()
	if r.rowFilter != nil || r.colFilter != nil {
		t.Fatal("filters written with BloomBitsPerKey < 0")
	}
	if !r.MayContainRow([]byte("nope")) || !r.MayContainColumn([]byte("nope"), "f", []byte("q")) {
		t.Fatal("a file without filters must answer maybe")
	}
}

func TestFamilyPrefixOfColumnPrefix(t *testing.T) {
	// MayContainColumn slices the family and row prefixes out of the
	// column prefix; they must equal cell's own encodings.
	for _, tc := range []struct {
		row, fam, qual string
	}{
		{"", "", ""}, {"r", "f", "q"}, {"a\x00b", "f\x00", "\x00\x00"}, {"\xff\x00", "fam", ""},
	} {
		col := cell.ColumnPrefix([]byte(tc.row), tc.fam, []byte(tc.qual))
		rowLen := cell.RowPrefixLen(col)
		famLen := rowLen + 1 + escapedLen(tc.fam)
		if !bytes.Equal(col[:rowLen], cell.RowPrefix([]byte(tc.row))) ||
			!bytes.Equal(col[:famLen], cell.FamilyPrefix([]byte(tc.row), tc.fam)) {
			t.Fatalf("%q: prefixes of %q do not match cell's", tc, col)
		}
	}
}

func TestDecodeFilterRejectsBadSizes(t *testing.T) {
	f := filterBuilder{}
	f.add([]byte("k"))
	for format, tc := range map[string]struct {
		good    []byte
		mutants map[string]func(b []byte)
	}{
		"blocked": {f.build(10), map[string]func(b []byte){
			"bad magic":        func(b []byte) { b[0] = 'B' },
			"version 1":        func(b []byte) { b[8] = 1 },
			"huge block count": func(b []byte) { b[15] = 0x7f },
			"zero k":           func(b []byte) { copy(b[16:20], make([]byte, 4)) },
			"huge k":           func(b []byte) { b[17] = 1 },
			"another hash":     func(b []byte) { b[20] = 'X' },
		}},
		"classic": {buildClassicFilter(f.hashes, 10), map[string]func(b []byte){
			"huge m":    func(b []byte) { b[0] = 0x7f },
			"zero k":    func(b []byte) { copy(b[8:16], make([]byte, 8)) },
			"huge k":    func(b []byte) { b[8] = 1 },
			"bits != m": func(b []byte) { b[23]++ },
		}},
	} {
		if _, err := decodeFilter(tc.good); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		for name, mutate := range tc.mutants {
			b := bytes.Clone(tc.good)
			mutate(b)
			if _, err := decodeFilter(b); err == nil {
				t.Errorf("%s, %s: accepted", format, name)
			}
		}
		if _, err := decodeFilter(tc.good[:len(tc.good)-8]); err == nil {
			t.Errorf("%s: short filter accepted", format)
		}
	}
}

// buildClassicFilter builds a filter as files written before blocked
// filters hold it (bits-and-blooms' format, k = ln 2 · bits per key).
func buildClassicFilter(hashes []uint64, bitsPerKey int) []byte {
	m := max(64, uint(len(hashes))*uint(bitsPerKey))
	k := uint(min(30, max(1, math.Round(float64(bitsPerKey)*math.Ln2))))
	bf := bloom.New(m, k)
	var b [8]byte
	for _, h := range hashes {
		binary.LittleEndian.PutUint64(b[:], h)
		bf.Add(b[:])
	}
	data, err := bf.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return data
}

// TestClassicFiltersStillAnswer: files written before blocked filters keep
// working — every key added is found, and most absent ones are not.
func TestClassicFiltersStillAnswer(t *testing.T) {
	var fb filterBuilder
	for i := range 5000 {
		fb.add(fmt.Appendf(nil, "row%05d", i))
	}
	for format, data := range map[string][]byte{"blocked": fb.build(10), "classic": buildClassicFilter(fb.hashes, 10)} {
		f, err := decodeFilter(data)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if (f.blocked != nil) != (format == "blocked") {
			t.Fatalf("%s: decoded as the other format", format)
		}
		for i := range 5000 {
			if k := fmt.Appendf(nil, "row%05d", i); !f.mayContain(k) {
				t.Fatalf("%s: %s added, not found", format, k)
			}
		}
		fp := 0
		for i := range 5000 {
			if f.mayContain(fmt.Appendf(nil, "absent%05d", i)) {
				fp++
			}
		}
		// Ten bits a key: about 1% (classic) and 1.2% (blocked); allow 3%.
		if fp > 150 {
			t.Errorf("%s: %d false positives in 5000", format, fp)
		}
		t.Logf("%s: %d bytes, %d false positives in 5000", format, len(data), fp)
	}
}

// TestMayContainRowOutsideTheKeyRange: a row sorting before the file's
// first row or after its last is rejected by the key range alone, even
// without filters; rows inside the range are left to the filter.
func TestMayContainRowOutsideTheKeyRange(t *testing.T) {
	var entries []entry
	for i, row := range []string{"b", "b\x00", "bb", "c"} {
		entries = append(entries, entry{key: cell.EncodeKey(cell.Key{Row: []byte(row), Family: "f", Kind: cell.KindSet, Timestamp: 1, Seq: uint64(i + 1)}), value: []byte("v")})
	}
	data, _ := buildFile(t, entries, WriterOptions{BloomBitsPerKey: -1})
	r := openBytes(t, data, ReaderOptions{})
	defer r.Close()
	for row, want := range map[string]bool{
		"": false, "a": false, "a\xff\xff": false, "\x00": false, "d": false, "c\x00": false, "ca": false,
		"b": true, "b\x00": true, "bb": true, "c": true, "ba": true, // "ba": in range; no filter to ask
	} {
		if got := r.MayContainRow([]byte(row)); got != want {
			t.Errorf("MayContainRow(%q) = %v, want %v", row, got, want)
		}
		if got := r.MayContainRowPrefix(cell.RowPrefix([]byte(row))); got != want {
			t.Errorf("MayContainRowPrefix(RowPrefix(%q)) = %v, want %v", row, got, want)
		}
	}
}

// BenchmarkFilters builds and probes the filter of a file of a million
// rows (1.25 MB at ten bits a key, past the L2 cache) in both formats.
func BenchmarkFilters(b *testing.B) {
	const n = 1_000_000
	var fb filterBuilder
	for i := range n {
		fb.add(fmt.Appendf(nil, "row%010d", i))
	}
	for _, format := range []string{"blocked", "classic"} {
		build := func() []byte {
			if format == "blocked" {
				return fb.build(10)
			}
			return buildClassicFilter(fb.hashes, 10)
		}
		b.Run(format+"/build", func(b *testing.B) {
			for b.Loop() {
				build()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/key")
		})
		f, err := decodeFilter(build())
		if err != nil {
			b.Fatal(err)
		}
		keys := make([][]byte, 1<<16)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "row%010d", rng.IntN(2*n)) // half present
		}
		b.Run(format+"/probe", func(b *testing.B) {
			i := 0
			for b.Loop() {
				f.mayContain(keys[i&(len(keys)-1)])
				i++
			}
		})
	}
}
