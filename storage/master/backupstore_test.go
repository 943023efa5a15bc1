package master

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// A sweep keeps the files of unexpired backups and everything under a
// directory a live pending marker names; it deletes expired backups (and
// then their files) and stale markers.
func TestSweepKeepsBackupsAndDeletesExpired(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	name := func(dir string, n int) string {
		return dir + "/" + tabletName(old, n)
	}
	files := []string{name("tables/i/a", 1), name("tables/i/a", 2), name("tables/i/a", 3), name("tables/i/b", 4), name("tables/i/c", 5)}
	for _, f := range files {
		if err := store.Put(ctx, f, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	backup := func(id string, expire time.Time, fs ...string) {
		var metas []tabletdesc.FileMeta
		for _, f := range fs {
			metas = append(metas, tabletdesc.FileMeta{Name: f})
		}
		m := BackupManifest{ID: id, Instance: "i", ExpireTime: expire, Tablets: []tabletdesc.State{{ID: "t", Groups: map[string][]tabletdesc.FileMeta{"": metas}}}}
		if err := putManifest(ctx, store, m); err != nil {
			t.Fatal(err)
		}
	}
	backup("live", now.Add(time.Hour), files[0])
	backup("expired", now.Add(-time.Second), files[1])
	if err := putPending(ctx, store, pendingName("i", "backup-x"), "tables/i/b", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := putPending(ctx, store, pendingName("i", "backup-stale"), "tables/i/c", now.Add(-2*PendingMarkerTTL)); err != nil {
		t.Fatal(err)
	}

	deleted, err := SweepFiles(ctx, store, "tables/", nil, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	// Kept: the live backup's file, and the marked directory b. Deleted:
	// the expired backup's file, the unreferenced one, and c (its marker
	// is stale).
	if want := []string{files[1], files[2], files[4]}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	ms, err := listManifests(ctx, store, BackupsPrefix)
	if err != nil || len(ms) != 1 || ms[0].ID != "live" {
		t.Errorf("manifests after the sweep: %+v, %v; want only live", ms, err)
	}
	marks, err := store.List(ctx, PendingPrefix)
	if err != nil || len(marks) != 1 || marks[0].Name != pendingName("i", "backup-x") {
		t.Errorf("markers after the sweep: %v, %v; want only backup-x", marks, err)
	}
}

// tabletName is an SSTable name of the shape tablets make, created at ts.
func tabletName(ts time.Time, n int) string {
	return fmtHex(ts.UnixMicro()) + "-000000000000000" + string(rune('0'+n)) + ".sst"
}

func fmtHex(v int64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return string(b)
}
