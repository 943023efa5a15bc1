package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/filter"
)

// runRowfileVerbs runs export/import verbs in process.
func runRowfileVerbs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "tabula", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newExportCommand(), newImportCommand())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// fillVersionedTable creates table with three tablets and writes rows
// with several versions per column at explicit timestamps, binary keys
// and qualifiers and one large value, through the official client. It
// returns the number of cells written.
func fillVersionedTable(t *testing.T, c *conn, table string) int {
	t.Helper()
	ctx := context.Background()
	err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{
		TableID:   table,
		SplitKeys: []string{"g", "n"},
		ColumnFamilies: map[string]bigtable.Family{
			"contents": {GCPolicy: bigtable.NoGcPolicy()},
			"anchor":   {GCPolicy: bigtable.NoGcPolicy()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.data.Open(table)
	var keys []string
	var muts []*bigtable.Mutation
	cells := 0
	for i := range 60 {
		key := fmt.Sprintf("%c-row-%03d\x00\xff", 'a'+i%26, i)
		m := bigtable.NewMutation()
		for v := range 1 + i%4 {
			m.Set("contents", "", bigtable.Timestamp(1_700_000_000_000_000+int64(v)*1000+int64(i)), fmt.Appendf(nil, "<html>%d v%d", i, v))
			cells++
		}
		if i%3 == 0 {
			m.Set("anchor", "\x00bin\xfequal", bigtable.Timestamp(1_600_000_000_000_000+int64(i)), []byte{0, 1, 2, 0xff})
			m.Set("anchor", "cnn.com", bigtable.Timestamp(5), []byte("CNN"))
			cells += 2
		}
		if i == 7 {
			m.Set("contents", "big", bigtable.Timestamp(42), bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1 MiB
			cells++
		}
		keys = append(keys, key)
		muts = append(muts, m)
	}
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		t.Fatal(err, errs)
	}
	return cells
}

// tableCells returns every cell of a table, all versions, as
// "key/family:qualifier@ts=len:sum" strings sorted, so two tables compare.
func tableCells(t *testing.T, c *conn, table string) []string {
	t.Helper()
	var out []string
	for key, r := range readAll(t, c, table) {
		for fam, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%q/%s@%d=%q", key, it.Column, it.Timestamp, it.Value))
				_ = fam
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestExportImportParquet exports a table with several versions per
// column to Parquet shards and imports them into a new table: every cell,
// with its timestamp, is the same. Then the refusals: a file of the wrong
// schema, an incomplete set, a truncated file, a missing table, an
// unreachable server — each a clear error that writes nothing.
func TestExportImportParquet(t *testing.T) {
	addr := startTabula(t)
	c := dialTest(t, addr)
	wantCells := fillVersionedTable(t, c, "web")
	want := tableCells(t, c, "web")
	if len(want) != wantCells {
		t.Fatalf("table holds %d cells, wrote %d", len(want), wantCells)
	}

	for _, tc := range []struct {
		name  string
		args  []string
		files int
	}{
		{"per-tablet", nil, 3},
		{"more-shards-than-tablets", []string{"--shards", "5", "--codec", "zstd"}, 5},
		{"one-shard", []string{"--shards", "1", "--codec", "none"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, _, err := runRowfileVerbs(t, append([]string{"export", "parquet", "web", "--out", dir, "--addr", addr}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, fmt.Sprintf("exported web: 60 rows, %d cells", wantCells)) || !strings.Contains(out, fmt.Sprintf("in %d files", tc.files)) {
				t.Errorf("summary %q", out)
			}
			names := dirNames(t, dir)
			if len(names) != tc.files {
				t.Fatalf("files %v, want %d", names, tc.files)
			}
			for i, n := range names {
				if want := rowfile.ShardName("web", i, tc.files, "parquet"); n != want {
					t.Errorf("file %d is %s, want %s", i, n, want)
				}
			}
			dst := "web_" + strings.ReplaceAll(tc.name, "-", "_")
			out, _, err = runRowfileVerbs(t, "import", "parquet", dir, dst, "--create", "--addr", addr)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, fmt.Sprintf("imported web: 60 rows, %d cells", wantCells)) {
				t.Errorf("summary %q", out)
			}
			got := tableCells(t, c, dst)
			if !slices.Equal(got, want) {
				t.Fatalf("imported table differs: %d cells, want %d", len(got), len(want))
			}
		})
	}

	t.Run("refusals", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, err := runRowfileVerbs(t, "export", "parquet", "web", "--out", dir, "--shards", "2", "--addr", addr); err != nil {
			t.Fatal(err)
		}
		// Exporting again over the same files needs --overwrite.
		_, _, err := runRowfileVerbs(t, "export", "parquet", "web", "--out", dir, "--shards", "3", "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "--overwrite") {
			t.Errorf("export over existing files: %v", err)
		}
		// A shard of the wrong schema (the columns layout) in the set.
		good := filepath.Join(dir, rowfile.ShardName("web", 1, 2, "parquet"))
		saved, err := os.ReadFile(good)
		if err != nil {
			t.Fatal(err)
		}
		writeColumnsFile(t, good)
		assertImportRefused(t, c, addr, dir, "schema mismatch")
		// A truncated shard.
		if err := os.WriteFile(good, saved[:len(saved)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		assertImportRefused(t, c, addr, dir, "corrupt")
		// A missing shard.
		if err := os.Remove(good); err != nil {
			t.Fatal(err)
		}
		assertImportRefused(t, c, addr, dir, "1 of 2 shards missing")
		// Not Parquet at all.
		if err := os.WriteFile(good, []byte("PAR1 this is not parquet"), 0o644); err != nil {
			t.Fatal(err)
		}
		assertImportRefused(t, c, addr, dir, "corrupt")
		if err := os.WriteFile(good, saved, 0o644); err != nil {
			t.Fatal(err)
		}
		// Restored, but into a table that does not exist, without --create.
		_, _, err = runRowfileVerbs(t, "import", "parquet", dir, "nosuch", "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") || !strings.Contains(err.Error(), "--create") {
			t.Errorf("import into a missing table: %v", err)
		}
		// Into an existing table without the files' families.
		if err := c.admin.CreateTableFromConf(context.Background(), &bigtable.TableConf{TableID: "thin", ColumnFamilies: map[string]bigtable.Family{"contents": {}}}); err != nil {
			t.Fatal(err)
		}
		_, _, err = runRowfileVerbs(t, "import", "parquet", dir, "thin", "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "lacks families anchor") {
			t.Errorf("import into a table without the families: %v", err)
		}
		if n := len(tableCells(t, c, "thin")); n != 0 {
			t.Errorf("refused import wrote %d cells", n)
		}
		// An export that fails after committing some shards removes them:
		// the second shard's name is taken by a directory, so its commit
		// (a rename) fails after the first shard may have committed.
		fdir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(fdir, rowfile.ShardName("web", 1, 2, "parquet"), "blocker"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err = runRowfileVerbs(t, "export", "parquet", "web", "--out", fdir, "--shards", "2", "--concurrency", "1", "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "files removed") {
			t.Errorf("export whose second shard cannot commit: %v", err)
		}
		if names := dirNames(t, fdir); !slices.Equal(names, []string{rowfile.ShardName("web", 1, 2, "parquet")}) {
			t.Errorf("failed export left %v", names)
		}
		// A source directory that does not exist is not created.
		missing := filepath.Join(t.TempDir(), "missing")
		_, _, err = runRowfileVerbs(t, "import", "parquet", missing, "web_m", "--create", "--addr", addr)
		if _, serr := os.Stat(missing); err == nil || !os.IsNotExist(serr) {
			t.Errorf("import from a missing directory: %v; the directory: %v", err, serr)
		}
		// Exporting a missing table, or from a server that is not there.
		_, _, err = runRowfileVerbs(t, "export", "parquet", "nosuch", "--out", t.TempDir(), "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
			t.Errorf("export of a missing table: %v", err)
		}
		empty := t.TempDir()
		_, _, err = runRowfileVerbs(t, "export", "parquet", "web", "--out", empty, "--addr", "127.0.0.1:1", "--timeout", "2s")
		if err == nil || !strings.Contains(err.Error(), "no answer from 127.0.0.1:1") {
			t.Errorf("export from an unreachable server: %v", err)
		}
		if names := dirNames(t, empty); len(names) != 0 {
			t.Errorf("failed export left %v", names)
		}
		_, _, err = runRowfileVerbs(t, "import", "parquet", dir, "web_x", "--create", "--addr", "127.0.0.1:1", "--timeout", "2s")
		if err == nil {
			t.Errorf("import to an unreachable server succeeded")
		}
	})
}

// assertImportRefused imports dir into a new table and checks that the
// import fails with msg and that the table was not even created.
func assertImportRefused(t *testing.T, c *conn, addr, dir, msg string) {
	t.Helper()
	_, _, err := runRowfileVerbs(t, "import", "parquet", dir, "refused", "--create", "--addr", addr)
	if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("import: err = %v, want one with %q and \"nothing written\"", err, msg)
	}
	tables, lerr := c.admin.Tables(context.Background())
	if lerr != nil {
		t.Fatal(lerr)
	}
	if slices.Contains(tables, "refused") {
		t.Errorf("refused import (%v) created the table", err)
	}
}

// writeColumnsFile writes a valid Parquet file of the columns layout: the
// wrong schema for import.
func writeColumnsFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := rowfile.NewWriter(f, rowfile.WriterOptions{Format: rowfile.ParquetColumns, Columns: []rowfile.Column{{Family: "contents"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(cell.Row{Key: []byte("k"), Cells: []cell.Cell{{Family: "contents", Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// TestExportColumnsAndJSONL exports the columns layout (columns found by
// a first scan, newest value each) and JSON Lines, and imports the JSON
// Lines back.
func TestExportColumnsAndJSONL(t *testing.T) {
	addr := startTabula(t)
	c := dialTest(t, addr)
	fillVersionedTable(t, c, "web")
	want := tableCells(t, c, "web")

	dir := t.TempDir()
	out, _, err := runRowfileVerbs(t, "export", "parquet", "web", "--out", dir, "--layout", "columns", "--prefix", "cols", "--addr", addr,
		"--prefix-rows", "a", "--columns", "contents:,anchor:cnn.com")
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rowfile.OpenLocation(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	readers, err := loc.OpenShards(context.Background(), "cols", rowfile.ReaderOptions{Format: rowfile.ParquetColumns})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, r := range readers {
		for {
			row, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rows++
			if !bytes.HasPrefix(row.Key, []byte("a")) {
				t.Errorf("--prefix-rows a exported row %q", row.Key)
			}
			// contents: holds the newest version, v(i%4).
			var i int
			if _, err := fmt.Sscanf(string(row.Key[2:]), "row-%03d", &i); err != nil {
				t.Fatalf("row %q: %v", row.Key, err)
			}
			wantCells := []cell.Cell{{Family: "contents", Qualifier: []byte{}, Value: fmt.Appendf(nil, "<html>%d v%d", i, i%4)}}
			if i%3 == 0 {
				wantCells = append([]cell.Cell{{Family: "anchor", Qualifier: []byte("cnn.com"), Value: []byte("CNN")}}, wantCells...)
			}
			if fmt.Sprint(row.Cells) != fmt.Sprint(wantCells) {
				t.Errorf("row %q: cells %v, want %v", row.Key, row.Cells, wantCells)
			}
		}
		r.Close()
	}
	if rows != 3 || !strings.Contains(out, "exported web: 3 rows") {
		t.Errorf("columns export of prefix a: %d rows read, summary %q", rows, out)
	}
	// A family the table lacks is named, and nothing is written.
	bad := t.TempDir()
	_, _, err = runRowfileVerbs(t, "export", "parquet", "web", "--out", bad, "--layout", "columns", "--addr", addr,
		"--columns", "contents:,nofam:x,nofam:y")
	if err == nil || !strings.Contains(err.Error(), "families the table does not have: nofam (its families: anchor, contents)") {
		t.Errorf("columns export naming a missing family: %v", err)
	}
	if names := dirNames(t, bad); len(names) != 0 {
		t.Errorf("a refused columns export wrote %v", names)
	}
	// Columns layout cannot name a non-UTF-8 qualifier as a column.
	_, _, err = runRowfileVerbs(t, "export", "parquet", "web", "--out", t.TempDir(), "--layout", "columns", "--addr", addr)
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("columns export with a binary qualifier: %v", err)
	}
	// From the contents crawls on (no anchors), a first scan finds the
	// one column.
	cdir := t.TempDir()
	out, _, err = runRowfileVerbs(t, "export", "parquet", "web", "--out", cdir, "--layout", "columns", "--addr", addr,
		"--starttime", "2023-11-14T22:13:20Z", "--shards", "1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(cdir, "web-00000-of-00001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if err := rowfile.CheckSchema(f, fi.Size(), rowfile.Parquet, "columns file"); err == nil {
		t.Errorf("a columns-layout file passes as the template layout")
	}
	cr, err := rowfile.NewReader(f, fi.Size(), rowfile.ReaderOptions{Format: rowfile.ParquetColumns})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; n++ {
		row, err := cr.Next()
		if err == io.EOF {
			if n != 60 {
				t.Errorf("columns file from --starttime: %d rows, want 60", n)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(row.Cells) != 1 || row.Cells[0].Family != "contents" {
			t.Fatalf("row %q: cells %v, want the one contents: column", row.Key, row.Cells)
		}
	}

	jdir := t.TempDir()
	if _, _, err := runRowfileVerbs(t, "export", "jsonl", "web", "--out", "file://"+jdir, "--addr", addr, "--shards", "2"); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, jdir); !slices.Equal(names, []string{"web-00000-of-00002.jsonl", "web-00001-of-00002.jsonl"}) {
		t.Errorf("jsonl files %v", names)
	}
	if _, _, err := runRowfileVerbs(t, "import", "jsonl", jdir, "web_j", "--create", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	if got := tableCells(t, c, "web_j"); !slices.Equal(got, want) {
		t.Errorf("jsonl round trip: %d cells, want %d", len(got), len(want))
	}
}

// TestPlanShards checks the split of a key range into shards on tablet
// boundaries and sampled keys.
// TestColumnsRowFilter checks the filter the columns layout reads with:
// exactly the named columns, empty and binary qualifiers included, and
// not the columns beside them.
func TestColumnsRowFilter(t *testing.T) {
	row := cell.Row{Key: []byte("r"), Cells: []cell.Cell{
		{Family: "anchor", Qualifier: []byte{}, Timestamp: 1, Value: []byte("a-empty")},
		{Family: "anchor", Qualifier: []byte("\x00bin\xfe"), Timestamp: 1, Value: []byte("a-bin")},
		{Family: "anchor", Qualifier: []byte("\x00bin\xfe\x00"), Timestamp: 1, Value: []byte("a-bin-longer")},
		{Family: "anchor", Qualifier: []byte("cnn.com"), Timestamp: 2, Value: []byte("a-cnn-2")},
		{Family: "anchor", Qualifier: []byte("cnn.com"), Timestamp: 1, Value: []byte("a-cnn-1")},
		{Family: "contents", Qualifier: []byte{}, Timestamp: 1, Value: []byte("c-empty")},
		{Family: "contents", Qualifier: []byte("x"), Timestamp: 1, Value: []byte("c-x")},
	}}
	values := func(cols ...rowfile.Column) string {
		f, err := filter.Compile(columnsRowFilter(cols), filter.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range f.Apply(row) {
			got = append(got, string(c.Value))
		}
		return strings.Join(got, ",")
	}
	for _, tc := range []struct {
		cols []rowfile.Column
		want string
	}{
		{[]rowfile.Column{{Family: "contents", Qualifier: []byte{}}}, "c-empty"},
		{[]rowfile.Column{{Family: "anchor", Qualifier: []byte("\x00bin\xfe")}}, "a-bin"},
		{[]rowfile.Column{{Family: "anchor", Qualifier: []byte("cnn.com")}, {Family: "contents", Qualifier: []byte("x")}}, "a-cnn-2,a-cnn-1,c-x"},
		{[]rowfile.Column{{Family: "anchor", Qualifier: []byte{}}, {Family: "nofam", Qualifier: []byte("x")}}, "a-empty"},
	} {
		if got := values(tc.cols...); got != tc.want {
			t.Errorf("columns %v: cells %q, want %q", tc.cols, got, tc.want)
		}
	}
}

// TestRowfileVerbsUnknownFormat: an unknown format is named even when the
// flags of a real format follow it.
func TestRowfileVerbsUnknownFormat(t *testing.T) {
	for _, args := range [][]string{
		{"export", "xml", "web", "--out", "/tmp/x"},
		{"export", "xml", "web"},
		{"import", "xml", "/tmp/x", "web", "--create"},
	} {
		_, _, err := runRowfileVerbs(t, args...)
		if err == nil || !strings.Contains(err.Error(), `format "xml": want parquet or jsonl`) {
			t.Errorf("%q: %v, want the unknown format named", args, err)
		}
	}
}

func TestPlanShards(t *testing.T) {
	k := func(s string) []byte { return []byte(s) }
	tablets := [][]byte{k(""), k("g"), k("n")}
	samples := []client.RowSample{{Key: k("c"), Offset: 100}, {Key: k("g"), Offset: 200}, {Key: k("j"), Offset: 300}, {Key: k("n"), Offset: 400}, {Key: k("t"), Offset: 1000}, {Key: nil, Offset: 1600}}
	str := func(rs []keyRange) string {
		var parts []string
		for _, r := range rs {
			if r.Empty {
				parts = append(parts, "empty")
				continue
			}
			parts = append(parts, fmt.Sprintf("[%s,%s)", r.Start, r.End))
		}
		return strings.Join(parts, " ")
	}
	for _, tc := range []struct {
		n          int
		start, end []byte
		want       string
	}{
		{1, nil, nil, "[,)"},
		{3, nil, nil, "[,g) [g,n) [n,)"},
		// Two shards: n is nearest to half of the 1600 bytes.
		{2, nil, nil, "[,n) [n,)"},
		// More shards than tablets: sampled keys split the big last tablet.
		{4, nil, nil, "[,j) [j,n) [n,t) [t,)"},
		{6, nil, nil, "[,c) [c,g) [g,j) [j,n) [n,t) [t,)"},
		// More shards than any candidate: empty ones at the end.
		{8, nil, nil, "[,c) [c,g) [g,j) [j,n) [n,t) [t,) empty empty"},
		// A range inside the table uses only boundaries inside it.
		{2, k("h"), k("z"), "[h,n) [n,z)"},
		{3, k("h"), k("m"), "[h,j) [j,m) empty"},
	} {
		if got := str(planShards(tablets, samples, tc.n, tc.start, tc.end)); got != tc.want {
			t.Errorf("planShards(%d, %q, %q) = %s, want %s", tc.n, tc.start, tc.end, got, tc.want)
		}
	}
	// Without sizes, candidates are taken evenly.
	noSizes := []client.RowSample{{Key: nil}}
	starts := [][]byte{k(""), k("b"), k("c"), k("d"), k("e"), k("f")}
	if got := str(planShards(starts, noSizes, 3, nil, nil)); got != "[,c) [c,e) [e,)" {
		t.Errorf("planShards without sizes = %s", got)
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"", 0, false},
		{"1700000000000000", 1_700_000_000_000_000, false},
		{"2023-11-14T22:13:20Z", 1_700_000_000_000_000, false},
		{"2023-11-14T22:13:20.5+00:00", 1_700_000_000_500_000, false},
		{"-5", 0, true},
		{"yesterday", 0, true},
		{"1960-01-01T00:00:00Z", 0, true},
	} {
		got, err := parseTime("starttime", tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseTime(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
