//go:build integration

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/tlsconfig"
)

// TestClusterUndeleteMasterCrash kills the active master (kill -9; a
// standby takes over) while DeleteTable runs and while UndeleteTable runs,
// two times each, and checks after every takeover that the table is never
// lost nor half: it is served and whole; or absent and UndeleteTable brings
// it back whole; or — a kill between the tablets' drop and the catalog
// entry's deletion — listed without tablets until the new active master
// finishes the deletion on its own (master.AdminService.FinishDeletions:
// at once if the table is a minute old, else by a GC round once it is),
// after which UndeleteTable brings it back whole.
func TestClusterUndeleteMasterCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 2, servers: 2, memtableSize: 32 << 10,
		extraMaster: []string{"--undelete-retention", "1h"}})
	waitFor(t, 30*time.Second, "an active master", func() (bool, string) {
		m, _ := c.activeMaster()
		return m != nil, "none"
	})
	addr := c.servers[0].addr
	cl, admin := officialClients(t, ctx, addr)
	conn, err := grpc.NewClient(addr, tlsconfig.DialOption(tlsFor(addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := adminpb.NewBigtableTableAdminClient(conn)
	const name = "projects/p/instances/i/tables/t"
	retry := func(what string, call func() error) error {
		// Admin calls are UNAVAILABLE while no master leads.
		var err error
		for range 150 {
			if err = call(); status.Code(err) != codes.Unavailable {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	undelete := func() error {
		return retry("UndeleteTable", func() error {
			_, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: name})
			return err
		})
	}
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", SplitKeys: []string{"r0300"},
		ColumnFamilies: map[string]bigtable.Family{"f": {GCPolicy: bigtable.MaxVersionsPolicy(1)}}}); err != nil {
		t.Fatal(err)
	}
	writeRows(t, ctx, cl.Open("t"), "r", 600, 200)
	want := dumpTable(t, ctx, cl, "t")

	// readable waits for the table's rows to be served again after a
	// takeover; false if they stay unserved (a table without tablets).
	readable := func() bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			// Each read bounded too: the official client retries
			// UNAVAILABLE (tablets left unserved by a deletion cut
			// short) until its context ends.
			rctx, cancel := context.WithDeadline(ctx, deadline)
			_, err := cl.Open("t").ReadRow(rctx, "r0000")
			cancel()
			if err == nil {
				return true
			}
			time.Sleep(300 * time.Millisecond)
		}
		return false
	}
	outcomes := map[string]int{}
	check := func(round int, during string) {
		t.Helper()
		waitFor(t, 60*time.Second, "a standby leads", func() (bool, string) {
			m, _ := c.activeMaster()
			return m != nil, "no active master"
		})
		var tbls []string
		if err := retry("ListTables", func() (err error) { tbls, err = admin.Tables(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		switch {
		case !slices.Contains(tbls, "t"):
			if err := undelete(); err != nil {
				t.Fatalf("round %d, kill during %s: the table is absent and cannot be undeleted: %v", round, during, err)
			}
			outcomes[during+": undeleted after"]++
		case readable():
			outcomes[during+": table served"]++
		default:
			// A minute after the table's creation at most, plus a
			// GC round (2 s here).
			waitFor(t, 90*time.Second, "the master finishes the deletion", func() (bool, string) {
				var tbls []string
				if err := retry("ListTables", func() (err error) { tbls, err = admin.Tables(ctx); return err }); err != nil {
					t.Fatal(err)
				}
				return !slices.Contains(tbls, "t"), fmt.Sprintf("tables %v", tbls)
			})
			if err := undelete(); err != nil {
				t.Fatalf("round %d, kill during %s: undeleting after the master finished the deletion: %v", round, during, err)
			}
			outcomes[during+": deletion finished by the master, undeleted"]++
		}
		if !readable() {
			t.Fatalf("round %d, kill during %s: the table is not served", round, during)
		}
		if got := dumpTable(t, ctx, cl, "t"); !slices.Equal(got, want) {
			t.Fatalf("round %d, kill during %s: the table is not whole: %d cells, want %d", round, during, len(got), len(want))
		}
	}
	killDuring := func(call func() error) {
		errc := make(chan error, 1)
		go func() { errc <- call() }()
		time.Sleep(time.Duration(rand.IntN(250)) * time.Millisecond)
		active, _ := c.activeMaster()
		if active == nil {
			t.Fatal("no active master to kill")
		}
		c.kill(active)
		<-errc
		c.startMaster() // a standby again
	}
	for round := range 2 {
		killDuring(func() error { return admin.DeleteTable(ctx, "t") })
		check(round, "DeleteTable")

		if err := retry("DeleteTable", func() error { return admin.DeleteTable(ctx, "t") }); err != nil {
			t.Fatal(err)
		}
		killDuring(func() error {
			_, err := raw.UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: name})
			return err
		})
		check(round, "UndeleteTable")
	}
	t.Logf("outcomes over 4 master kills: %v", outcomes)
}
