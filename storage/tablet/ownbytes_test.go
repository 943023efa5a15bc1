package tablet

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// lastSampleOffset is what OwnBytes must equal: the last SampleKeys
// offset, zero without samples.
func lastSampleOffset(t *testing.T, tb *Tablet) int64 {
	t.Helper()
	s, err := tb.SampleKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Offset
}

// TestOwnBytesMatchesSamples: OwnBytes, computed without walking the
// memtables, equals the last SampleKeys offset — empty, with rows in the
// memtable only, in SSTables and the memtable, and in both children of a
// split that share the parent's SSTables.
func TestOwnBytesMatchesSamples(t *testing.T) {
	ctx := context.Background()
	opts := smallTabletOptions(t, 16<<10)
	check := func(what string, tb *Tablet) int64 {
		t.Helper()
		got, err := tb.OwnBytes()
		if err != nil {
			t.Fatal(err)
		}
		if want := lastSampleOffset(t, tb); got != want {
			t.Fatalf("%s: OwnBytes %d, last sample offset %d", what, got, want)
		}
		return got
	}
	tb, err := Open(ctx, opts("p"))
	if err != nil {
		t.Fatal(err)
	}
	if n := check("empty", tb); n != 0 {
		t.Fatalf("empty tablet: %d bytes", n)
	}
	write := func(from, to int) {
		for i := from; i < to; i++ {
			if err := tb.Apply(ctx, cell.RowMutation{Row: fmt.Appendf(nil, "row%05d", i*7919%10007), Mutations: []cell.Mutation{
				cell.Set("f", []byte("q"), 1000, bytes.Repeat([]byte("v"), 60))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 50)
	if n := check("memtable only", tb); n == 0 {
		t.Fatal("50 rows in the memtable weigh nothing")
	}
	write(50, 900)
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	write(900, 1000) // some in the memtable again
	before := check("SSTables and memtable", tb)
	res, err := tb.Split(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, st := range []tabletdesc.State{res.Left, res.Right} {
		c, err := Open(ctx, opts(st.ID))
		if err != nil {
			t.Fatal(err)
		}
		n := check("child "+st.ID, c)
		if n == 0 || n >= before {
			t.Fatalf("child %s: %d bytes of the parent's %d", st.ID, n, before)
		}
		sum += n
		c.Close()
	}
	if sum < before*9/10 {
		t.Fatalf("children weigh %d together, the parent %d", sum, before)
	}
}

// smallTabletOptions returns the Options of tablets of one family "f"
// whose SSTables have blocks of 256 bytes (many blocks: samples) and whose
// memtables flush at memtableBytes, over one in-memory store and one
// commit log in a temporary directory (closed when t ends).
func smallTabletOptions(t *testing.T, memtableBytes int64) func(id string) Options {
	t.Helper()
	store := blob.NewMemory()
	logDir := t.TempDir()
	log, err := commitlog.Open(context.Background(), commitlog.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return func(id string) Options {
		return Options{
			ID: id, Store: store, Dir: "sst", Log: log, LogOptions: commitlog.Options{Dir: logDir},
			StateStore: NewBlobStateStore(store, "state"), MemtableBytes: memtableBytes,
			Schema: tabletdesc.Schema{
				Families:       map[string]tabletdesc.Family{"f": {}},
				LocalityGroups: map[string]tabletdesc.LocalityGroup{"default": {BlockSize: 256}},
			},
		}
	}
}
