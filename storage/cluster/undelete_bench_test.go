package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/master"
)

// BenchmarkDevRestore restores a table of four tablets (2 MB and 16 MB)
// from a backup by reference, as RestoreTable does — the RPC, then
// GetOperation until done: states saved, catalog entry, tablets opened —
// against the reference of merely copying the backup's SSTables within the
// store (what RestoreTable did before, on top of the same metadata work),
// measured in the same run. The restore's cost does not grow with the
// data; the copy's does.
func BenchmarkDevRestore(b *testing.B) {
	for _, mb := range []int{2, 16} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) { benchmarkDevRestore(b, mb<<10) })
	}
}

func benchmarkDevRestore(b *testing.B, rows int) {
	dir := b.TempDir()
	srv := devtest.StartT(b, cluster.DevConfig{Dir: dir, MemtableBytes: 1 << 20})
	ctx := context.Background()
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "src", SplitKeys: []string{"k2", "k4", "k6"},
		Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(1)}}); err != nil {
		b.Fatal(err)
	}
	tbl := srv.Data.Open("src")
	val := []byte(strings.Repeat("v", 1024))
	for start := 0; start < rows; start += 512 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+512; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "q", 1000, val)
			keys = append(keys, fmt.Sprintf("k%05d", (i*7919)%rows))
			muts = append(muts, m)
		}
		if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
			b.Fatal(err, errs)
		}
	}
	if err := srv.Admin.CreateBackup(ctx, "src", "c1", "bk", time.Now().Add(7*time.Hour)); err != nil {
		b.Fatal(err)
	}
	raw, err := store.Get(ctx, master.BackupsPrefix+"dev/bk.json")
	if err != nil {
		b.Fatal(err)
	}
	var m master.BackupManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		b.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	adm, ops := adminpb.NewBigtableTableAdminClient(conn), longrunningpb.NewOperationsClient(conn)
	n := 0 // table and directory names across the runs b.Run makes
	b.Run("by-reference", func(b *testing.B) {
		b.SetBytes(m.SizeBytes)
		for range b.N {
			n++
			// The RPC and GetOperation every 100 µs until done: the
			// official client's own polling backs off from a second.
			op, err := adm.RestoreTable(ctx, &adminpb.RestoreTableRequest{Parent: devInstance, TableId: fmt.Sprintf("r%d", n),
				Source: &adminpb.RestoreTableRequest_Backup{Backup: devInstance + "/clusters/c1/backups/bk"}})
			for err == nil && !op.GetDone() {
				time.Sleep(100 * time.Microsecond)
				op, err = ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op.GetName()})
			}
			if err != nil || op.GetError() != nil {
				b.Fatal(err, op.GetError())
			}
		}
	})
	b.Run("copy-reference", func(b *testing.B) {
		b.SetBytes(m.SizeBytes)
		for range b.N {
			n++
			for _, f := range m.Files() {
				if err := copyBlob(ctx, store, f, fmt.Sprintf("tables/dev/copy%d/%s", n, path.Base(f))); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func copyBlob(ctx context.Context, store blob.Store, src, dst string) error {
	in, err := store.Open(ctx, src)
	if err != nil {
		return err
	}
	defer in.Close()
	w, err := store.Create(ctx, dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, io.NewSectionReader(in, 0, in.Size())); err != nil {
		_ = w.Abort()
		return err
	}
	return w.Close()
}
