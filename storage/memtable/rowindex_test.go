package memtable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// randBytes is up to n bytes drawn from alphabet.
func randBytes(r *rand.Rand, alphabet string, n int) []byte {
	b := make([]byte, r.IntN(n+1))
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return b
}

// rowEntries returns the keys of the row whose prefix is prefix, found
// through the row index (SeekRow).
func rowEntries(m *Memtable, prefix []byte) [][]byte {
	var out [][]byte
	it, ok := m.SeekRow(prefix)
	for ; ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		out = append(out, bytes.Clone(it.Key()))
	}
	return out
}

// scanEntries is the same through the skiplist's search.
func scanEntries(m *Memtable, prefix []byte) [][]byte {
	var out [][]byte
	it := m.NewIterator()
	for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		out = append(out, bytes.Clone(it.Key()))
	}
	return out
}

// randInternalKey is a tablet key of one of rows rows: cells of a few
// columns at random timestamps, and the row's, families' and columns'
// deletion markers (which sort first in their row).
func randInternalKey(r *rand.Rand, rows int, seq uint64) []byte {
	k := cell.Key{Row: fmt.Appendf(nil, "row%d", r.IntN(rows)), Seq: seq}
	switch r.IntN(8) {
	case 0:
		k.Kind = cell.KindRowDelete
	case 1:
		k.Kind, k.Family = cell.KindFamilyDelete, "f"
	default:
		k.Kind, k.Family, k.Qualifier, k.Timestamp = cell.KindSet, "f", fmt.Appendf(nil, "q%d", r.IntN(4)), r.Int64N(1000)
	}
	if r.IntN(20) == 0 {
		k.Row = append(k.Row, 0, 'x') // escaped bytes in the row
	}
	return cell.EncodeKey(k)
}

// SeekRow finds exactly what the skiplist's search finds, for every row,
// present or not, as entries of each row arrive in every order (first,
// last and in between in their row), through the index's growth — for
// tablet keys, and for arbitrary bytes (which may or may not have a row
// prefix).
func TestSeekRowMatchesSeekGE(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(r *rand.Rand, seq uint64) []byte
		rows func(r *rand.Rand) []byte // a prefix to look up
	}{{
		name: "tablet keys",
		key:  func(r *rand.Rand, seq uint64) []byte { return randInternalKey(r, 3000, seq) },
		rows: func(r *rand.Rand) []byte {
			row := fmt.Appendf(nil, "row%d", r.IntN(3300)) // some never written
			if r.IntN(20) == 0 {
				row = append(row, 0, 'x')
			}
			return cell.RowPrefix(row)
		},
	}, {
		name: "arbitrary bytes",
		// Over an alphabet with the escape byte and the terminator's
		// second byte, so that some keys have a row prefix (often one of
		// a few short rows) and some are malformed.
		key: func(r *rand.Rand, seq uint64) []byte {
			return append(randBytes(r, "\x00\x01a\xff", 8), fmt.Appendf(nil, "%08d", seq)...)
		},
		rows: func(r *rand.Rand) []byte { return cell.RowPrefix(randBytes(r, "\x00a", 3)) },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				r := rand.New(rand.NewPCG(seed, 7))
				m := New()
				found, absent := 0, 0
				for seq := uint64(1); seq <= 20000; seq++ {
					m.Add(tc.key(r, seq), []byte("v"))
					if seq%2000 == 0 {
						for range 300 {
							p := tc.rows(r)
							got, want := rowEntries(m, p), scanEntries(m, p)
							if len(want) > 0 {
								found++
							} else {
								absent++
							}
							if len(got) != len(want) {
								t.Fatalf("seed %d, %d entries: row %q: SeekRow found %d entries, SeekGE %d", seed, seq, p, len(got), len(want))
							}
							for i := range got {
								if !bytes.Equal(got[i], want[i]) {
									t.Fatalf("seed %d: row %q entry %d: %q, want %q", seed, p, i, got[i], want[i])
								}
							}
						}
					}
				}
				if found == 0 || absent == 0 {
					t.Fatalf("seed %d: %d rows found, %d absent: the lookups must see both", seed, found, absent)
				}
				if x := m.rows.Load(); tc.name == "tablet keys" && len(x.slots) <= firstIndexSlots {
					t.Fatalf("the index never grew: %d slots", len(x.slots))
				}
			}
		})
	}
}

// A reader that looks a row up after an entry of it was published (as a
// tablet publishes a sequence number after the Add) finds that entry,
// while one writer adds entries that become each row's new first node
// (newer versions sort first) and the index grows.
func TestSeekRowConcurrentWithAdd(t *testing.T) {
	const rows = 2000
	m := New()
	var published atomic.Int64 // entries added so far, all findable
	keys := make([][]byte, 0, 40000)
	for i := range 40000 {
		// Timestamps rise, so each later version of a column sorts before
		// the earlier ones (newest first): it becomes its row's first node.
		keys = append(keys, cell.EncodeKey(cell.Key{Row: fmt.Appendf(nil, "r%d", i%rows), Family: "f", Qualifier: []byte("q"),
			Timestamp: int64(i), Seq: uint64(i + 1), Kind: cell.KindSet}))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var failures atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := published.Load()
				if n == 0 {
					continue
				}
				i := r.Int64N(n)
				want := keys[i]
				prefix := want[:cell.RowPrefixLen(want)]
				found := false
				it, ok := m.SeekRow(prefix)
				for ; ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
					if bytes.Equal(it.Key(), want) {
						found = true
						break
					}
				}
				if !found && failures.Add(1) <= 3 {
					t.Errorf("entry %d (%q) published, not found from its row's first node", i, want)
				}
			}
		})
	}
	for i, k := range keys {
		m.Add(k, []byte("v"))
		published.Store(int64(i + 1))
	}
	close(stop)
	wg.Wait()
}

// BenchmarkPointLookup finds a row's first entry in a memtable of n rows
// (65,536: a 64 MiB memtable of 1 KB rows) through the row index and
// through the skiplist's search, for rows it holds and rows it lacks
// (the rows a point read finds in SSTables).
func BenchmarkPointLookup(b *testing.B) {
	for _, n := range []int{1 << 16, 1 << 20} {
		keys := benchKeys(n)
		m := New()
		for _, k := range keys {
			m.Add(k, nil)
		}
		prefixes := make([][]byte, n)
		absent := make([][]byte, n)
		ar := rand.New(rand.NewPCG(9, 9))
		for i, k := range keys {
			prefixes[i] = k[:cell.RowPrefixLen(k)]
			// Among the rows present (benchKeys' rows have no "-").
			absent[i] = cell.RowPrefix(fmt.Appendf(nil, "user%016x-", ar.Uint64()))
		}
		for _, c := range []struct {
			name string
			rows [][]byte
			want bool
		}{{"present", prefixes, true}, {"absent", absent, false}} {
			r := rand.New(rand.NewPCG(1, 2))
			b.Run(fmt.Sprintf("rows=%d/%s/index", n, c.name), func(b *testing.B) {
				for b.Loop() {
					p := c.rows[r.IntN(n)]
					it, ok := m.SeekRow(p)
					if ok := ok && bytes.HasPrefix(it.Key(), p); ok != c.want {
						b.Fatalf("found %v, want %v", ok, c.want)
					}
				}
			})
			b.Run(fmt.Sprintf("rows=%d/%s/skiplist", n, c.name), func(b *testing.B) {
				it := m.NewIterator()
				for b.Loop() {
					p := c.rows[r.IntN(n)]
					ok := it.SeekGE(p) && bytes.HasPrefix(it.Key(), p)
					if ok != c.want {
						b.Fatalf("found %v, want %v", ok, c.want)
					}
				}
			})
		}
	}
}

// BenchmarkAddRows adds one cell to each of 65,536 rows in key order (a
// sequential write) and then a newer version of each in random order (a
// random write: each a new first node of its row), the row index's work
// included.
func BenchmarkAddRows(b *testing.B) {
	const n = 1 << 16
	v := make([]byte, 100)
	var seqKeys, newer [][]byte
	for i := range n {
		row := fmt.Appendf(nil, "user%010d", i)
		seqKeys = append(seqKeys, cell.EncodeKey(cell.Key{Row: row, Family: "f", Qualifier: []byte("q"), Timestamp: 1, Seq: uint64(i + 1), Kind: cell.KindSet}))
		newer = append(newer, cell.EncodeKey(cell.Key{Row: row, Family: "f", Qualifier: []byte("q"), Timestamp: 2, Seq: uint64(n + i + 1), Kind: cell.KindSet}))
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(n, func(i, j int) { newer[i], newer[j] = newer[j], newer[i] })
	for b.Loop() {
		m := New()
		for _, k := range seqKeys {
			m.Add(k, v)
		}
		for _, k := range newer {
			m.Add(k, v)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*n), "ns/add")
}

// Without its index (dropped: see indexRow), a memtable still finds rows,
// by the skiplist's search, and still takes entries.
func TestSeekRowWithoutIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	m := New()
	for seq := uint64(1); seq <= 2000; seq++ {
		if seq == 1000 {
			m.rows.Store(nil)
		}
		m.Add(randInternalKey(r, 300, seq), nil)
	}
	found := 0
	for i := range 330 {
		p := cell.RowPrefix(fmt.Appendf(nil, "row%d", i))
		got, want := rowEntries(m, p), scanEntries(m, p)
		if len(got) != len(want) {
			t.Fatalf("row %q: %d entries, want %d", p, len(got), len(want))
		}
		if len(want) > 0 {
			found++
		}
	}
	if found < 250 {
		t.Fatalf("%d rows found of 300 written", found)
	}
}
