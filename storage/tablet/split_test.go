package tablet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestSplitBetweenRows: the split key is the immediate successor of a row
// of the tablet, the left child ends right after that row, both children
// hold rows, and no row is lost — for a tablet whose rows are in SSTables
// of many blocks (samples) and for one whose rows are few (listed).
func TestSplitBetweenRows(t *testing.T) {
	for _, rows := range []int{3, 400} {
		t.Run(fmt.Sprint(rows, " rows"), func(t *testing.T) {
			ctx := context.Background()
			opts := smallTabletOptions(t, 4<<10)
			tb, err := Open(ctx, opts("p"))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for i := range rows {
				row := fmt.Sprintf("row%04d", i)
				want[row] = true
				if err := tb.Apply(ctx, cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{
					cell.Set("f", []byte("q"), 1000, bytes.Repeat([]byte("v"), 40))}}); err != nil {
					t.Fatal(err)
				}
			}
			res, err := tb.SplitBetweenRows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := len(res.Key)
			if n < 2 || res.Key[n-1] != 0 || !want[string(res.Key[:n-1])] {
				t.Fatalf("split key %q: want a row of the tablet followed by 0x00", res.Key)
			}
			got := map[string]bool{}
			var lastLeft string
			for i, st := range []tabletdesc.State{res.Left, res.Right} {
				c, err := Open(ctx, opts(st.ID))
				if err != nil {
					t.Fatal(err)
				}
				count := 0
				if err := c.Scan(ctx, ScanOptions{}, func(r cell.Row) error {
					got[string(r.Key)] = true
					count++
					if i == 0 {
						lastLeft = string(r.Key)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if count == 0 {
					t.Errorf("child %d holds no row", i)
				}
				_ = c.Close()
			}
			if lastLeft != string(res.Key[:n-1]) {
				t.Errorf("left child's last row %q, want the row before the key %q", lastLeft, res.Key)
			}
			if len(got) != len(want) {
				t.Errorf("children hold %d rows, want %d", len(got), len(want))
			}
		})
	}
}

// TestSplitBetweenRowsOneRow: a tablet of one row cannot split between rows.
func TestSplitBetweenRowsOneRow(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	logDir := t.TempDir()
	log, err := commitlog.Open(ctx, commitlog.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	tb, err := Open(ctx, Options{ID: "p", Store: store, Dir: "sst", Log: log, LogOptions: commitlog.Options{Dir: logDir},
		StateStore: NewBlobStateStore(store, "state"), Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("only"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.SplitBetweenRows(ctx); !errors.Is(err, ErrCannotSplit) {
		t.Fatalf("SplitBetweenRows of one row: %v, want ErrCannotSplit", err)
	}
	if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("other"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
		t.Fatalf("the tablet stopped serving after a refused split: %v", err)
	}
}
