package tablet_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tablet"
)

// BenchmarkScanVersions scans a tablet whose rows hold several versions of
// a 1000-byte cell, spread over two SSTables and the memtable, for the
// newest version only — what `tabula bench`'s scan reads after its write
// workloads (the server's ReadRows with a LatestNFilter(1) pushed down).
//
//	go test -run '^$' -bench BenchmarkScanVersions -benchmem ./storage/tablet/
func BenchmarkScanVersions(b *testing.B) {
	ctx := context.Background()
	e := openVersionsEngine(b)
	ro := tablet.ReadOptions{Families: []string{"f"}, MaxVersions: 1}
	b.SetBytes(versionsRows * paperValueBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := 0
		err := e.t.Scan(ctx, tablet.ScanOptions{ReadOptions: ro}, func(row cell.Row) error {
			if len(row.Cells) != 1 || row.Cells[0].Timestamp != versionsCount {
				b.Fatalf("row %q: %d cells", row.Key, len(row.Cells))
			}
			n++
			return nil
		})
		if err != nil || n != versionsRows {
			b.Fatalf("scanned %d rows: %v", n, err)
		}
	}
	b.ReportMetric(float64(b.N*versionsRows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkReadRowVersions reads random rows of the same tablet, the
// newest version only: the point reads of `tabula bench` after its write
// workloads.
func BenchmarkReadRowVersions(b *testing.B) {
	ctx := context.Background()
	e := openVersionsEngine(b)
	ro := tablet.ReadOptions{Families: []string{"f"}, MaxVersions: 1}
	r := rand.New(rand.NewPCG(2, 2))
	b.SetBytes(paperValueBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		row, ok, err := e.t.ReadRow(ctx, paperKey(r.IntN(versionsRows)), ro)
		if err != nil || !ok || len(row.Cells) != 1 || row.Cells[0].Timestamp != versionsCount {
			b.Fatalf("read: ok=%v err=%v", ok, err)
		}
	}
}

const versionsRows, versionsCount = 10_000, 4

// openVersionsEngine returns a tablet of versionsRows rows, each holding
// versionsCount versions of a 1000-byte cell: two in two SSTables, the
// rest in the memtable.
func openVersionsEngine(b *testing.B) *paperEngine {
	const rows, versions = versionsRows, versionsCount
	ctx := context.Background()
	e := openPaperEngine(b, b.TempDir())
	r := rand.New(rand.NewPCG(1, 1))
	for v := 1; v <= versions; v++ {
		for i := range rows {
			rm := cell.RowMutation{Row: paperKey(i), Mutations: []cell.Mutation{cell.Set("f", nil, int64(v), paperValue(r))}}
			if err := e.t.Apply(ctx, rm); err != nil {
				b.Fatal(err)
			}
		}
		if v <= 2 {
			if err := e.t.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return e
}
