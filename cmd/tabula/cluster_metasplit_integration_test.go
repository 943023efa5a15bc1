//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/meta"
)

// metaSplitRow is the i-th row of the test's table.
func metaSplitRow(i int) string { return fmt.Sprintf("row%05d", i) }

// metadataTablets returns METADATA's tablets other than the root, as the
// root tablet's rows say (read through Tabula's client, which finds the
// root through the lock service's pointer).
func metadataTablets(ctx context.Context, gc *client.Client) ([]meta.MetadataEntry, error) {
	start, end := meta.MetadataTableRange(meta.MetadataTable)
	s := gc.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: start, End: end, Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
	defer s.Close()
	var out []meta.MetadataEntry
	for s.Next() {
		e, err := meta.ParseMetadataRow(s.Row())
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, s.Err()
}

// userRowsIn counts the rows of table in the METADATA tablet m's range.
func userRowsIn(ctx context.Context, gc *client.Client, m meta.MetadataEntry, table meta.TableID) (int, error) {
	s := gc.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: m.State.Start, End: m.State.End, Families: []string{meta.FamilyState}, MaxVersions: 1})
	defer s.Close()
	n := 0
	for s.Next() {
		id, _, err := meta.ParseMetadataRowKey(s.Row().Key)
		if err != nil {
			return 0, err
		}
		if id == table {
			n++
		}
	}
	return n, s.Err()
}

// gatewayLookupMetrics scrapes a tablet server's /metrics for its
// gateway's location lookups: the most levels one went up, and how many
// read METADATA.
func gatewayLookupMetrics(t *testing.T, httpAddr string) (maxLevels, lookups float64) {
	t.Helper()
	resp, err := httpGet(httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || !strings.Contains(name, `cache="gateway"`) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		switch {
		case strings.HasPrefix(name, "tabula_location_lookup_max_levels{"):
			maxLevels = v
		case strings.HasPrefix(name, "tabula_location_lookups_total{"):
			lookups = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return maxLevels, lookups
}

// readAllOfficial reads every row of the table through the official client:
// a full scan and a point read of each row; it fails the test on a missing
// row, a wrong value or an error.
func readAllOfficial(t *testing.T, ctx context.Context, tbl *bigtable.Table, rows int, what string) {
	t.Helper()
	seen := 0
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		if got := string(r["f"][0].Value); got != "v-"+r.Key() {
			t.Errorf("%s: scan: row %s holds %q", what, r.Key(), got)
		}
		seen++
		return true
	})
	if err != nil || seen != rows {
		t.Fatalf("%s: official scan: %d rows of %d, %v", what, seen, rows, err)
	}
	for i := range rows {
		r, err := tbl.ReadRow(ctx, metaSplitRow(i))
		if err != nil || len(r["f"]) != 1 || string(r["f"][0].Value) != "v-"+metaSplitRow(i) {
			t.Fatalf("%s: official read of %s: %v, %v", what, metaSplitRow(i), r, err)
		}
	}
}

// readAllTabula is readAllOfficial through Tabula's client, which routes
// itself through METADATA (LocateStats counts its lookups).
func readAllTabula(t *testing.T, ctx context.Context, gc *client.Client, table string, rows int, what string) {
	t.Helper()
	for i := range rows {
		r, ok, err := gc.ReadRow(ctx, table, []byte(metaSplitRow(i)), client.ScanOptions{})
		if err != nil || !ok || len(r.Cells) != 1 || string(r.Cells[0].Value) != "v-"+metaSplitRow(i) {
			t.Fatalf("%s: Tabula read of %s: %v, found %v, %v", what, metaSplitRow(i), r, ok, err)
		}
	}
	s := gc.Scan(ctx, table, client.ScanOptions{})
	defer s.Close()
	seen := 0
	for s.Next() {
		seen++
	}
	if err := s.Err(); err != nil || seen != rows {
		t.Fatalf("%s: Tabula scan: %d rows of %d, %v", what, seen, rows, err)
	}
}

// TestClusterMetadataSplits: the three-level hierarchy of the paper's
// §5.1 with METADATA split. A table of 150 tablets on three tablet servers
// whose METADATA split size is 16 KiB: METADATA splits into several
// tablets besides the root (the root never splits), the user tablets'
// rows spread over them. Every row written through the official client is
// read back through it and through Tabula's client, whose location lookups
// go at most three levels up (lock service, root tablet, METADATA tablet)
// with at most three reads each — as do the gateways' (their metrics).
// Then the server holding METADATA tablets is killed (-9) and another
// started: the master recovers the root and METADATA tablets first, then
// the user tablets, and every row is still readable through both clients —
// the Tabula client's cached METADATA locations, now stale, invalidated
// and read again, still within three levels.
func TestClusterMetadataSplits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 3, extraServer: []string{"--metadata-split-size", "16384"}})
	entry := c.servers[0]
	cl, admin := officialClients(t, ctx, entry.addr)
	gc, err := client.Dial(entry.addr, client.Options{Project: "p", Instance: "i", TLS: tlsFor(entry.addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()

	const tablets, rowsPerTablet = 150, 2
	const rows = tablets * rowsPerTablet
	var splits []string
	for i := 1; i < tablets; i++ {
		splits = append(splits, metaSplitRow(i*rowsPerTablet))
	}
	// The master may not lead or serve METADATA yet: UNAVAILABLE until it does.
	waitFor(t, 60*time.Second, "the table created", func() (bool, string) {
		err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "many", SplitKeys: splits,
			Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(1)}})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	table, err := meta.ParseTableName("projects/p/instances/i/tables/many")
	if err != nil {
		t.Fatal(err)
	}

	// METADATA splits while the master records the tablets' locations.
	var metas []meta.MetadataEntry
	waitFor(t, 90*time.Second, "METADATA split into ≥2 tablets besides the root, every tablet served", func() (bool, string) {
		metas, err = metadataTablets(ctx, gc)
		if err != nil {
			return false, err.Error()
		}
		_, st := c.activeMaster()
		served := 0
		for _, s := range st.Servers {
			served += len(s.Tablets)
		}
		if len(metas) < 2 || len(st.Unassigned) > 0 || served < tablets+1+len(metas) {
			return false, fmt.Sprintf("%d METADATA tablets besides the root, %d tablets served, %d unassigned", len(metas), served, len(st.Unassigned))
		}
		return true, ""
	})
	withUsers := 0
	for _, m := range metas {
		n, err := userRowsIn(ctx, gc, m, table)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			withUsers++
		}
		if m.Server == "" {
			t.Fatalf("METADATA tablet %s unassigned", m.State.ID)
		}
	}
	if withUsers < 2 {
		t.Fatalf("the table's METADATA rows are in %d of the %d METADATA tablets, want ≥2", withUsers, len(metas))
	}
	t.Logf("METADATA: the root and %d tablets (%d with the table's rows), after %v", len(metas), withUsers, time.Since(start).Round(time.Millisecond))

	tbl := cl.Open("many")
	var keys []string
	var muts []*bigtable.Mutation
	for i := range rows {
		m := bigtable.NewMutation()
		m.Set("f", "c", bigtable.Timestamp(1000), []byte("v-"+metaSplitRow(i)))
		keys = append(keys, metaSplitRow(i))
		muts = append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatalf("ApplyBulk: %v %v", err, errs)
	}
	readAllOfficial(t, ctx, tbl, rows, "before the kill")
	t.Logf("rows written and read through the official client at %v", time.Since(start).Round(time.Millisecond))

	// The server to kill later: the one holding the most METADATA tablets.
	// Tabula's client asks the server it was given for the root's location,
	// so the one whose cache goes stale uses another.
	holders := map[string]int{}
	for _, m := range metas {
		holders[meta.ServerAddr(m.Server)]++
	}
	var victim, reader *roleProc
	for _, s := range c.liveServers() {
		if victim == nil || holders[s.addr] > holders[victim.addr] {
			victim = s
		}
	}
	for _, s := range c.liveServers() {
		if s != victim {
			reader = s
			break
		}
	}
	if holders[victim.addr] == 0 {
		t.Fatalf("no live server holds a METADATA tablet: %v", holders)
	}

	// A fresh Tabula client: each lookup reads at most one tablet per level.
	fresh, err := client.Dial(reader.addr, client.Options{Project: "p", Instance: "i", TLS: tlsFor(reader.addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	readAllTabula(t, ctx, fresh, "many", rows, "before the kill")
	st := fresh.LocateStats()
	t.Logf("Tabula client's lookups before the kill: %+v (at %v)", st, time.Since(start).Round(time.Millisecond))
	if st.MaxLevels != 3 || st.ByLevels[3] == 0 || st.MaxReads > 3 {
		t.Fatalf("lookups %+v: want the first one three levels up, none further, none reading more than 3 tablets", st)
	}
	// The gateways located the official client's rows the same way (how
	// far up each went depends on what a gateway had cached before).
	var gatewayLookups float64
	for _, s := range c.liveServers() {
		maxLevels, lookups := gatewayLookupMetrics(t, s.http)
		if maxLevels > 3 {
			t.Fatalf("server %s's gateway went %v levels up", s.addr, maxLevels)
		}
		gatewayLookups += lookups
	}
	if gatewayLookups == 0 {
		t.Fatal("no gateway read METADATA: the official client's requests were not routed through the hierarchy")
	}

	t.Logf("killing %s, which holds %d METADATA tablets", victim.addr, holders[victim.addr])
	killed := time.Now()
	c.kill(victim)
	replacement := c.startServer()
	waitFor(t, 90*time.Second, "every tablet served again", func() (bool, string) {
		m, st := c.activeMaster()
		if m == nil {
			return false, "no active master"
		}
		served := 0
		for _, s := range st.Servers {
			if strings.HasPrefix(s.ID, victim.addr+"/") {
				return false, "the killed server is still listed"
			}
			served += len(s.Tablets)
		}
		if len(st.Unassigned) > 0 || served < tablets+1+len(metas) {
			return false, fmt.Sprintf("%d served, %d unassigned", served, len(st.Unassigned))
		}
		return true, ""
	})
	t.Logf("every tablet served %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Read through the client whose cached METADATA locations went stale.
	after, err := metadataTablets(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range after {
		if meta.ServerAddr(m.Server) == victim.addr || m.Server == "" {
			t.Fatalf("METADATA tablet %s at %q after the recovery", m.State.ID, m.Server)
		}
	}

	// Both clients read every row: the official one through a survivor,
	// Tabula's with its stale cache (METADATA and user locations at the
	// dead server) and a fresh one through the new server.
	cl2, _ := officialClients(t, ctx, reader.addr)
	readAllOfficial(t, ctx, cl2.Open("many"), rows, "after the kill")
	readAllTabula(t, ctx, fresh, "many", rows, "after the kill (stale cache)")
	if st := fresh.LocateStats(); st.MaxLevels > 3 {
		t.Fatalf("after the kill, lookups %+v went more than three levels up", st)
	}
	fresh2, err := client.Dial(replacement.addr, client.Options{Project: "p", Instance: "i", TLS: tlsFor(replacement.addr)})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh2.Close()
	readAllTabula(t, ctx, fresh2, "many", rows, "after the kill (fresh client)")
	if st := fresh2.LocateStats(); st.MaxLevels != 3 || st.MaxReads > 3 {
		t.Fatalf("a fresh client's lookups after the recovery %+v: want at most three levels and reads each", st)
	}
	t.Logf("test took %v", time.Since(start).Round(time.Millisecond))
}
