package tabletserver

import (
	"errors"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/meta"
)

// CompactTable runs a major compaction on every tablet of the table the
// Host serves, keeping the rows, and names a table it does not serve.
func TestHostCompactTable(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "compact", families: []string{"f"}, splits: []string{"m"}})
	rows := []string{"a", "b", "x", "y"}
	for _, row := range rows {
		m := bigtable.NewMutation()
		m.Set("f", "c", ts(1), []byte("v-"+row))
		if err := tbl.Apply(e.ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	id := meta.TableID{Instance: testInstance, Table: "compact"}
	got, err := e.host.CompactTable(e.ctx, id, true)
	if err != nil || got != 2 {
		t.Fatalf("CompactTable = %d, %v; want 2 tablets", got, err)
	}
	st, err := e.host.table(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range st.list() {
		if s := tb.Stats(); s.Majors != 1 {
			t.Errorf("tablet %s: %d major compactions, want 1", tb.ID(), s.Majors)
		}
	}
	n := 0
	if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true }); err != nil || n != len(rows) {
		t.Fatalf("%d rows after the major compaction (%v), want %d", n, err, len(rows))
	}
	if _, err := e.host.CompactTable(e.ctx, meta.TableID{Instance: testInstance, Table: "nope"}, true); !errors.Is(err, ErrTableNotFound) {
		t.Errorf("CompactTable of an unknown table: %v, want ErrTableNotFound", err)
	}
}
