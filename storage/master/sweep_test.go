package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// sstName names an SSTable as a tablet does, created at created.
func sstName(dir string, created time.Time, n int) string {
	return fmt.Sprintf("%s/%016x-%016x.sst", dir, created.UnixMicro(), n)
}

// failingDelete is a store whose Delete of one name fails.
type failingDelete struct {
	blob.Store
	name string
}

func (s failingDelete) Delete(ctx context.Context, name string) error {
	if name == s.name {
		return errors.New("disk on fire")
	}
	return s.Store.Delete(ctx, name)
}

// TestSweepFiles: the sweep deletes under its prefix exactly the files
// assign.PlanSweep chooses — unreferenced, of a tablet's naming, older
// than the grace — and reports a failed delete without claiming it.
func TestSweepFiles(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	now := time.Now()
	old, young := now.Add(-time.Hour), now.Add(-time.Second)
	var (
		live     = sstName("tables/i/t", old, 1)
		dead     = sstName("tables/i/t", old, 2)
		fresh    = sstName("tables/i/t", young, 3)
		foreign  = "tables/i/t/notours.sst"
		state    = "tables/i/t/x.tablet"
		outside  = sstName("elsewhere", old, 4)
		deadToo  = sstName("tables/i/u", old, 5)
		refering = []assign.TabletFiles{{Tablet: "a", Files: []string{live}}}
	)
	for _, n := range []string{live, dead, fresh, foreign, state, outside, deadToo} {
		if err := store.Put(ctx, n, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	got, err := SweepFiles(ctx, failingDelete{store, deadToo}, "tables/", refering, time.Minute, now)
	if err == nil {
		t.Fatal("a failed delete was not reported")
	}
	if want := []string{dead}; !slices.Equal(got, want) {
		t.Fatalf("deleted %v, want %v", got, want)
	}
	for _, n := range []string{live, fresh, foreign, state, outside, deadToo} {
		if _, err := store.Get(ctx, n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := store.Get(ctx, dead); !blob.IsNotExist(err) {
		t.Fatalf("%s not deleted: %v", dead, err)
	}
	// Again, with the store working and the clock later: the young file
	// and the other table's go too; what a tablet references never does.
	got, err = SweepFiles(ctx, store, "tables/", refering, time.Minute, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fresh, deadToo}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("later: deleted %v, want %v", got, want)
	}
}
