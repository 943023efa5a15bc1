//go:build integration

package rowfile

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/cell"
)

// TestS3Location writes a shard set to MinIO under a path of a bucket:
// nothing is listed before commit, an aborted shard never appears, and
// the set reads back through ranged reads.
func TestS3Location(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	ctx := context.Background()
	loc, err := OpenLocation(ctx, "s3://"+cfg.Bucket+"/exports/web?"+blobtest.S3Query(cfg))
	if err != nil {
		t.Fatal(err)
	}
	rows := testRows(40) // a 2.6 MB value: a multipart upload
	parts := [][]int{{0, 20}, {20, 40}}
	for i, p := range parts {
		w, err := loc.CreateShard(ctx, ShardName("web", i, 2, "parquet"), WriterOptions{RowGroupBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows[p[0]:p[1]] {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if names, err := loc.List(ctx); err != nil || len(names) != i {
			t.Fatalf("before commit of shard %d: %v, %v", i, names, err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	ab, err := loc.CreateShard(ctx, "other-00000-of-00001.parquet", WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.Write(rows[0]); err != nil {
		t.Fatal(err)
	}
	if err := ab.Abort(); err != nil {
		t.Fatal(err)
	}
	names, err := loc.List(ctx)
	if want := []string{"web-00000-of-00002.parquet", "web-00001-of-00002.parquet"}; err != nil || !slices.Equal(names, want) {
		t.Fatalf("List = %v, %v; want %v", names, err, want)
	}
	// The bucket's root holds nothing outside the path.
	root, err := OpenLocation(ctx, "s3://"+cfg.Bucket+"?"+blobtest.S3Query(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if names, err := root.List(ctx); err != nil || len(names) != 0 {
		t.Errorf("bucket root lists %v, %v", names, err)
	}
	readers, err := loc.OpenShards(ctx, "web", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	i := 0
	for _, r := range readers {
		for {
			row, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !rowsEqual(normalize([]cell.Row{row})[0], normalize(rows[i : i+1])[0]) {
				t.Fatalf("row %d read back differs", i)
			}
			got = append(got, i)
			i++
		}
		r.Close()
	}
	if len(got) != len(rows) {
		t.Fatalf("read %d rows, wrote %d", len(got), len(rows))
	}
}

// TestS3SourceMustExist: an input location on a bucket that does not
// exist is an error, and OpenSource does not create the bucket (an input
// misspelt would then read as empty); OpenLocation, for output, does.
func TestS3SourceMustExist(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	ctx := context.Background()
	desc := "s3://" + cfg.Bucket + "/exports?" + blobtest.S3Query(cfg)
	for range 2 {
		if _, err := OpenSource(ctx, desc); err == nil || !strings.Contains(err.Error(), "no such bucket") {
			t.Fatalf("OpenSource of a missing bucket: %v", err)
		}
	}
	if _, err := OpenLocation(ctx, desc); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSource(ctx, desc); err != nil {
		t.Fatalf("OpenSource once the bucket exists: %v", err)
	}
}
