//go:build integration

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestClusterTableServedWhenCreateTableReturns: in a cluster (a master,
// two tablet servers, Consul, MinIO), CreateTable with 11 split keys,
// entered through a tablet server with the official client, returns only
// once METADATA names a server for each of the 12 tablets (the master
// records a location after the server loaded the tablet) — before, it
// returned as soon as the rows were written, unassigned, and the tablets
// were loaded at the master's next round. Right after it, a write (bulk,
// and a ReadModifyWriteRow, which the official client never retries) and a
// read of a row in every tablet succeed. Three tables in a row.
func TestClusterTableServedWhenCreateTableReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 2})
	entry := c.servers[0]
	cl, admin := officialClients(t, ctx, entry.addr)
	gc, err := client.Dial(entry.addr, client.Options{Project: "p", Instance: "i", TLS: tlsFor(entry.addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()

	var splits []string
	for i := 1; i <= 11; i++ {
		splits = append(splits, fmt.Sprintf("r%02d", i))
	}
	rows := []string{"a", "zz"}
	for _, s := range splits {
		rows = append(rows, s, s+"~")
	}
	for round := range 3 {
		name := fmt.Sprintf("fresh%d", round)
		if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: name, SplitKeys: splits,
			ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.NoGcPolicy()}}}); err != nil {
			t.Fatalf("round %d: CreateTable: %v", round, err)
		}

		// METADATA as it is now, read directly (a lookup through the
		// client would wait for unassigned tablets).
		start, end := meta.MetadataTableRange(meta.TableID{Instance: "i", Table: name})
		s := gc.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: start, End: end, Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
		var locs []meta.Location
		for s.Next() {
			e, err := meta.ParseMetadataRow(s.Row())
			if err != nil {
				t.Fatal(err)
			}
			locs = append(locs, e.Location())
		}
		if err := s.Err(); err != nil {
			t.Fatalf("round %d: reading METADATA: %v", round, err)
		}
		if len(locs) != len(splits)+1 {
			t.Fatalf("round %d: METADATA has %d rows of %s right after CreateTable, want %d", round, len(locs), name, len(splits)+1)
		}
		for _, l := range locs {
			if l.Server == "" {
				t.Fatalf("round %d: right after CreateTable, tablet %s [%q, %q) of %s is not loaded by any server", round, l.TabletID, l.Start, l.End, name)
			}
		}

		tbl := cl.Open(name)
		var muts []*bigtable.Mutation
		for range rows {
			m := bigtable.NewMutation()
			m.Set("f", "c", 1000, []byte("v"))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, rows, muts)
		if err != nil {
			t.Fatalf("round %d: ApplyBulk: %v", round, err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("round %d: ApplyBulk row %q: %v", round, rows[i], e)
			}
		}
		for _, r := range rows {
			rmw := bigtable.NewReadModifyWrite()
			rmw.AppendValue("f", "a", []byte("x"))
			if _, err := tbl.ApplyReadModifyWrite(ctx, r, rmw); err != nil {
				t.Fatalf("round %d: ReadModifyWriteRow %q: %v", round, r, err)
			}
		}
		n := 0
		if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			if len(r["f"]) == 2 {
				n++
			}
			return true
		}); err != nil {
			t.Fatalf("round %d: ReadRows: %v", round, err)
		}
		if n != len(rows) {
			t.Fatalf("round %d: %d rows read back with both cells, want %d", round, n, len(rows))
		}
	}
}
