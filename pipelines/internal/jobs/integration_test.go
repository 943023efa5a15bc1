//go:build integration

package jobs

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

// TestDuckDBReadsExport has DuckDB (npm @duckdb/node-api, installed by
// deploy/test.sh; a Parquet reader Tabula did not write) read the
// export pipeline's shards: row count, cell count and every cell
// (family, qualifier, timestamp, md5 and length of the value) match the
// table as the official client reads it.
func TestDuckDBReadsExport(t *testing.T) {
	nodePath := os.Getenv("TABULA_TEST_DUCKDB_NODE_PATH")
	if nodePath == "" {
		t.Fatal("TABULA_TEST_DUCKDB_NODE_PATH is not set: run through deploy/test.sh, which installs @duckdb/node-api")
	}
	dev.CreateTable(t, "duck", []string{"f", "g"}, "r00100", "r00200")
	dev.WriteRows(t, "duck", devtest.Rows(300))
	want := dev.ReadRows(t, "duck", bigtable.InfiniteRange(""))
	dir := t.TempDir()
	if _, err := Export(devtest.Context(t), ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("duck")}, Out: dir, Shards: 3}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "duck-*-of-00003.parquet"))
	if len(files) != 3 {
		t.Fatalf("files %v, want 3 shards", files)
	}
	script, err := filepath.Abs("../../../rowfile/testdata/duckdb_check.js")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{script, "template"}, files...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node duckdb_check.js: %v\n%s", err, stderr.String())
	}
	var got struct {
		Rows     int     `json:"rows"`
		Cells    int     `json:"cells"`
		CellRows [][]any `json:"cellRows"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("duckdb_check.js printed %q: %v", out, err)
	}
	var wantCells [][]string
	for _, r := range want {
		for _, c := range r.Cells {
			sum := md5.Sum(c.Value)
			wantCells = append(wantCells, []string{hex.EncodeToString(r.Key), c.Family, hex.EncodeToString(c.Qualifier),
				fmt.Sprint(c.Timestamp), hex.EncodeToString(sum[:]), fmt.Sprint(len(c.Value))})
		}
	}
	if got.Rows != len(want) || got.Cells != len(wantCells) || len(got.CellRows) != len(wantCells) {
		t.Fatalf("DuckDB reads %d rows, %d cells (%d listed); want %d rows, %d cells", got.Rows, got.Cells, len(got.CellRows), len(want), len(wantCells))
	}
	for i, w := range wantCells {
		g := got.CellRows[i]
		gs := make([]string, len(g))
		for j, v := range g {
			gs[j] = fmt.Sprint(v)
		}
		gs[0] = lowerHex(gs[0])
		gs[2] = lowerHex(gs[2])
		if fmt.Sprint(gs) != fmt.Sprint(w) {
			t.Fatalf("cell %d: DuckDB %v, want %v", i, gs, w)
		}
	}
}

func lowerHex(s string) string { return string(bytes.ToLower([]byte(s))) }

// TestExportImportS3 exports to MinIO and imports back from it.
func TestExportImportS3(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	dev.CreateTable(t, "s3src", []string{"f", "g"}, "r00100")
	dev.WriteRows(t, "s3src", devtest.Rows(200))
	loc := "s3://" + cfg.Bucket + "/exports/s3src?" + blobtest.S3Query(cfg)
	if _, err := Export(devtest.Context(t), ExportConfig{Read: beamio.ReadConfig{Table: conn().Table("s3src")}, Out: loc, Shards: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := Import(devtest.Context(t), ImportConfig{In: loc, Conn: conn(), Table: "s3dst", Create: true}); err != nil {
		t.Fatal(err)
	}
	sameRows(t, dev.ReadRows(t, "s3dst", bigtable.InfiniteRange("")), dev.ReadRows(t, "s3src", bigtable.InfiniteRange("")))
}

// TestImportS3Input: an S3 --in the store refuses (credentials it does
// not know) fails with an error naming --in and the store's reason; an
// S3 path with no shards says it holds none. Neither creates the table.
func TestImportS3Input(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	ctx := devtest.Context(t)
	empty := "s3://" + cfg.Bucket + "/nothing/here?" + blobtest.S3Query(cfg)
	// A bucket that does not exist is named so, and not created.
	for range 2 {
		_, err := Import(ctx, ImportConfig{In: empty, Conn: conn(), Table: "s3input", Create: true})
		if err == nil || !strings.HasPrefix(err.Error(), "--in "+empty+": ") || !strings.HasSuffix(err.Error(), "no such bucket") {
			t.Fatalf("import from a missing bucket: %v, want --in %s: … no such bucket", err, empty)
		}
	}
	if _, err := blob.NewS3(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, err := Import(ctx, ImportConfig{In: empty, Conn: conn(), Table: "s3input", Create: true})
	if want := "--in " + empty + " holds no shards: no files named PREFIX-SSSSS-of-NNNNN.parquet"; err == nil || err.Error() != want {
		t.Fatalf("import from an empty S3 path: %v, want %q", err, want)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "nosuchkey")
	_, err = Import(ctx, ImportConfig{In: empty, Conn: conn(), Table: "s3input", Create: true})
	if err == nil || !strings.HasPrefix(err.Error(), "--in "+empty+": ") || strings.Count(err.Error(), empty) != 1 {
		t.Fatalf("import with credentials the store refuses: %v, want --in %s: and the store's reason", err, empty)
	}
	t.Logf("refused: %v", err)
	if _, err := pipe.Families(ctx, conn(), "s3input"); err == nil {
		t.Fatal("a failed import created its table")
	}
}
