package tablet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tablet"
)

// TestScanRowsStayIntact: every row a scan returns stays as it was
// returned while the scan goes on and after it ends — rows share the
// scan's key and cell slabs, and their values alias memtable arenas and
// SSTable blocks — and equals what ReadRow (which shares nothing)
// returns for it. Rows of several versions and columns, spread over two
// SSTables and the memtable; forward and reverse, all versions and the
// newest only; appending to a row's cells must not reach its neighbour.
func TestScanRowsStayIntact(t *testing.T) {
	ctx := context.Background()
	e := openPaperEngine(t, t.TempDir())
	r := rand.New(rand.NewPCG(5, 3))
	const rows = 3000
	for v := 1; v <= 3; v++ {
		for i := range rows {
			if r.IntN(3) == 0 {
				continue
			}
			var ms []cell.Mutation
			for q := range 1 + r.IntN(3) {
				val := make([]byte, r.IntN(1500))
				for j := range val {
					val[j] = byte(r.IntN(256))
				}
				ms = append(ms, cell.Set("f", fmt.Appendf(nil, "q%d", q), int64(v), val))
			}
			if err := e.t.Apply(ctx, cell.RowMutation{Row: paperKey(i), Mutations: ms}); err != nil {
				t.Fatal(err)
			}
		}
		if v < 3 {
			if err := e.t.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, reverse := range []bool{false, true} {
		for _, ro := range []tablet.ReadOptions{{}, {Families: []string{"f"}, MaxVersions: 1}} {
			var kept []cell.Row
			err := e.t.Scan(ctx, tablet.ScanOptions{Reverse: reverse, ReadOptions: ro}, func(row cell.Row) error {
				kept = append(kept, row)
				// A caller appending to a row's cells gets a copy.
				_ = append(row.Cells, cell.Cell{Family: "x", Value: []byte("overwrite")})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(kept) < rows/2 {
				t.Fatalf("scan returned %d rows", len(kept))
			}
			for _, row := range kept {
				want, ok, err := e.t.ReadRow(ctx, row.Key, ro)
				if err != nil || !ok {
					t.Fatalf("read %q: ok=%v err=%v", row.Key, ok, err)
				}
				if !reflect.DeepEqual(row, want) {
					t.Fatalf("reverse=%v %+v: row %q changed after the scan returned it:\n got %v\nwant %v", reverse, ro, row.Key, row, want)
				}
			}
		}
	}
}
