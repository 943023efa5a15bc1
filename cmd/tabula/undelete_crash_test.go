package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDevUndeleteCrash kills `tabula dev` (its default undelete retention)
// with SIGKILL while a DeleteTable runs and while an UndeleteTable runs,
// restarts it on the same directory, and checks that the table is never
// lost nor half: after each kill it is either listed and whole, or absent
// and UndeleteTable brings it back whole.
func TestDevUndeleteCrash(t *testing.T) {
	bin := buildTabula(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startDevProcess(t, ctx, bin, dir, 0)
	c := dialDev(t, p.addr, devProject, devInstance)
	fillCrashTable(t, ctx, c, "t", []string{"k0700", "k1400"}, 300)
	want := dumpTable(t, ctx, c.data, "t")
	name := "projects/" + devProject + "/instances/" + devInstance + "/tables/t"
	undelete := func(c *devClients) error {
		_, err := adminpb.NewBigtableTableAdminClient(c.conn).UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: name})
		return err
	}
	// check restarts the server after a kill and makes sure the table is
	// there and whole, undeleting it if it is absent.
	restarts := 0
	outcomes := map[string]int{}
	check := func(round int, what string) {
		t.Helper()
		restarts++
		p = startDevProcess(t, ctx, bin, dir, restarts)
		c = dialDev(t, p.addr, devProject, devInstance)
		tables, err := c.admin.Tables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(tables, "t") {
			outcomes[what+": table there"]++
		} else {
			if err := undelete(c); err != nil {
				t.Fatalf("round %d, kill during %s: the table is absent and cannot be undeleted: %v", round, what, err)
			}
			outcomes[what+": undeleted after"]++
		}
		if got := dumpTable(t, ctx, c.data, "t"); !slices.Equal(got, want) {
			t.Fatalf("round %d, kill during %s: the table is not whole: %d cells, want %d", round, what, len(got), len(want))
		}
	}
	const rounds = 3
	for round := range rounds {
		// A kill while DeleteTable runs.
		errc := make(chan error, 1)
		dctx, dcancel := context.WithCancel(ctx)
		go func() { errc <- c.admin.DeleteTable(dctx, "t") }()
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		p.kill()
		p.wait()
		dcancel()
		<-errc
		c.close()
		check(round, "DeleteTable")

		// A kill while UndeleteTable runs.
		if err := c.admin.DeleteTable(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if err := c.admin.CreateTable(ctx, "t"); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("round %d: CreateTable of a restorable name: %v, want FAILED_PRECONDITION", round, err)
		}
		cc := c
		go func() { errc <- undelete(cc) }()
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		p.kill()
		p.wait()
		<-errc
		c.close()
		check(round, "UndeleteTable")
	}
	c.close()
	p.stop(t)
	t.Logf("outcomes over %d kills: %v", 2*rounds, outcomes)
}
