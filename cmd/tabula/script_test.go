package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/cell"
)

// runScriptCLI runs the tabula command line in process with the verbs the
// script tests use.
func runScriptCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "tabula", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newCLICommands()...)
	root.AddCommand(newLoadCommand(), newScriptCommand())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// writeScript writes a script into a temporary file and returns its path.
func writeScript(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// jsonEntry is one entry of `script run --format json`.
type jsonEntry struct {
	Key   []any           `json:"key"`
	Value json.RawMessage `json:"value"`
}

// toCellRow turns a row read by the official client into the row a
// script sees: cells column by column, newest first (the client's order
// within a family; families sorted).
func toCellRow(r bigtable.Row) cell.Row {
	out := cell.Row{Key: []byte(r.Key())}
	fams := make([]string, 0, len(r))
	for f := range r {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, f := range fams {
		for _, it := range r[f] {
			out.Cells = append(out.Cells, cell.Cell{Family: f, Qualifier: []byte(strings.TrimPrefix(it.Column, f+":")),
				Timestamp: int64(it.Timestamp), Value: it.Value})
		}
	}
	return out
}

// TestScriptWebtable is the done-when test: the paper's Webtable,
// loaded into tabula dev and split into several tablets, summarized by
// scripts/testdata/webtable.szl server-side through `tabula script run
// --format json`; pages and refs agree exactly with counts made by
// reading the table through the official client. The same table serves
// the filter (read --where), transform (collection) and limit checks.
func TestScriptWebtable(t *testing.T) {
	addr := startTabula(t)
	c := dialTest(t, addr)
	ctx := context.Background()
	// Several tablets: the script's partials are merged across them.
	if err := c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "webtable", ColumnFamilies: webtableFamilies(),
		SplitKeys: []string{"com.c", "com.m", "n"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runScriptCLI(t, "load", "webtable", "--addr", addr, "--rows", "3000", "--table", "webtable", "--concurrency", "4"); err != nil {
		t.Fatal(err)
	}
	samples, err := c.data.Open("webtable").SampleRowKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 3 {
		t.Fatalf("table has tablet boundaries %q, want at least 3", samples)
	}

	// The counts, through the official client.
	rows := map[string]bigtable.Row{}
	var keys []string
	err = c.data.Open("webtable").ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows[r.Key()] = r
		keys = append(keys, r.Key())
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3000 {
		t.Fatalf("read %d rows, want 3000", len(rows))
	}
	wantPages, wantRefs := map[string]int64{}, map[string]int64{}
	var maxSize int64
	for _, r := range rows {
		lang := "unknown"
		for _, it := range r["language"] {
			lang = string(it.Value)
		}
		wantPages[lang]++
		for _, it := range r["anchor"] {
			wantRefs[strings.TrimPrefix(it.Column, "anchor:")]++
		}
		if cs := r["contents"]; len(cs) > 0 {
			maxSize = max(maxSize, int64(len(cs[0].Value)))
		}
	}

	if len(wantPages) < 2 || len(wantRefs) < 10 {
		t.Fatalf("the crawl has %d languages and %d referring sites: too few to test", len(wantPages), len(wantRefs))
	}

	t.Run("webtable.szl json", func(t *testing.T) {
		out, stderr, err := runScriptCLI(t, "script", "run", "../../scripts/testdata/webtable.szl", "--table", "webtable", "--addr", addr, "--format", "json", "--stats")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var got map[string][]jsonEntry
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("output is not the JSON object: %v\n%s", err, out)
		}
		for _, name := range []string{"pages", "refs", "largest", "sites"} {
			if _, ok := got[name]; !ok {
				t.Errorf("no table %q in %s", name, out[:min(len(out), 200)])
			}
		}
		counts := func(table string) map[string]int64 {
			m := map[string]int64{}
			for _, e := range got[table] {
				var n int64
				if len(e.Key) != 1 || json.Unmarshal(e.Value, &n) != nil {
					t.Fatalf("%s entry %v: want one key and a number", table, e)
				}
				m[e.Key[0].(string)] = n
			}
			return m
		}
		if gp := counts("pages"); !mapsEqual(gp, wantPages) {
			t.Errorf("pages = %v\nwant    %v", gp, wantPages)
		}
		if gr := counts("refs"); !mapsEqual(gr, wantRefs) {
			t.Errorf("refs differ: %d sites, want %d", len(gr), len(wantRefs))
		}
		// largest: an unindexed maximum(10), its value an array of
		// {url, size}, largest first.
		if len(got["largest"]) != 1 || len(got["largest"][0].Key) != 0 {
			t.Fatalf("largest = %v", got["largest"])
		}
		var largest []struct {
			URL  string `json:"url"`
			Size int64  `json:"size"`
		}
		if err := json.Unmarshal(got["largest"][0].Value, &largest); err != nil || len(largest) != 10 || largest[0].Size != maxSize {
			t.Errorf("largest = %s (err %v), want 10 entries, the first of size %d", got["largest"][0].Value, err, maxSize)
		}
		if !strings.Contains(stderr, "3000 rows scanned, 3000 processed") {
			t.Errorf("stats = %q", stderr)
		}
	})

	t.Run("text and prefix", func(t *testing.T) {
		out, _, err := runScriptCLI(t, "script", "run", "../../scripts/testdata/webtable.szl", "--table", "webtable", "--addr", addr, "--prefix", "com.")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{}
		for k, r := range rows {
			if strings.HasPrefix(k, "com.") {
				lang := "unknown"
				for _, it := range r["language"] {
					lang = string(it.Value)
				}
				want[lang]++
			}
		}
		for lang, n := range want {
			if line := fmt.Sprintf("pages[%q] = %d\n", lang, n); !strings.Contains(out, line) {
				t.Errorf("text output lacks %q:\n%s", line, out[:min(len(out), 300)])
			}
		}
	})

	t.Run("read --where", func(t *testing.T) {
		// Pages with at least three anchors whose language is not en.
		src := `
n: int = 0;
lang: string = "";
for (i: int = 0; i < len(input.cells); i++) {
    if (input.cells[i].family == "anchor") n++;
    if (input.cells[i].family == "language") lang = string(input.cells[i].value);
}
if (n >= 3 && lang != "en")
    emit keep <- true;
`
		file := writeScript(t, "where.szl", src)
		out, stderr, err := runScriptCLI(t, "read", "webtable", "--addr", addr, "--where", file, "--max-value", "20")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		// The same script, evaluated here over the rows the official
		// client read, selects the same rows; read prints them alike.
		prog, err := scripts.Compile("where.szl", src)
		if err != nil {
			t.Fatal(err)
		}
		run := prog.NewRun(scripts.Limits{})
		var want bytes.Buffer
		w := bufio.NewWriter(&want)
		kept := 0
		for _, k := range keys {
			ok, err := run.Process(toCellRow(rows[k]))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				kept++
				printRow(w, rows[k], 20)
			}
		}
		w.Flush()
		if kept == 0 || kept == len(keys) {
			t.Fatalf("the script keeps %d of %d rows: not a test of filtering", kept, len(keys))
		}
		if out != want.String() {
			t.Errorf("read --where printed %d bytes, want %d (%d rows)\n%s", len(out), want.Len(), kept, out[:min(len(out), 600)])
		}
		// With a range, columns and count, as read takes them.
		out, _, err = runScriptCLI(t, "read", "webtable", "--addr", addr, "--where", file, "prefix=com.", "columns=anchor,language", "count=2")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out, rowSeparator); n != 2 || strings.Contains(out, "contents:") {
			t.Errorf("read --where prefix= columns= count=2 printed %d rows:\n%s", n, out)
		}
	})

	t.Run("transform collection", func(t *testing.T) {
		file := writeScript(t, "links.szl", `
links: table collection of {page: string, from: string};
when (i: each int; input.cells[i].family == "anchor")
    emit links <- {string(input.key), string(input.cells[i].qualifier)};
`)
		out, _, err := runScriptCLI(t, "script", "run", file, "--table", "webtable", "--addr", addr, "--start", "com.m", "--end", "n", "--format", "json")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string][]jsonEntry
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		var records []struct{ Page, From string }
		if len(got["links"]) != 1 || json.Unmarshal(got["links"][0].Value, &records) != nil {
			t.Fatalf("links = %s", out[:min(len(out), 300)])
		}
		var gotPairs, wantPairs []string
		for _, r := range records {
			gotPairs = append(gotPairs, r.Page+" "+r.From)
		}
		for _, k := range keys {
			if k >= "com.m" && k < "n" {
				for _, it := range rows[k]["anchor"] {
					wantPairs = append(wantPairs, k+" "+strings.TrimPrefix(it.Column, "anchor:"))
				}
			}
		}
		slices.Sort(gotPairs)
		slices.Sort(wantPairs)
		if len(wantPairs) == 0 || !slices.Equal(gotPairs, wantPairs) {
			t.Errorf("collection has %d records, want %d", len(gotPairs), len(wantPairs))
		}
	})

	t.Run("limits", func(t *testing.T) {
		file := writeScript(t, "loop.szl", "n: int = 0;\nwhile (true) n++;\n")
		_, _, err := runScriptCLI(t, "script", "run", file, "--table", "webtable", "--addr", addr, "--max-steps", "5000")
		if err == nil || !strings.Contains(err.Error(), "RESOURCE_EXHAUSTED") || !strings.Contains(err.Error(), "loop.szl:2:") ||
			!strings.Contains(err.Error(), "step limit (5000)") {
			t.Errorf("runaway script: %v", err)
		}
		// The server goes on serving.
		out, _, err := runScriptCLI(t, "count", "webtable", "--addr", addr)
		if err != nil || out != "3000\n" {
			t.Errorf("count after the runaway = %q, %v", out, err)
		}
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestScriptCheck prints every error with its file and position and
// exits non-zero, or says ok.
func TestScriptCheck(t *testing.T) {
	bad := writeScript(t, "bad.szl", "x: int = \"s\";\ny: string = 1;\nemit nosuch <- 1;\n")
	out, _, err := runScriptCLI(t, "script", "check", bad)
	if err == nil {
		t.Fatal("check of a bad script succeeded")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("check printed %q, want 3 errors", out)
	}
	for i, l := range lines {
		if prefix := fmt.Sprintf("%s:%d:", bad, i+1); !strings.HasPrefix(l, prefix) {
			t.Errorf("line %q does not start with %q", l, prefix)
		}
	}
	if !strings.HasPrefix(lines[0], bad+":1:10: ") {
		t.Errorf("first error %q lacks its column 10", lines[0])
	}
	out, _, err = runScriptCLI(t, "script", "check", "../../scripts/testdata/webtable.szl")
	if err != nil || out != "ok\n" {
		t.Errorf("check of webtable.szl = %q, %v", out, err)
	}
	// run reports compile errors the same way, before any RPC.
	_, stderr, err := runScriptCLI(t, "script", "run", bad, "--table", "t", "--addr", "127.0.0.1:1")
	if err == nil || !strings.Contains(stderr, bad+":2:13: ") {
		t.Errorf("run of a bad script: %v, stderr %q", err, stderr)
	}
	if _, _, err := runScriptCLI(t, "script", "run", bad, "--addr", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "--table is required") {
		t.Errorf("run without --table: %v", err)
	}
}
