//go:build integration

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestClusterRestoreMasterCrash kills the active master (kill -9; a
// standby takes over and a new standby starts) at several moments of a
// RestoreTable of a backup of a 13-tablet table — the moment its catalog
// entry appears (the window between that entry and the last METADATA
// row) and at random — and checks, with the official Go client:
//   - during and after, a restored table the admin API lists is whole: a
//     watcher reads every listed restored table throughout, and each read
//     must equal the backup cell by cell (every version and timestamp);
//   - after the takeover, the table is either whole, or absent with no
//     catalog entry left (a hidden half-restored entry must be finished by
//     the new master within the wait), in which case restoring again gives
//     it whole;
//   - the source table and the backup are unharmed, with the garbage
//     collector running every 300ms with a 2s grace: the source reads
//     whole and a last restore of the backup is whole.
func TestClusterRestoreMasterCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 2, servers: 2,
		extraMaster: []string{"--gc-interval", "300ms", "--gc-grace", "2s"}})
	waitFor(t, 30*time.Second, "an active master", func() (bool, string) {
		m, _ := c.activeMaster()
		return m != nil, "none"
	})
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	watchData, watchAdmin := officialClients(t, ctx, c.servers[1].addr)
	kv := clusterKV(t, c)

	var splits []string
	for i := 150; i < 2000; i += 150 {
		splits = append(splits, fmt.Sprintf("k%04d", i))
	}
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "src", SplitKeys: splits,
		Families: map[string]bigtable.GCPolicy{"a": bigtable.NoGcPolicy(), "b": bigtable.MaxVersionsPolicy(2)}}); err != nil {
		t.Fatal(err)
	}
	// 2000 rows in batches; a:v in two versions for every 7th row, b:<i%5>.
	src := cl.Open("src")
	for b := 0; b < 2000; b += 200 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := b; i < b+200; i++ {
			m := bigtable.NewMutation()
			m.Set("a", "v", 1000, []byte(fmt.Sprintf("%d-%s", i, strings.Repeat("x", 200))))
			if i%7 == 0 {
				m.Set("a", "v", 3000, []byte(fmt.Sprintf("v2-%d", i)))
			}
			m.Set("b", fmt.Sprint(i%5), 2000, []byte(fmt.Sprint(i)))
			keys, muts = append(keys, fmt.Sprintf("k%04d", i)), append(muts, m)
		}
		errs, err := src.ApplyBulk(ctx, keys, muts)
		if err == nil && errs != nil {
			err = errors.Join(errs...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := dumpTable(t, ctx, cl, "src")
	retry := func(what string, call func() error) error {
		// Admin calls are UNAVAILABLE while no master leads.
		var err error
		for range 200 {
			if err = call(); status.Code(err) != codes.Unavailable {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := retry("CreateBackup", func() error {
		return admin.CreateBackup(ctx, "src", "c", "bk", time.Now().Add(7*time.Hour))
	}); err != nil {
		t.Fatal(err)
	}
	// The source keeps changing after the backup; the backup must not.
	m := bigtable.NewMutation()
	m.Set("a", "later", 5000, []byte("after the backup"))
	if err := src.Apply(ctx, "k0001", m); err != nil {
		t.Fatal(err)
	}
	wantSrc := dumpTable(t, ctx, cl, "src")

	// The watcher: any restored table the admin API lists must read
	// whole. A read may wait for the tablets to be assigned (the client
	// retries UNAVAILABLE), but must not fail nor be partial.
	var (
		mu         sync.Mutex
		restored   []string // names the watcher checks
		violations []string
		reads      int
		passes     int // the watcher's passes over the listed tables
	)
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for wctx.Err() == nil {
			tables, err := watchAdmin.Tables(wctx)
			if err != nil {
				time.Sleep(50 * time.Millisecond) // no master leads
				continue
			}
			mu.Lock()
			names := slices.Clone(restored)
			mu.Unlock()
			for _, name := range names {
				if !slices.Contains(tables, name) {
					continue
				}
				got, err := readWhole(wctx, watchData, name, 40*time.Second)
				if wctx.Err() != nil {
					return
				}
				mu.Lock()
				reads++
				switch {
				case err != nil:
					violations = append(violations, fmt.Sprintf("%s listed but unreadable: %v", name, err))
				case !slices.Equal(got, want):
					violations = append(violations, fmt.Sprintf("%s listed half: %d cells, want %d", name, len(got), len(want)))
				}
				mu.Unlock()
			}
			mu.Lock()
			passes++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})

	outcomes := map[string]int{}
	moments := []string{"entry", "random", "entry", "random"}
	for round, moment := range moments {
		name := fmt.Sprintf("r%d", round)
		id := meta.TableID{Instance: "i", Table: name}
		mu.Lock()
		restored = append(restored, name)
		mu.Unlock()
		active, _ := c.activeMaster()
		if active == nil {
			t.Fatal("no active master")
		}
		rctx, rcancel := context.WithCancel(ctx)
		restoreErr := make(chan error, 1)
		go func() { restoreErr <- admin.RestoreTable(rctx, name, "c", "bk") }()
		switch moment {
		case "entry":
			// Kill as soon as the catalog entry exists: its METADATA
			// rows are being written.
			deadline := time.Now().Add(20 * time.Second)
			for {
				if _, err := kv.Get(ctx, coord.SchemaKey(id.String())); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: the catalog entry of %s never appeared", round, name)
				}
				time.Sleep(time.Millisecond)
			}
		default:
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		}
		c.kill(active)
		rcancel() // the client would poll the dead master's operation
		<-restoreErr
		// What the kill left: no entry, a whole one, or a hidden half one.
		left := "no catalog entry"
		if e, err := kv.Get(ctx, coord.SchemaKey(id.String())); err == nil {
			var entry meta.Table
			if err := json.Unmarshal(e.Value, &entry); err != nil {
				t.Fatal(err)
			}
			left = "a whole entry"
			if entry.Restoring {
				left = "a half-restored entry"
			}
		} else if !errors.Is(err, coord.ErrNotFound) {
			t.Fatal(err)
		}
		c.startMaster() // a standby again
		waitFor(t, 60*time.Second, "a standby leads", func() (bool, string) {
			m, _ := c.activeMaster()
			return m != nil, "no active master"
		})

		// Whole, or absent without a catalog entry (a hidden one is the
		// new master's to finish).
		var outcome string
		waitFor(t, 60*time.Second, fmt.Sprintf("round %d (kill at %s): %s whole or absent", round, moment, name), func() (bool, string) {
			var tables []string
			if err := retry("ListTables", func() (err error) { tables, err = admin.Tables(ctx); return err }); err != nil {
				return false, err.Error()
			}
			e, err := kv.Get(ctx, coord.SchemaKey(id.String()))
			switch {
			case slices.Contains(tables, name):
				got, err := readWhole(ctx, cl, name, 40*time.Second)
				if err != nil || !slices.Equal(got, want) {
					t.Fatalf("round %d (kill at %s): %s is listed but not whole: %d cells, want %d (%v)", round, moment, name, len(got), len(want), err)
				}
				outcome = "whole after the takeover"
				return true, ""
			case errors.Is(err, coord.ErrNotFound):
				outcome = "absent, restored again"
				return true, ""
			case err != nil:
				return false, err.Error()
			default:
				var entry meta.Table
				_ = json.Unmarshal(e.Value, &entry)
				return false, fmt.Sprintf("a catalog entry (restoring %v) the admin API does not list", entry.Restoring)
			}
		})
		outcomes[fmt.Sprintf("kill at %s left %s: %s", moment, left, outcome)]++
		if outcome == "absent, restored again" {
			if err := retry("RestoreTable", func() error { return admin.RestoreTable(ctx, name, "c", "bk") }); err != nil {
				t.Fatalf("round %d: restoring %s again: %v", round, name, err)
			}
			if got, err := readWhole(ctx, cl, name, 40*time.Second); err != nil || !slices.Equal(got, want) {
				t.Fatalf("round %d: %s restored again is not whole: %d cells, want %d (%v)", round, name, len(got), len(want), err)
			}
		}
	}
	// Every restored table is listed now: let the watcher finish two
	// more passes (its admin calls wait out the takeovers, so it may
	// have made only a few), so that it reads each of them at least once.
	mu.Lock()
	after := passes
	mu.Unlock()
	waitFor(t, 2*time.Minute, "two more passes of the watcher", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return passes >= after+2, fmt.Sprintf("%d passes, %d reads", passes, reads)
	})
	wcancel()
	wg.Wait()
	cutShort := 0
	for k, n := range outcomes {
		if strings.Contains(k, "half-restored") {
			cutShort += n
		}
	}
	if cutShort == 0 {
		t.Fatalf("no kill landed between the catalog entry and the last METADATA row (outcomes %v): the case this test is for was not exercised", outcomes)
	}
	if len(violations) > 0 {
		t.Fatalf("half tables visible to the official client: %q", violations)
	}
	if reads < len(moments) {
		t.Fatalf("the watcher read %d listed restored tables, want at least the %d restored", reads, len(moments))
	}

	// The garbage collector has had many rounds: the source and the
	// backup are whole, and no catalog entry is hidden.
	time.Sleep(3 * time.Second)
	if got := dumpTable(t, ctx, cl, "src"); !slices.Equal(got, wantSrc) {
		t.Fatalf("the source table changed: %d cells, want %d", len(got), len(wantSrc))
	}
	if err := retry("RestoreTable", func() error { return admin.RestoreTable(ctx, "final", "c", "bk") }); err != nil {
		t.Fatal(err)
	}
	if got, err := readWhole(ctx, cl, "final", 40*time.Second); err != nil || !slices.Equal(got, want) {
		t.Fatalf("the backup restored after the kills is not whole: %d cells, want %d (%v)", len(got), len(want), err)
	}
	ents, err := kv.List(ctx, coord.PrefixSchema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := admin.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(tables) {
		t.Fatalf("%d catalog entries, %d tables listed %q: an orphan entry", len(ents), len(tables), tables)
	}
	t.Logf("outcomes over %d master kills: %v; the watcher read %d listed restored tables, all whole", len(moments), outcomes, reads)
}

// readWhole reads table whole (sorted cells, as dumpTable) with a deadline
// of timeout: the client retries UNAVAILABLE until then.
func readWhole(ctx context.Context, data *bigtable.Client, table string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []string
	err := data.Open(table).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%s|%s|%d|%x", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	slices.Sort(out)
	return out, err
}

// clusterKV opens the cluster's keys in Consul, as its roles see them.
func clusterKV(t *testing.T, c *testCluster) coord.KV {
	t.Helper()
	svc, err := coord.NewConsul(coord.ConsulConfig{Address: c.consul, Prefix: coord.ClusterPrefix(c.name), Token: os.Getenv("TABULA_TEST_CONSUL_TOKEN")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}
