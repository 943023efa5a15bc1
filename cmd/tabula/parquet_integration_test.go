//go:build integration

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

// TestExportImportParquetS3 exports a table to a path of a MinIO bucket
// and imports it back into a new table: every cell with its timestamp.
func TestExportImportParquetS3(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	addr := startTabula(t)
	c := dialTest(t, addr)
	cells := fillVersionedTable(t, c, "web")
	want := tableCells(t, c, "web")
	dest := "s3://" + cfg.Bucket + "/backups/web?" + blobtest.S3Query(cfg)
	out, _, err := runRowfileVerbs(t, "export", "parquet", "web", "--out", dest, "--shards", "4", "--codec", "zstd", "--addr", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("exported web: 60 rows, %d cells", cells)) || !strings.Contains(out, "in 4 files") {
		t.Errorf("summary %q", out)
	}
	loc, err := rowfile.OpenLocation(context.Background(), dest)
	if err != nil {
		t.Fatal(err)
	}
	names, err := loc.Shards(context.Background(), "web", "parquet")
	if err != nil || len(names) != 4 {
		t.Fatalf("shards in %s: %v, %v", dest, names, err)
	}
	if _, _, err := runRowfileVerbs(t, "import", "parquet", dest, "web2", "--create", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	if got := tableCells(t, c, "web2"); !slices.Equal(got, want) {
		t.Fatalf("imported from S3: %d cells, want %d", len(got), len(want))
	}
}
