package cell

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// compareKeys is the reference order of internal keys, written from the data
// model's definition rather than from the encoding.
func compareKeys(a, b Key) int {
	if c := bytes.Compare(a.Row, b.Row); c != 0 {
		return c
	}
	// Row markers come before any family; family markers before any column.
	depth := func(k Key) int {
		switch k.Kind {
		case KindRowDelete:
			return 0
		case KindFamilyDelete:
			return 1
		}
		return 2
	}
	da, db := depth(a), depth(b)
	if da == 0 || db == 0 {
		if da != db {
			return da - db
		}
	} else {
		if a.Family != b.Family {
			if a.Family < b.Family {
				return -1
			}
			return 1
		}
		if da != db {
			return da - db
		}
		if da == 2 {
			if c := bytes.Compare(a.Qualifier, b.Qualifier); c != 0 {
				return c
			}
		}
	}
	ts := func(k Key) int64 {
		if k.Kind != KindSet {
			return math.MaxInt64
		}
		return k.Timestamp
	}
	if ts(a) != ts(b) {
		if ts(a) > ts(b) {
			return -1
		}
		return 1
	}
	if a.Seq != b.Seq {
		if a.Seq > b.Seq {
			return -1
		}
		return 1
	}
	return int(a.Kind) - int(b.Kind)
}

func randomKey(r *rand.Rand) Key {
	pick := func(n int) []byte {
		b := make([]byte, r.IntN(n))
		for i := range b {
			b[i] = []byte{0, 1, 0xFF, 'a', 'b'}[r.IntN(5)]
		}
		return b
	}
	k := Key{Row: pick(4), Seq: uint64(r.IntN(4)), Kind: Kind(1 + r.IntN(4))}
	if len(k.Row) == 0 {
		k.Row = []byte{'r'}
	}
	if k.Kind != KindRowDelete {
		k.Family = []string{"a", "a.b", "b", "b-"}[r.IntN(4)]
	}
	if k.Kind == KindSet || k.Kind == KindColumnDelete {
		k.Qualifier = pick(3)
	}
	if k.Kind == KindSet {
		k.Timestamp = int64(r.IntN(3))
		if r.IntN(10) == 0 {
			k.Timestamp = MaxTimestamp
		}
	} else {
		k.Timestamp = math.MaxInt64
	}
	return k
}

func TestKeyOrderMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]Key, 3000)
	for i := range keys {
		keys[i] = randomKey(r)
	}
	sort.Slice(keys, func(i, j int) bool { return compareKeys(keys[i], keys[j]) < 0 })
	for i := 1; i < len(keys); i++ {
		a, b := EncodeKey(keys[i-1]), EncodeKey(keys[i])
		want := compareKeys(keys[i-1], keys[i])
		got := bytes.Compare(a, b)
		if (want < 0) != (got < 0) || (want == 0) != (got == 0) {
			t.Fatalf("order of %+v and %+v: model %d, encoding %d", keys[i-1], keys[i], want, got)
		}
	}
}

func TestKeyRoundTripAndPrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		k := randomKey(r)
		enc := EncodeKey(k)
		got, err := DecodeKey(enc)
		if err != nil {
			t.Fatalf("decode %+v: %v", k, err)
		}
		if !bytes.Equal(got.Row, k.Row) || got.Family != k.Family || !bytes.Equal(got.Qualifier, k.Qualifier) ||
			got.Timestamp != k.Timestamp || got.Seq != k.Seq || got.Kind != k.Kind {
			t.Fatalf("round trip: got %+v want %+v", got, k)
		}
		if Seq(enc) != k.Seq || KindOf(enc) != k.Kind {
			t.Fatalf("Seq/KindOf of %+v", k)
		}
		rp := RowPrefix(k.Row)
		if !bytes.HasPrefix(enc, rp) || RowPrefixLen(enc) != len(rp) {
			t.Fatalf("row prefix of %+v", k)
		}
		if k.Kind == KindSet && !bytes.HasPrefix(enc, ColumnPrefix(k.Row, k.Family, k.Qualifier)) {
			t.Fatalf("column prefix of %+v", k)
		}
		// A longer row that extends this one sorts after every key of it.
		if bytes.Compare(enc, RowPrefix(append(bytes.Clone(k.Row), 0))) >= 0 {
			t.Fatalf("key %+v not below the next row", k)
		}
	}
}

func TestTimeRangeRoundTrip(t *testing.T) {
	s, e, err := DecodeTimeRange(EncodeTimeRange(5, 0))
	if err != nil || s != 5 || e != math.MaxInt64 {
		t.Fatalf("got %d %d %v", s, e, err)
	}
	if _, _, err := DecodeTimeRange([]byte{1}); err == nil {
		t.Fatal("short range decoded")
	}
}

func FuzzDecodeKey(f *testing.F) {
	f.Add(EncodeKey(Key{Row: []byte("row"), Family: "f", Qualifier: []byte("q\x00"), Timestamp: 7, Seq: 9, Kind: KindSet}))
	f.Add(EncodeKey(Key{Row: []byte("r\x00"), Kind: KindRowDelete, Seq: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := DecodeKey(b)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeKey(k), b) {
			t.Fatalf("decoded %+v does not re-encode to the input", k)
		}
	})
}
