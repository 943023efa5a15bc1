package shuffle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

type kv struct{ k, v string }

func hashPart(n int) func([]byte) int {
	return func(k []byte) int {
		h := fnv.New32a()
		h.Write(k)
		return int(h.Sum32() % uint32(n))
	}
}

// readPartition reads a partition file's records.
func readPartition(t *testing.T, path string) []kv {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewReader(f)
	var out []kv
	for r.Next() {
		out = append(out, kv{string(r.Key()), string(r.Value())})
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func randomRecords(n, keys int, seed uint64) []kv {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]kv, n)
	for i := range out {
		out[i] = kv{fmt.Sprintf("key-%06d", r.IntN(keys)), fmt.Sprintf("v%d-%s", i, bytes.Repeat([]byte("x"), r.IntN(200)))}
	}
	return out
}

// TestSorterSpillsAndSorts: records many times the memory budget come out
// complete (same multiset) and sorted in each partition, through several
// runs, with and without multi-pass merging; the buffer's accounted
// memory never exceeds the budget.
func TestSorterSpillsAndSorts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		records     int
		memory      int64
		parts       int
		mergeFactor int
		wantRuns    bool
	}{
		{"in memory", 2000, 64 << 20, 3, 0, false},
		{"spills", 40000, 256 << 10, 4, 0, true},
		{"multi-pass merge", 40000, 256 << 10, 2, 3, true},
		{"one partition", 10000, 64 << 10, 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := randomRecords(tc.records, tc.records/3, 7)
			s := NewSorter(SorterConfig{Dir: dir, Memory: tc.memory, Partitions: tc.parts, Partition: hashPart(tc.parts), MergeFactor: tc.mergeFactor})
			for _, r := range in {
				if err := s.Add([]byte(r.k), []byte(r.v)); err != nil {
					t.Fatal(err)
				}
			}
			sizes, err := s.Finish()
			if err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if (st.Runs > 1) != tc.wantRuns {
				t.Errorf("runs = %d, want spilling %v (input %d bytes, budget %d)", st.Runs, tc.wantRuns, st.Bytes, tc.memory)
			}
			if st.PeakMemory > max(tc.memory, 64<<10) {
				t.Errorf("peak accounted memory %d exceeds the budget %d", st.PeakMemory, tc.memory)
			}
			var got []kv
			for p := 0; p < tc.parts; p++ {
				recs := readPartition(t, PartitionFile(dir, p))
				fi, _ := os.Stat(PartitionFile(dir, p))
				if fi.Size() != sizes[p] {
					t.Errorf("partition %d: size %d, Finish said %d", p, fi.Size(), sizes[p])
				}
				for i, r := range recs {
					if hashPart(tc.parts)([]byte(r.k)) != p {
						t.Fatalf("key %q in partition %d", r.k, p)
					}
					if i > 0 && recs[i-1].k > r.k {
						t.Fatalf("partition %d unsorted at %d: %q after %q", p, i, r.k, recs[i-1].k)
					}
				}
				got = append(got, recs...)
			}
			cmp := func(a, b kv) int {
				if c := bytes.Compare([]byte(a.k), []byte(b.k)); c != 0 {
					return c
				}
				return bytes.Compare([]byte(a.v), []byte(b.v))
			}
			want := slices.Clone(in)
			slices.SortFunc(want, cmp)
			slices.SortFunc(got, cmp)
			if !slices.Equal(got, want) {
				t.Fatalf("output differs from input: %d records, want %d", len(got), len(want))
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != tc.parts {
				t.Errorf("dir holds %d files after Finish, want only the %d partitions", len(ents), tc.parts)
			}
		})
	}
}

func sumCombine(key []byte, values iter.Seq[[]byte], emit func([]byte) error) error {
	var n uint64
	for v := range values {
		n += binary.BigEndian.Uint64(v)
	}
	return emit(binary.BigEndian.AppendUint64(nil, n))
}

// TestSorterCombines: a summing combiner applied at spills and merges
// leaves one record per key per map, with the right sums, and fewer
// records out than in.
func TestSorterCombines(t *testing.T) {
	dir := t.TempDir()
	s := NewSorter(SorterConfig{Dir: dir, Memory: 64 << 10, Partitions: 2, Partition: hashPart(2), Combine: sumCombine})
	want := map[string]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	one := binary.BigEndian.AppendUint64(nil, 1)
	for range 100000 {
		k := fmt.Sprintf("word%04d", r.IntN(500))
		want[k]++
		if err := s.Add([]byte(k), one); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for p := range 2 {
		for _, rec := range readPartition(t, PartitionFile(dir, p)) {
			if _, dup := got[rec.k]; dup {
				t.Fatalf("key %q twice after combining", rec.k)
			}
			got[rec.k] = binary.BigEndian.Uint64([]byte(rec.v))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s = %d, want %d", k, got[k], n)
		}
	}
	st := s.Stats()
	if st.Runs < 2 || st.CombineIn <= st.CombineOut || st.OutputRecords != int64(len(want)) {
		t.Errorf("stats %+v: want ≥ 2 runs, combine in > out, output records = %d", st, len(want))
	}
}

// TestGroup: the merged stream of several sorted sources is grouped by
// key, in key order, values in source order; a reducer that stops early
// skips the rest of its key.
func TestGroup(t *testing.T) {
	srcs := [][]kv{
		{{"a", "1"}, {"b", "1"}, {"b", "2"}, {"d", "1"}},
		{{"a", "2"}, {"c", "1"}, {"d", "2"}},
		{},
		{{"b", "3"}, {"d", "3"}, {"e", "1"}},
	}
	var readers []io.Reader
	for _, s := range srcs {
		var b []byte
		for _, r := range s {
			b = AppendRecord(b, []byte(r.k), []byte(r.v))
		}
		readers = append(readers, bytes.NewReader(b))
	}
	var got []string
	err := Group(NewMerger(readers), func(key []byte, values iter.Seq[[]byte]) error {
		s := string(key) + ":"
		for v := range values {
			s += string(v)
			if string(key) == "d" && string(v) == "2" {
				break // skip d's third value
			}
		}
		got = append(got, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a:12", "b:123", "c:1", "d:12", "e:1"}
	if !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

// TestReaderCorrupt: truncated and oversized records are errors, not
// panics.
func TestReaderCorrupt(t *testing.T) {
	good := AppendRecord(nil, []byte("key"), []byte("value"))
	for name, b := range map[string][]byte{
		"truncated value": good[:len(good)-1],
		"truncated key":   good[:3],
		"huge length":     binary.AppendUvarint(nil, MaxRecordPart+1),
		"no value length": AppendRecord(nil, []byte("k"), nil)[:2],
	} {
		r := NewReader(bytes.NewReader(b))
		for r.Next() {
		}
		if r.Err() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
