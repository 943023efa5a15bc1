package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestDevTableServedWhenCreateTableReturns: on `tabula dev`, whose tablet
// server loads each tablet slowly and answers the master slowly after
// loading it (so that the master records the location late), CreateTable
// with 15 split keys returns only once every one of the 16 tablets is
// served and recorded in METADATA; then writes to a row of every tablet —
// through the official client (bulk, and a ReadModifyWriteRow, which it
// never retries) and Tabula's client — and reads of them succeed at once.
// Several tables, one after the other.
func TestDevTableServedWhenCreateTableReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slow := func(table meta.TableID, _ string) {
		if strings.HasPrefix(table.Table, "slow") {
			time.Sleep(30 * time.Millisecond)
		}
	}
	d, err := StartDev(ctx, DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		beforeLoad: slow, afterLoad: slow})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	admin, data := devClients(t, ctx, d)
	defer data.Close()
	tc, err := client.Dial(d.Addr(), client.Options{Project: "p", Instance: "i"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	var splits []string
	for i := 1; i < 16; i++ {
		splits = append(splits, fmt.Sprintf("r%02d", i))
	}
	// A row in every tablet: before the first split, at each split key and
	// just below it, and after the last.
	rows := []string{"a", "r00", "zz"}
	for _, s := range splits {
		rows = append(rows, s, s+"~")
	}
	for round := range 3 {
		name := fmt.Sprintf("slow%d", round)
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: name, SplitKeys: splits,
			ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
			t.Fatal(err)
		}
		id := meta.TableID{Instance: "i", Table: name}
		locs, err := d.master.md.tableRows(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(locs) != len(splits)+1 || !locationsServed(locs) {
			t.Fatalf("round %d: right after CreateTable, METADATA has %d rows of %s, %s; want %d, each recorded at its server", round, len(locs), name, describeUnserved(locs), len(splits)+1)
		}

		tbl := data.Open(name)
		var muts []*bigtable.Mutation
		for range rows {
			m := bigtable.NewMutation()
			m.Set("f", "official", 1000, []byte("v"))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, rows, muts)
		if err != nil {
			t.Fatalf("round %d: official ApplyBulk: %v", round, err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("round %d: official ApplyBulk of row %q: %v", round, rows[i], e)
			}
		}
		for _, r := range rows {
			rmw := bigtable.NewReadModifyWrite()
			rmw.AppendValue("f", "appended", []byte("x"))
			if _, err := tbl.ApplyReadModifyWrite(ctx, r, rmw); err != nil {
				t.Fatalf("round %d: official ReadModifyWriteRow of %q: %v", round, r, err)
			}
		}
		var rms []cell.RowMutation
		for _, r := range rows {
			rms = append(rms, cell.RowMutation{Row: []byte(r), Mutations: []cell.Mutation{cell.Set("f", []byte("tabula"), 1000, []byte("v"))}})
		}
		if _, err := tc.ApplyBulk(ctx, name, rms, client.BulkOptions{}); err != nil {
			t.Fatalf("round %d: Tabula ApplyBulk: %v", round, err)
		}

		got := 0
		if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			if len(r["f"]) == 3 {
				got++
			}
			return true
		}); err != nil {
			t.Fatalf("round %d: official ReadRows: %v", round, err)
		}
		if got != len(rows) {
			t.Fatalf("round %d: %d rows with their 3 cells, want %d", round, got, len(rows))
		}
		sc := tc.Scan(ctx, name, client.ScanOptions{})
		n := 0
		for sc.Next() {
			n++
		}
		if err := sc.Err(); err != nil || n != len(rows) {
			t.Fatalf("round %d: Tabula scan: %d rows, %v; want %d", round, n, err, len(rows))
		}
	}
}

// TestLocationsServed: a table is served when its METADATA rows cover it
// and each names a server; describeUnserved says what is missing.
func TestLocationsServed(t *testing.T) {
	id := meta.TableID{Instance: "i", Table: "t"}
	loc := func(start, end, server string) meta.Location {
		l := meta.Location{Table: id, Start: []byte(start), TabletID: "t-" + start, Server: server}
		if start == "" {
			l.Start = nil
		}
		if end != "" {
			l.End = []byte(end)
		}
		return l
	}
	for _, c := range []struct {
		name   string
		rows   []meta.Location
		served bool
		says   string
	}{
		{"none", nil, false, "do not cover"},
		{"all recorded", []meta.Location{loc("", "m", "s1"), loc("m", "", "s2")}, true, "every tablet is served"},
		{"one loading", []meta.Location{loc("", "m", "s1"), loc("m", "x", ""), loc("x", "", "")}, false, `2 of 3 tablets not yet loaded by a tablet server (the first: t-m ["m", "x"))`},
		{"a gap", []meta.Location{loc("", "m", "s1"), loc("n", "", "s1")}, false, "do not cover"},
		{"no end", []meta.Location{loc("", "m", "s1")}, false, "do not cover"},
	} {
		if got := locationsServed(c.rows); got != c.served {
			t.Errorf("%s: locationsServed = %v, want %v", c.name, got, c.served)
		}
		if got := describeUnserved(c.rows); !strings.Contains(got, c.says) {
			t.Errorf("%s: describeUnserved = %q, want it to say %q", c.name, got, c.says)
		}
	}
}
