package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
)

// TestWriteShardsConcurrently drives the export's writer DoFn directly
// (outside a runner) over one bundle of shards, which it writes
// concurrently: every shard's file is committed and emitted once, with
// all the rows of its ranges; when one shard fails, the bundle fails
// with that shard's error and emits nothing.
func TestWriteShardsConcurrently(t *testing.T) {
	dev.CreateTable(t, "wshards", []string{"f", "g"}, "r00030", "r00060")
	dev.WriteRows(t, "wshards", devtest.Rows(90))
	readJSON, err := json.Marshal(beamio.ReadConfig{Table: conn().Table("wshards")})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(i int, ranges ...keyrange.Restriction) string {
		b, err := json.Marshal(shardSpec{Index: i, Ranges: ranges})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	r := func(start, end string) keyrange.Restriction {
		return keyrange.Restriction{Start: []byte(start), End: []byte(end)}
	}
	// run writes specs as one bundle and returns the names emitted.
	run := func(dir string, specs ...string) ([]string, error) {
		f := &writeShardFn{ReadJSON: string(readJSON), Out: dir, Prefix: "w", Shards: len(specs), Format: int(rowfile.Parquet)}
		if err := f.Setup(); err != nil {
			t.Fatal(err)
		}
		defer f.Teardown()
		ctx := devtest.Context(t)
		var emitted []string
		emit := func(n string) { emitted = append(emitted, n) }
		f.StartBundle(ctx, emit)
		for _, s := range specs {
			if err := f.ProcessElement(s, emit); err != nil {
				return emitted, err
			}
		}
		return emitted, f.FinishBundle(ctx, emit)
	}

	dir := t.TempDir()
	names, err := run(dir, spec(0, r("", "r00020")), spec(1, r("r00020", "r00050"), r("r00055", "r00070")), spec(2, r("r00070", "")), spec(3))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	want := []string{"w-00000-of-00004.parquet", "w-00001-of-00004.parquet", "w-00002-of-00004.parquet", "w-00003-of-00004.parquet"}
	if !slices.Equal(names, want) {
		t.Fatalf("emitted %v, want %v", names, want)
	}
	for i, rows := range []int64{20, 45, 20, 0} {
		f, err := os.Open(filepath.Join(dir, want[i]))
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		rr, err := rowfile.NewReader(f, st.Size(), rowfile.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := rowfile.Each(rr, func(cell.Row) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if n != rows {
			t.Errorf("%s holds %d rows, want %d", want[i], n, rows)
		}
	}

	// A shard whose file cannot be committed (a non-empty directory
	// holds its name) fails the bundle with its error; nothing is
	// emitted.
	dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "w-00001-of-00003.parquet", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	names, err = run(dir, spec(0, r("", "r00020")), spec(1, r("r00020", "r00050")), spec(2, r("r00070", "")))
	if err == nil || !strings.Contains(err.Error(), "w-00001-of-00003.parquet") {
		t.Fatalf("a bundle with a failing shard: err %v, want one naming its file", err)
	}
	if len(names) != 0 {
		t.Errorf("a failed bundle emitted %v", names)
	}
}
