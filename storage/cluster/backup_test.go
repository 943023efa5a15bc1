package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/master"
)

// TestDevBackupRestore backs a table up while the sweep of unreferenced
// files runs aggressively (every 5 ms, files older than 1 s: a new file
// must be committed to its tablet's state within half the grace, or the
// tablet writes it again — under load a flush can take over 100 ms), keeps
// writing (small memtables: flushes and compactions drop the files the
// backup references from the table), deletes the source table, and
// restores: the restored table equals the table at the backup, cell by
// cell, before and after the backup is deleted.
func TestDevBackupRestore(t *testing.T) {
	dir := t.TempDir()
	srv := devtest.StartT(t, cluster.DevConfig{Dir: dir, SweepInterval: 5 * time.Millisecond, SweepGrace: time.Second, MemtableBytes: 16 << 10})
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := devtest.Context(t)
	srv.CreateTable(t, "src", []string{"a", "b"}, "k3", "k6")
	tbl := srv.Data.Open("src")
	write := func(round, n int) {
		t.Helper()
		for i := range n {
			m := bigtable.NewMutation()
			m.Set("a", "q", bigtable.Timestamp(1000*(round+1)), []byte(fmt.Sprintf("r%d-%d-%s", round, i, strings.Repeat("x", 200))))
			m.Set("b", fmt.Sprintf("c%d", i%7), 1000, []byte(fmt.Sprint(round)))
			if i%11 == 0 {
				m.DeleteCellsInFamily("b")
			}
			if err := tbl.Apply(ctx, fmt.Sprintf("k%d", (i*7919)%1000), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 600)
	write(1, 300)
	atBackup := srv.CellDump(t, "src")

	if err := srv.Admin.CreateBackup(ctx, "src", "c1", "bk", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Writes go on after the backup, in the background while the
	// rest runs; none of them may show in the restore.
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := 2; !stop.Load() && round < 8; round++ {
			write(round, 300)
		}
	}()
	// Watch the table's files while the writes and sweeps run: some
	// must be deleted (the sweep runs), none of the backup's. Under load
	// a file replaced by a compaction is swept only seconds later (the
	// grace, then a round): the watch goes on until one is, or a minute.
	seen := map[string]bool{}
	swept := func() int {
		objs, err := store.List(ctx, "tables/dev/src/")
		if err != nil {
			t.Fatal(err)
		}
		present := map[string]bool{}
		for _, o := range objs {
			seen[o.Name] = true
			present[o.Name] = true
		}
		n := 0
		for f := range seen {
			if !present[f] {
				n++
			}
		}
		return n
	}
	for i, deadline := 0, time.Now().Add(time.Minute); i < 25 || (swept() == 0 && time.Now().Before(deadline)); i++ {
		swept()
		time.Sleep(20 * time.Millisecond)
	}
	raw, err := store.Get(ctx, master.BackupsPrefix+"dev/bk.json")
	if err != nil {
		t.Fatal(err)
	}
	var manifest master.BackupManifest
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	nswept := swept()
	if nswept == 0 {
		t.Fatalf("no file of the table was swept while %d were seen: the sweep did not run", len(seen))
	}
	objs, err := store.List(ctx, "tables/dev/src/")
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, o := range objs {
		present[o.Name] = true
	}
	for _, f := range manifest.Files() {
		if !present[f] {
			t.Fatalf("the sweep deleted %s, which the backup references", f)
		}
	}
	t.Logf("%d files swept meanwhile, the backup's %d kept", nswept, len(manifest.Files()))

	info, err := srv.Admin.BackupInfo(ctx, "c1", "bk")
	if err != nil || info.SourceTable != "src" || info.SizeBytes <= 0 {
		t.Fatalf("BackupInfo: %+v, %v", info, err)
	}
	if err := srv.Admin.RestoreTable(ctx, "r1", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	if got := srv.CellDump(t, "r1"); !slices.Equal(got, atBackup) {
		t.Fatalf("restored table differs from the table at the backup: %d cells, want %d\n%s", len(got), len(atBackup), firstDiff(got, atBackup))
	}
	stop.Store(true)
	wg.Wait()
	if now := srv.CellDump(t, "src"); slices.Equal(now, atBackup) {
		t.Fatal("the writes after the backup changed nothing: the test shows nothing")
	}

	// Deleting the source table does not harm the backup.
	if err := srv.Admin.DeleteTable(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := srv.Admin.RestoreTable(ctx, "r2", "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	if got := srv.CellDump(t, "r2"); !slices.Equal(got, atBackup) {
		t.Fatalf("restore after deleting the source: %s", firstDiff(got, atBackup))
	}

	// Update, copy, list, delete.
	if err := srv.Admin.UpdateBackup(ctx, "c1", "bk", time.Now().Add(9*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Admin.CopyBackup(ctx, "c1", "bk", devtest.Project, devtest.Instance, "c1", "bk2", time.Now().Add(8*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var names []string
	it := srv.Admin.Backups(ctx, "c1")
	for {
		b, err := it.Next()
		if err != nil {
			break
		}
		names = append(names, b.Name)
		if b.Name == "bk2" && !strings.HasSuffix(b.SourceBackup, "/clusters/c1/backups/bk") {
			t.Errorf("copy's source backup %q", b.SourceBackup)
		}
	}
	if !slices.Equal(names, []string{"bk", "bk2"}) {
		t.Errorf("backups %q, want bk and bk2", names)
	}
	if err := srv.Admin.DeleteBackup(ctx, "c1", "bk"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Admin.BackupInfo(ctx, "c1", "bk"); status.Code(err) != codes.NotFound {
		t.Errorf("deleted backup: %v, want NOT_FOUND", err)
	}
	time.Sleep(100 * time.Millisecond) // sweeps: bk2 keeps the files, the restored tables have their own
	if err := srv.Admin.RestoreTable(ctx, "r3", "c1", "bk2"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"r1", "r3"} {
		if got := srv.CellDump(t, r); !slices.Equal(got, atBackup) {
			t.Fatalf("%s after deleting the backup: %s", r, firstDiff(got, atBackup))
		}
	}
	if err := srv.Admin.DeleteBackup(ctx, "c1", "bk2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := srv.CellDump(t, "r1"); !slices.Equal(got, atBackup) {
		t.Fatalf("r1 after deleting every backup: %s", firstDiff(got, atBackup))
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("cell %d: got %.120s, want %.120s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

// TestDevBackupBadInput: the right status code naming the field, and
// nothing created.
func TestDevBackupBadInput(t *testing.T) {
	srv := devtest.StartT(t, cluster.DevConfig{})
	ctx := devtest.Context(t)
	srv.CreateTable(t, "t", []string{"a"})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	adm := adminpb.NewBigtableTableAdminClient(conn)
	inst := "projects/" + devtest.Project + "/instances/" + devtest.Instance
	clusterName := inst + "/clusters/c"
	table := inst + "/tables/t"
	in := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }
	if err := srv.Admin.CreateBackup(ctx, "t", "c", "ok", time.Now().Add(7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"expire too soon", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "b", Backup: &adminpb.Backup{SourceTable: table, ExpireTime: in(time.Hour)}})
			return err
		}, codes.InvalidArgument, "backup.expire_time"},
		{"expire too late", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "b", Backup: &adminpb.Backup{SourceTable: table, ExpireTime: in(100 * 24 * time.Hour)}})
			return err
		}, codes.InvalidArgument, "backup.expire_time"},
		{"no expire time", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "b", Backup: &adminpb.Backup{SourceTable: table}})
			return err
		}, codes.InvalidArgument, "backup.expire_time"},
		{"unknown table", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "b", Backup: &adminpb.Backup{SourceTable: table + "x", ExpireTime: in(7 * time.Hour)}})
			return err
		}, codes.NotFound, "tables/tx"},
		{"bad backup id", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "-b", Backup: &adminpb.Backup{SourceTable: table, ExpireTime: in(7 * time.Hour)}})
			return err
		}, codes.InvalidArgument, "backup_id"},
		{"backup exists", func() error {
			_, err := adm.CreateBackup(ctx, &adminpb.CreateBackupRequest{Parent: clusterName, BackupId: "ok", Backup: &adminpb.Backup{SourceTable: table, ExpireTime: in(7 * time.Hour)}})
			return err
		}, codes.AlreadyExists, "backups/ok"},
		{"unknown backup", func() error {
			_, err := adm.GetBackup(ctx, &adminpb.GetBackupRequest{Name: clusterName + "/backups/nope"})
			return err
		}, codes.NotFound, "name"},
		{"restore unknown backup", func() error {
			_, err := adm.RestoreTable(ctx, &adminpb.RestoreTableRequest{Parent: inst, TableId: "new", Source: &adminpb.RestoreTableRequest_Backup{Backup: clusterName + "/backups/nope"}})
			return err
		}, codes.NotFound, "backup"},
		{"restore over a table", func() error {
			_, err := adm.RestoreTable(ctx, &adminpb.RestoreTableRequest{Parent: inst, TableId: "t", Source: &adminpb.RestoreTableRequest_Backup{Backup: clusterName + "/backups/ok"}})
			return err
		}, codes.AlreadyExists, "tables/t"},
		{"restore without a source", func() error {
			_, err := adm.RestoreTable(ctx, &adminpb.RestoreTableRequest{Parent: inst, TableId: "new"})
			return err
		}, codes.InvalidArgument, "backup"},
		{"update unknown field", func() error {
			_, err := adm.UpdateBackup(ctx, &adminpb.UpdateBackupRequest{Backup: &adminpb.Backup{Name: clusterName + "/backups/ok"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"source_table"}}})
			return err
		}, codes.InvalidArgument, "update_mask.paths[0]"},
		{"update expire into the past", func() error {
			_, err := adm.UpdateBackup(ctx, &adminpb.UpdateBackupRequest{Backup: &adminpb.Backup{Name: clusterName + "/backups/ok", ExpireTime: in(-time.Hour)}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_time"}}})
			return err
		}, codes.InvalidArgument, "backup.expire_time"},
		{"delete unknown backup", func() error {
			_, err := adm.DeleteBackup(ctx, &adminpb.DeleteBackupRequest{Name: clusterName + "/backups/nope"})
			return err
		}, codes.NotFound, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want %v naming %s", err, tc.code, tc.field)
			}
		})
	}
	var names []string
	it := srv.Admin.Backups(ctx, "c")
	for {
		b, err := it.Next()
		if err != nil {
			break
		}
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"ok"}) {
		t.Errorf("backups after the bad requests: %q, want only ok", names)
	}
	tables, err := srv.Admin.Tables(ctx)
	if err != nil || !slices.Equal(tables, []string{"t"}) {
		t.Errorf("tables after the bad requests: %q, %v", tables, err)
	}
	_ = context.Background
}
