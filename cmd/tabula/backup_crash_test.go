package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDevBackupCrash kills `tabula dev` with SIGKILL while CreateBackup
// calls run and while a RestoreTable runs, restarts it on the same
// directory, and checks that no half backup or half table is visible and
// nothing is lost: the source table is whole, every acknowledged backup is
// listed, every listed backup restores to the table at its time, and a
// table a killed restore left is either absent or whole.
func TestDevBackupCrash(t *testing.T) {
	bin := buildTabula(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startDevProcess(t, ctx, bin, dir, 0)
	c := dialDev(t, p.addr, devProject, devInstance)
	fillCrashTable(t, ctx, c, "src", []string{"k3", "k6"}, 500)
	want := dumpTable(t, ctx, c.data, "src")
	expire := time.Now().Add(7 * time.Hour)

	acked := map[string]bool{}
	const rounds = 3
	for round := range rounds {
		// Backups, one after another, until the kill. The kill comes a
		// random moment after the round's first backup is acknowledged,
		// so that every round has a backup to restore however long the
		// first one takes (a split running under it can make it slower
		// than the whole window), and one request is still in flight.
		killAt := time.Duration(rand.IntN(150)) * time.Millisecond
		done := make(chan struct{})
		firstAcked := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				id := fmt.Sprintf("b%d-%d", round, i)
				err := c.admin.CreateBackup(ctx, "src", "c", id, expire)
				if err != nil {
					return // the kill
				}
				acked[id] = true
				if i == 0 {
					close(firstAcked)
				}
			}
		}()
		select {
		case <-firstAcked:
		case <-done:
			t.Fatalf("round %d: the first backup failed before any kill", round)
		}
		time.Sleep(killAt)
		p.kill()
		p.wait()
		<-done
		c.close()

		p = startDevProcess(t, ctx, bin, dir, 2*round+1)
		c = dialDev(t, p.addr, devProject, devInstance)
		if got := dumpTable(t, ctx, c.data, "src"); !slices.Equal(got, want) {
			t.Fatalf("round %d: the source table changed across the kill", round)
		}
		listed := listBackups(t, ctx, c.admin)
		for id := range acked {
			if !slices.Contains(listed, id) {
				t.Fatalf("round %d: acknowledged backup %s is gone after the kill (listed %q)", round, id, listed)
			}
		}
		// Every listed backup (the last one the kill interrupted too, if
		// its manifest was written) is whole: restore the newest.
		if len(listed) == 0 {
			t.Fatalf("round %d: no backup", round)
		}
		newest := listed[len(listed)-1]
		for _, id := range listed {
			if strings.HasPrefix(id, fmt.Sprintf("b%d-", round)) && id > newest {
				newest = id
			}
		}

		// A restore, killed while it runs.
		table := fmt.Sprintf("r%d", round)
		restoreErr := make(chan error, 1)
		rctx, rcancel := context.WithCancel(ctx)
		go func() { restoreErr <- c.admin.RestoreTable(rctx, table, "c", newest) }()
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		p.kill()
		p.wait()
		rcancel() // the client would poll the dead server's operation until its deadline
		<-restoreErr
		c.close()

		p = startDevProcess(t, ctx, bin, dir, 2*round+2)
		c = dialDev(t, p.addr, devProject, devInstance)
		tables, err := c.admin.Tables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(tables, table) {
			if got := dumpTable(t, ctx, c.data, table); !slices.Equal(got, want) {
				t.Fatalf("round %d: the table a killed restore left is not whole: %d cells, want %d", round, len(got), len(want))
			}
			t.Logf("round %d: the restore of %s had committed before the kill", round, newest)
		} else {
			if err := c.admin.RestoreTable(ctx, table, "c", newest); err != nil {
				t.Fatalf("round %d: restoring %s again: %v", round, newest, err)
			}
			if got := dumpTable(t, ctx, c.data, table); !slices.Equal(got, want) {
				t.Fatalf("round %d: restore of %s differs from the table", round, newest)
			}
		}
	}
	if len(acked) == 0 {
		t.Fatal("no backup was acknowledged")
	}
	if _, err := c.admin.BackupInfo(ctx, "c", "never"); status.Code(err) != codes.NotFound {
		t.Errorf("unknown backup: %v", err)
	}
	c.close()
	p.stop(t)
	t.Logf("%d acknowledged backups over %d kills during backups and %d during restores", len(acked), rounds, rounds)
}

func dumpTable(t *testing.T, ctx context.Context, data *bigtable.Client, table string) []string {
	t.Helper()
	var out []string
	err := data.Open(table).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%s|%s|%d|%x", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func listBackups(t *testing.T, ctx context.Context, admin *bigtable.AdminClient) []string {
	t.Helper()
	var out []string
	it := admin.Backups(ctx, "c")
	for {
		b, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Name)
	}
	return out
}

// buildTabula builds the tabula binary into a temporary directory and
// returns its path.
func buildTabula(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tabula")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fillCrashTable creates table with families a (every version) and b (two
// versions) split at splits, and writes 2000 rows k0000…k1999 in a
// scattered order: a:v with a value of about valueBytes, b:<i%5> with i.
func fillCrashTable(t *testing.T, ctx context.Context, c *devClients, table string, splits []string, valueBytes int) *bigtable.Table {
	t.Helper()
	if err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: table, SplitKeys: splits,
		Families: map[string]bigtable.GCPolicy{"a": bigtable.NoGcPolicy(), "b": bigtable.MaxVersionsPolicy(2)}}); err != nil {
		t.Fatal(err)
	}
	tbl := c.data.Open(table)
	for i := range 2000 {
		m := bigtable.NewMutation()
		m.Set("a", "v", 1000, []byte(fmt.Sprintf("%d-%s", i, strings.Repeat("x", valueBytes))))
		m.Set("b", fmt.Sprint(i%5), 2000, []byte(fmt.Sprint(i)))
		if err := tbl.Apply(ctx, fmt.Sprintf("k%04d", (i*7919)%2000), m); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}
