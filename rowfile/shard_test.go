package rowfile

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
)

func TestShardName(t *testing.T) {
	if got := ShardName("part", 3, 12, "parquet"); got != "part-00003-of-00012.parquet" {
		t.Errorf("ShardName = %s", got)
	}
	if got := ShardName("my-table", 0, 1, "jsonl"); got != "my-table-00000-of-00001.jsonl" {
		t.Errorf("ShardName = %s", got)
	}
	for _, tc := range []struct {
		name, prefix, ext string
		shard, total      int
		ok                bool
	}{
		{"part-00003-of-00012.parquet", "part", "parquet", 3, 12, true},
		{"my-table-00000-of-00001.parquet", "my-table", "parquet", 0, 1, true},
		{"my-table-00000-of-00001.parquet", "my", "parquet", 0, 0, false},
		{"part-00012-of-00012.parquet", "part", "parquet", 0, 0, false}, // shard ≥ total
		{"part-00000-of-00000.parquet", "part", "parquet", 0, 0, false},
		{"part-0003-of-00012.parquet", "part", "parquet", 0, 0, false},
		{"part-00003-of-00012.jsonl", "part", "parquet", 0, 0, false},
		{"part-+0003-of-00012.parquet", "part", "parquet", 0, 0, false},
		{"part-00003_of-00012.parquet", "part", "parquet", 0, 0, false},
	} {
		s, n, ok := ParseShardName(tc.name, tc.prefix, tc.ext)
		if ok != tc.ok || s != tc.shard || n != tc.total {
			t.Errorf("ParseShardName(%s, %s) = %d, %d, %v; want %d, %d, %v", tc.name, tc.prefix, s, n, ok, tc.shard, tc.total, tc.ok)
		}
	}
	for _, bad := range [][2]int{{-1, 3}, {3, 3}, {0, 0}, {0, MaxShards + 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ShardName(%d, %d) did not panic", bad[0], bad[1])
				}
			}()
			ShardName("p", bad[0], bad[1], "parquet")
		}()
	}
}

func TestListShards(t *testing.T) {
	set := []string{"t-00002-of-00003.parquet", "t-00000-of-00003.parquet", "other.txt", "t-00001-of-00003.parquet", "u-00000-of-00001.parquet"}
	got, err := ListShards(set, "t", "parquet")
	if want := []string{"t-00000-of-00003.parquet", "t-00001-of-00003.parquet", "t-00002-of-00003.parquet"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ListShards = %v, %v; want %v", got, err, want)
	}
	if _, err := ListShards(set[:2], "t", "parquet"); !errors.Is(err, ErrIncompleteShards) || !strings.Contains(err.Error(), "1 of 3 shards missing: t-00001-of-00003.parquet") {
		t.Errorf("missing shard: %v", err)
	}
	mixed := append(slices.Clone(set), "t-00000-of-00002.parquet", "t-00001-of-00002.parquet")
	if _, err := ListShards(mixed, "t", "parquet"); !errors.Is(err, ErrIncompleteShards) || !strings.Contains(err.Error(), "[2 3]") {
		t.Errorf("mixed sets: %v", err)
	}
	if _, err := ListShards(set, "v", "parquet"); !errors.Is(err, ErrNoShards) {
		t.Errorf("no shards: %v", err)
	}
	many := []string{"t-00000-of-00009.parquet"}
	if _, err := ListShards(many, "t", "parquet"); err == nil || !strings.Contains(err.Error(), "8 of 9 shards missing") || !strings.Contains(err.Error(), "and 3 more") {
		t.Errorf("many missing: %v", err)
	}
	if got := ShardPrefixes(append(set, "x-y-00000-of-00001.parquet", "-00000-of-00001.parquet"), "parquet"); !slices.Equal(got, []string{"t", "u", "x-y"}) {
		t.Errorf("ShardPrefixes = %v", got)
	}
	if got := MatchShards(set, "t", "parquet"); len(got) != 3 {
		t.Errorf("MatchShards = %v", got)
	}
}

// TestLocationCommit: a shard is visible only once committed; an aborted
// or unfinished one never is, and a failed write leaves nothing.
func TestLocationCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	loc, err := OpenLocation(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := smallRows(30)
	w, err := loc.CreateShard(ctx, ShardName("t", 0, 2, "parquet"), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	// Written but not committed: a crash here leaves nothing visible.
	if names, _ := loc.List(ctx); len(names) != 0 {
		t.Errorf("uncommitted shard visible: %v", names)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err == nil {
		t.Error("second Commit succeeded")
	}
	aborted, err := loc.CreateShard(ctx, ShardName("t", 1, 2, "parquet"), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := aborted.Write(rows[0]); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Abort(); err != nil {
		t.Fatal(err)
	}
	names, err := loc.List(ctx)
	if err != nil || !slices.Equal(names, []string{"t-00000-of-00002.parquet"}) {
		t.Fatalf("List = %v, %v; want only the committed shard", names, err)
	}
	if _, err := loc.OpenShards(ctx, "t", ReaderOptions{}); !errors.Is(err, ErrIncompleteShards) {
		t.Errorf("OpenShards of a half set: %v", err)
	}
	// A writer that cannot start (columns layout without columns) leaves
	// nothing either.
	if _, err := loc.CreateShard(ctx, ShardName("t", 1, 2, "parquet"), WriterOptions{Format: ParquetColumns}); err == nil {
		t.Error("columns layout without columns accepted")
	}
	// Completing the set makes it readable, shard by shard.
	w, err = loc.CreateShard(ctx, ShardName("t", 1, 2, "parquet"), WriterOptions{Codec: Zstd})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(cell.Row{Key: []byte("zz"), Cells: []cell.Cell{{Family: "f", Timestamp: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	readers, err := loc.OpenShards(ctx, "t", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, r := range readers {
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n != len(rows)+1 {
		t.Errorf("read %d rows from the set, wrote %d", n, len(rows)+1)
	}
	if err := loc.Delete(ctx, "t-00001-of-00002.parquet"); err != nil {
		t.Fatal(err)
	}
	if err := loc.Delete(ctx, "t-00001-of-00002.parquet"); !blob.IsNotExist(err) {
		t.Errorf("Delete of a missing file: %v", err)
	}
	if _, err := loc.Create(ctx, "a/b"); err == nil {
		t.Error("Create accepted a name with a slash")
	}
}

// TestShardFinishThenCommit: Finish ends the file's content without
// making it visible; Commit then commits exactly that content; rows after
// Finish are refused; Abort after Finish leaves nothing.
func TestShardFinishThenCommit(t *testing.T) {
	ctx := context.Background()
	loc, err := OpenLocation(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rows := smallRows(40)
	w, err := loc.CreateShard(ctx, ShardName("f", 0, 2, "parquet"), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Errorf("second Finish: %v", err)
	}
	if err := w.Write(rows[0]); err == nil {
		t.Error("Write after Finish succeeded")
	}
	if names, _ := loc.List(ctx); len(names) != 0 {
		t.Errorf("finished but uncommitted shard visible: %v", names)
	}
	finishedBytes := w.Stats().Bytes
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err == nil {
		t.Error("Commit after Commit succeeded")
	}
	if err := w.Finish(); err == nil {
		t.Error("Finish after Commit succeeded")
	}
	obj, err := loc.Open(ctx, ShardName("f", 0, 2, "parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if obj.Size() != finishedBytes {
		t.Errorf("committed file has %d bytes, Finish had written %d", obj.Size(), finishedBytes)
	}
	obj.Close()
	r, err := loc.OpenShard(ctx, ShardName("f", 0, 2, "parquet"), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		got, err := r.Next()
		if err == io.EOF {
			if i != len(rows) {
				t.Errorf("read %d rows, wrote %d", i, len(rows))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Key) != string(rows[i].Key) || len(got.Cells) != len(rows[i].Cells) {
			t.Fatalf("row %d: got %q with %d cells, want %q with %d", i, got.Key, len(got.Cells), rows[i].Key, len(rows[i].Cells))
		}
	}
	r.Close()

	aborted, err := loc.CreateShard(ctx, ShardName("f", 1, 2, "parquet"), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := aborted.Write(rows[0]); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Abort(); err != nil {
		t.Fatal(err)
	}
	if names, err := loc.List(ctx); err != nil || !slices.Equal(names, []string{"f-00000-of-00002.parquet"}) {
		t.Errorf("List = %v, %v; want only the committed shard", names, err)
	}
}

func TestOpenLocationErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ desc, want string }{
		{"", "empty location"},
		{"s3://bucket/a//b?endpoint=127.0.0.1:1", "path"},
		{"s3:///path", "no bucket"},
		{"gs://bucket/x", "unsupported scheme"},
		{"file://relative/x", "not supported"},
	} {
		if _, err := OpenLocation(ctx, tc.desc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenLocation(%q) = %v, want an error with %q", tc.desc, err, tc.want)
		}
	}
	loc, err := OpenLocation(ctx, "file://"+t.TempDir()+"/sub")
	if err != nil {
		t.Fatal(err)
	}
	if names, err := loc.List(ctx); err != nil || len(names) != 0 {
		t.Errorf("new location lists %v, %v", names, err)
	}
}

// TestOpenSource: a source directory must exist; it is not created.
func TestOpenSource(t *testing.T) {
	ctx := context.Background()
	missing := t.TempDir() + "/missing"
	for _, desc := range []string{missing, "file://" + missing} {
		if _, err := OpenSource(ctx, desc); err == nil {
			t.Errorf("OpenSource(%s) succeeded", desc)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("OpenSource created %s: %v", missing, err)
	}
	if _, err := OpenSource(ctx, t.TempDir()); err != nil {
		t.Error(err)
	}
}
