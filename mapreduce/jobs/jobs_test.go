package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/jobs"
	"github.com/tabuladb/tabula/storage/client"
)

const webRows = 2000

var anchorWords = strings.Fields("Breaking News sports CNN home page weather Lisbon travel tech markets")

// loadWeb writes a small Webtable through the official client: contents
// with up to three versions, anchors from other sites, a language.
func loadWeb(t *testing.T, e *env, table string) {
	t.Helper()
	e.CreateTable(t, table, []string{"contents", "anchor", "language"}, devtest.SplitKeys(webRows, 10)...)
	tbl := e.Data.Open(table)
	r := rand.New(rand.NewPCG(7, 7))
	var keys []string
	var muts []*bigtable.Mutation
	for i := range webRows {
		m := bigtable.NewMutation()
		for v := range 1 + r.IntN(3) {
			m.Set("contents", "", bigtable.Timestamp(1_000_000_000+int64(v)*1000), []byte(fmt.Sprintf("<html>page %d v%d %s</html>", i, v, strings.Repeat("x", r.IntN(300)))))
		}
		for a := range r.IntN(5) {
			text := anchorWords[r.IntN(len(anchorWords))] + " " + anchorWords[r.IntN(len(anchorWords))]
			m.Set("anchor", fmt.Sprintf("site%d.example", a), bigtable.Timestamp(2_000_000_000), []byte(text))
		}
		m.Set("language", "", bigtable.Timestamp(1_000_000_000), []byte([]string{"EN", "PT", "DE"}[r.IntN(3)]))
		keys = append(keys, fmt.Sprintf("row%05d", i))
		muts = append(muts, m)
		if len(keys) == 500 {
			if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
				t.Fatal(err, errs)
			}
			keys, muts = nil, nil
		}
	}
}

func (e *env) run(t *testing.T, name string, conf any, cfg mapreduce.Config) (*mapreduce.Result, error) {
	t.Helper()
	job, err := mapreduce.Build(name, jobs.Conf(conf))
	if err != nil {
		return nil, err
	}
	cfg.Addr = e.Addr
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	if cfg.LocalWorkers == 0 {
		cfg.LocalWorkers = 3
	}
	return mapreduce.Run(e.ctx, job, cfg)
}

func (e *env) mustRun(t *testing.T, name string, conf any) *mapreduce.Result {
	t.Helper()
	res, err := e.run(t, name, conf, mapreduce.Config{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestRowCounter: rowcounter over a table of 10 tablets counts the loaded
// rows; with a prefix, the rows an official-client read of the prefix
// returns.
func TestRowCounter(t *testing.T) {
	e := startEnv(t)
	loadWeb(t, e, "web")
	res := e.mustRun(t, "rowcounter", jobs.RowCounterConf{Input: jobs.TableSpec{Table: "web"}})
	if got := res.Counters[jobs.CounterRows]; got != webRows {
		t.Errorf("ROWS = %d, want %d", got, webRows)
	}
	if res.Counters[mapreduce.CounterMapAttempts] < 10 {
		t.Errorf("%d map attempts, want one per tablet (10)", res.Counters[mapreduce.CounterMapAttempts])
	}
	want := 0
	if err := e.Data.Open("web").ReadRows(e.ctx, bigtable.PrefixRange("row012"), func(bigtable.Row) bool { want++; return true }); err != nil {
		t.Fatal(err)
	}
	res = e.mustRun(t, "rowcounter", jobs.RowCounterConf{Input: jobs.TableSpec{Table: "web", Prefix: []byte("row012")}})
	if got := res.Counters[jobs.CounterRows]; got != int64(want) || want == 0 {
		t.Errorf("ROWS with prefix = %d, want %d", got, want)
	}
}

// TestCopyTableThenVerify: copytable then verify reports no difference;
// changing, deleting and adding rows in the copy shows as CONTENT_DIFFERENT,
// ONLY_IN_A and ONLY_IN_B with those rows; renaming families copies under
// the new names.
func TestCopyTableThenVerify(t *testing.T) {
	e := startEnv(t)
	loadWeb(t, e, "web")
	e.CreateTable(t, "copy", []string{"contents", "anchor", "language"}, "row00500")
	e.mustRun(t, "copytable", jobs.CopyTableConf{Input: jobs.TableSpec{Table: "web"}, Dst: "copy"})
	if a, b := e.CellDump(t, "web"), e.CellDump(t, "copy"); !slices.Equal(a, b) {
		t.Fatalf("copy differs: %d cells vs %d", len(b), len(a))
	}
	res := e.mustRun(t, "verify", jobs.VerifyConf{A: jobs.TableSpec{Table: "web"}, B: "copy"})
	c := res.Counters
	if c[jobs.CounterGood] != webRows || c[jobs.CounterOnlyInA]+c[jobs.CounterOnlyInB]+c[jobs.CounterContentDifferent] != 0 {
		t.Fatalf("verify of a copy: %v", c)
	}
	cp := e.Data.Open("copy")
	m := bigtable.NewMutation()
	m.Set("language", "", bigtable.Timestamp(1_000_000_000), []byte("XX"))
	if err := cp.Apply(e.ctx, "row00042", m); err != nil {
		t.Fatal(err)
	}
	del := bigtable.NewMutation()
	del.DeleteRow()
	if err := cp.Apply(e.ctx, "row01000", del); err != nil {
		t.Fatal(err)
	}
	add := bigtable.NewMutation()
	add.Set("language", "", 5, []byte("EN"))
	if err := cp.Apply(e.ctx, "row99999", add); err != nil {
		t.Fatal(err)
	}
	res = e.mustRun(t, "verify", jobs.VerifyConf{A: jobs.TableSpec{Table: "web"}, B: "copy"})
	c = res.Counters
	if c[jobs.CounterGood] != webRows-2 || c[jobs.CounterContentDifferent] != 1 || c[jobs.CounterOnlyInA] != 1 || c[jobs.CounterOnlyInB] != 1 {
		t.Errorf("verify after changes: %v", c)
	}
	diffs, err := jobs.VerifyDiffs(res, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []jobs.VerifyDiff{{Row: []byte("row00042"), Kind: "CONTENT_DIFFERENT"}, {Row: []byte("row01000"), Kind: "ONLY_IN_A"}, {Row: []byte("row99999"), Kind: "ONLY_IN_B"}}
	if fmt.Sprint(diffs) != fmt.Sprint(want) {
		t.Errorf("diffs %v, want %v", diffs, want)
	}

	e.CreateTable(t, "renamed", []string{"links"})
	e.mustRun(t, "copytable", jobs.CopyTableConf{Input: jobs.TableSpec{Table: "web"}, Dst: "renamed", Rename: map[string]string{"anchor": "links"}})
	n, m2 := 0, 0
	if err := e.Data.Open("web").ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool { n += len(r["anchor"]); return true }); err != nil {
		t.Fatal(err)
	}
	if err := e.Data.Open("renamed").ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool { m2 += len(r["links"]); return true }); err != nil {
		t.Fatal(err)
	}
	if n == 0 || n != m2 {
		t.Errorf("renamed copy holds %d links cells, source %d anchor cells", m2, n)
	}
}

// TestExportImportVerify: export (Parquet and JSON Lines) then import into
// a new table then verify: no difference, every version and timestamp.
func TestExportImportVerify(t *testing.T) {
	e := startEnv(t)
	loadWeb(t, e, "web")
	for _, format := range []string{"parquet", "jsonl"} {
		t.Run(format, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			res := e.mustRun(t, "export", jobs.ExportConf{Input: jobs.TableSpec{Table: "web"}, Out: dir, Format: format})
			if len(res.Files) != 10 {
				t.Errorf("files %v, want 10 (one per tablet)", res.Files)
			}
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, en := range ents {
				names = append(names, en.Name())
			}
			if !slices.Contains(names, mapreduce.SuccessFile) || slices.Contains(names, "_temporary") || len(names) != 11 {
				t.Errorf("output dir holds %v", names)
			}
			var man mapreduce.Manifest
			b, err := os.ReadFile(filepath.Join(dir, mapreduce.SuccessFile))
			if err != nil || json.Unmarshal(b, &man) != nil || len(man.Files) != 10 {
				t.Errorf("manifest %s: %v", b, err)
			}
			// The families a table needs before the import (checked by
			// tabula mr run import before anything is written).
			if fams, err := jobs.ImportFamilies(context.Background(), dir, ""); err != nil || !slices.Equal(fams, []string{"anchor", "contents", "language"}) {
				t.Errorf("ImportFamilies = %v, %v; want anchor, contents, language", fams, err)
			}
			if _, err := jobs.ImportFamilies(context.Background(), t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "no complete set") {
				t.Errorf("ImportFamilies of an empty directory: %v", err)
			}
			// The same files under another prefix (as tabula export names
			// them, after the table): the one set there is found; beside a
			// second set, the prefix must be named.
			renamed := t.TempDir()
			copyShards := func(prefix string) {
				for _, f := range res.Files {
					b, err := os.ReadFile(filepath.Join(dir, f))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(renamed, prefix+strings.TrimPrefix(f, "part")), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			copyShards("web")
			if fams, err := jobs.ImportFamilies(context.Background(), renamed, ""); err != nil || len(fams) != 3 {
				t.Errorf("ImportFamilies of the one set web-…: %v, %v", fams, err)
			}
			renamedTable := "imported_renamed_" + format
			e.CreateTable(t, renamedTable, []string{"contents", "anchor", "language"})
			e.mustRun(t, "import", jobs.ImportConf{In: renamed, Table: renamedTable})
			if a, b := e.CellDump(t, "web"), e.CellDump(t, renamedTable); !slices.Equal(a, b) {
				t.Errorf("import of the web-… set: %d cells, want %d", len(b), len(a))
			}
			copyShards("other")
			if _, err := jobs.ImportFamilies(context.Background(), renamed, ""); err == nil || !strings.Contains(err.Error(), "several prefixes (other, web)") {
				t.Errorf("ImportFamilies beside two sets: %v, want the prefixes named", err)
			}
			if fams, err := jobs.ImportFamilies(context.Background(), renamed, "other"); err != nil || len(fams) != 3 {
				t.Errorf("ImportFamilies of the named set other-…: %v, %v", fams, err)
			}
			table := "imported_" + format
			e.CreateTable(t, table, []string{"contents", "anchor", "language"})
			e.mustRun(t, "import", jobs.ImportConf{In: dir, Table: table})
			res = e.mustRun(t, "verify", jobs.VerifyConf{A: jobs.TableSpec{Table: "web"}, B: table})
			if c := res.Counters; c[jobs.CounterGood] != webRows || c[jobs.CounterOnlyInA]+c[jobs.CounterOnlyInB]+c[jobs.CounterContentDifferent] != 0 {
				t.Errorf("verify after import: %v", c)
			}
			if a, b := e.CellDump(t, "web"), e.CellDump(t, table); !slices.Equal(a, b) {
				t.Errorf("imported table differs: %d cells vs %d", len(b), len(a))
			}
			// A second export into the same directory is refused before
			// writing anything.
			if _, err := e.run(t, "export", jobs.ExportConf{Input: jobs.TableSpec{Table: "web"}, Out: dir, Format: format}, mapreduce.Config{}); err == nil || !strings.Contains(err.Error(), "already holds") {
				t.Errorf("export into a used directory: %v", err)
			}
		})
	}
}

// TestScriptJob: the script job over scripts/testdata/webtable.szl equals
// the script run through the client (what tabula script run prints); with
// an output table it writes one row per aggregator key.
func TestScriptJob(t *testing.T) {
	e := startEnv(t)
	loadWeb(t, e, "web")
	src, err := os.ReadFile("../../scripts/testdata/webtable.szl")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(e.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	direct, err := c.RunScript(e.ctx, "web", string(src), client.ScriptOptions{Name: "webtable.szl"})
	if err != nil {
		t.Fatal(err)
	}
	e.CreateTable(t, "results", []string{"result"})
	conf := jobs.ScriptConf{Input: jobs.TableSpec{Table: "web"}, Name: "webtable.szl", Source: string(src), Output: jobs.OutputSpec{Table: "results"}}
	res := e.mustRun(t, "script", conf)
	got, err := jobs.ScriptResult(res, conf.Name, conf.Source)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != direct.String() {
		t.Errorf("mr script:\n%s\nscript run:\n%s", got, direct)
	}
	rows := 0
	if err := e.Data.Open("results").ReadRows(e.ctx, bigtable.PrefixRange("pages/"), func(r bigtable.Row) bool { rows++; return true }); err != nil {
		t.Fatal(err)
	}
	if want := len(direct.Table("pages").Entries); rows != want || rows == 0 {
		t.Errorf("%d pages/ rows in the output table, want %d", rows, want)
	}
	if res.Counters[mapreduce.CounterInputRows] != webRows {
		t.Errorf("input rows %d, want %d", res.Counters[mapreduce.CounterInputRows], webRows)
	}
}

// TestWordCountJob: the built-in wordcount over the anchors equals a count
// through the official client.
func TestWordCountJob(t *testing.T) {
	e := startEnv(t)
	loadWeb(t, e, "web")
	want := map[string]int{}
	if err := e.Data.Open("web").ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, it := range r["anchor"] {
			for _, w := range jobs.Words(string(it.Value)) {
				want[w]++
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("anchor"))); err != nil {
		t.Fatal(err)
	}
	e.CreateTable(t, "wc", []string{"count"})
	e.mustRun(t, "wordcount", jobs.WordCountConf{Input: jobs.TableSpec{Table: "web"}, Output: jobs.OutputSpec{Table: "wc"}})
	got := map[string]int{}
	if err := e.Data.Open("wc").ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		var n int
		fmt.Sscan(string(r["count"][0].Value), &n)
		got[r.Key()] = n
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("wordcount %v, want %v", got, want)
	}
}
