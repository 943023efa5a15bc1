package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mrCounter reads one counter from `mr run`'s text output.
func mrCounter(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\s+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no counter %s in\n%s", name, out)
	}
	return m[1]
}

// TestMRTabula runs the built-in jobs through the CLI against tabula dev
// (tasks in this process): rowcounter, script equal to `script run`,
// copytable then verify, export then import then verify.
func TestMRTabula(t *testing.T) {
	addr := startTabula(t)
	run := func(args ...string) string {
		t.Helper()
		args = append(args, "--addr", addr)
		if args[0] == "mr" {
			args = append(args, "--progress", "none")
		}
		out, _, err := runTabula(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	if _, _, err := runTabula(t, "load", "webtable", "--rows", "3000", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	if got := mrCounter(t, run("mr", "run", "rowcounter", "webtable"), "ROWS"); got != "3000" {
		t.Errorf("rowcounter: ROWS %s, want 3000", got)
	}
	if got := mrCounter(t, run("mr", "run", "rowcounter", "webtable", "--prefix", "com."), "ROWS"); got == "0" || got == "3000" {
		t.Errorf("rowcounter --prefix com.: ROWS %s", got)
	}

	script := filepath.Join("..", "..", "scripts", "testdata", "webtable.szl")
	var mr struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(run("mr", "run", "script", script, "--table", "webtable", "--format", "json")), &mr); err != nil {
		t.Fatal(err)
	}
	var a, b any
	json.Unmarshal(mr.Result, &a)
	json.Unmarshal([]byte(run("script", "run", script, "--table", "webtable", "--format", "json")), &b)
	if a == nil || !reflect.DeepEqual(a, b) {
		t.Errorf("mr script printed %s, script run another result", mr.Result)
	}
	if text := run("mr", "run", "script", script, "--table", "webtable"); !strings.Contains(text, run("script", "run", script, "--table", "webtable")) {
		t.Errorf("mr script text output lacks script run's:\n%s", text)
	}
	// Written to a table twice with the same --timestamp: the same cells.
	run("createtable", "results", "families=result")
	run("mr", "run", "script", script, "--table", "webtable", "--output", "table:results", "--timestamp", "2026-01-02T00:00:00Z")
	first := run("read", "results")
	run("mr", "run", "script", script, "--table", "webtable", "--output", "table:results", "--timestamp", "2026-01-02T00:00:00Z")
	if second := run("read", "results"); second != first || !strings.Contains(first, "pages/en") || !strings.Contains(first, "2026/01/02-00:00:00") {
		t.Errorf("script output after a re-run:\n%.600s\nfirst:\n%.600s", second, first)
	}

	run("createtable", "copy", "families=contents,anchor,language")
	run("mr", "run", "copytable", "webtable", "copy")
	out := run("mr", "run", "verify", "webtable", "copy")
	if mrCounter(t, out, "GOOD") != "3000" || strings.Contains(out, "ONLY_IN") || strings.Contains(out, "CONTENT_DIFFERENT") {
		t.Errorf("verify after copytable:\n%s", out)
	}
	run("set", "copy", "zzz.extra", "language:=xx")
	// Tables that differ: the counters and rows are printed, and the
	// command fails, so that a script can tell.
	out, _, err := runTabula(t, "mr", "run", "verify", "webtable", "copy", "--addr", addr, "--progress", "none")
	if mrCounter(t, out, "ONLY_IN_B") != "1" || !strings.Contains(out, "ONLY_IN_B\t\"zzz.extra\"") {
		t.Errorf("verify after adding a row:\n%s", out)
	}
	if err == nil || !strings.Contains(err.Error(), "webtable and copy differ in 1 rows (ONLY_IN_A 0, ONLY_IN_B 1, CONTENT_DIFFERENT 0)") {
		t.Errorf("verify of tables that differ: error %v, want them said to differ", err)
	}

	// A word count with a total order: its files, in shard order, hold
	// the words sorted.
	wc := filepath.Join(t.TempDir(), "wc")
	run("mr", "run", "wordcount", "webtable", "--output", wc, "--format", "jsonl", "--reducers", "3", "--total-order", "200")
	var words []string
	for i := range 3 {
		b, err := os.ReadFile(filepath.Join(wc, fmt.Sprintf("part-%05d-of-00003.jsonl", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r struct{ Key []byte }
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			words = append(words, string(r.Key))
		}
	}
	if len(words) < 100 || !slices.IsSorted(words) {
		t.Errorf("total-order word count: %d words, sorted %v", len(words), slices.IsSorted(words))
	}

	dir := filepath.Join(t.TempDir(), "export")
	out = run("mr", "run", "export", "webtable", "--out", dir, "--format", "jsonl")
	if !strings.Contains(out, "wrote part-00000-of-") {
		t.Errorf("export printed\n%s", out)
	}
	run("createtable", "back", "families=contents,anchor,language")
	run("mr", "run", "import", dir, "back")
	out = run("mr", "run", "verify", "webtable", "back")
	if mrCounter(t, out, "GOOD") != "3000" || strings.Contains(out, "ONLY_IN") || strings.Contains(out, "CONTENT_DIFFERENT") {
		t.Errorf("verify after export and import:\n%s", out)
	}
	// What tabula export writes (webtable-SSSSS-of-NNNNN.parquet) imports
	// too: the one set in the directory, or the one --in-prefix names.
	tdir := t.TempDir()
	run("export", "parquet", "webtable", "--out", tdir, "--shards", "2")
	run("createtable", "back2", "families=contents,anchor,language")
	run("mr", "run", "import", tdir, "back2")
	if out = run("mr", "run", "verify", "webtable", "back2"); mrCounter(t, out, "GOOD") != "3000" {
		t.Errorf("verify after tabula export and mr import:\n%s", out)
	}
	run("export", "parquet", "webtable", "--out", tdir, "--shards", "1", "--prefix", "again")
	if _, _, err := runTabula(t, "mr", "run", "import", tdir, "back2", "--addr", addr, "--progress", "none"); err == nil ||
		!strings.Contains(err.Error(), "several prefixes (again, webtable): name one") {
		t.Errorf("mr import beside two sets: %v", err)
	}
	run("mr", "run", "import", tdir, "back2", "--in-prefix", "again")
}

// TestMRBadInput: bad input fails with a clear message before any task,
// writing nothing.
func TestMRBadInput(t *testing.T) {
	addr := startTabula(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	bad := filepath.Join(tmp, "bad.szl")
	os.WriteFile(bad, []byte("x: int = ;\n"), 0o644)
	used := filepath.Join(tmp, "used")
	os.MkdirAll(used, 0o755)
	os.WriteFile(filepath.Join(used, "part-00000-of-00001.jsonl"), nil, 0o644)
	runCLISteps(t, addr, []cliStep{
		{args: []string{"createtable", "web", "families=anchor,contents,language"}},
		{args: []string{"set", "web", "com.cnn.www", "anchor:cnnsi.com=CNN"}},
		{args: []string{"createtable", "nofam", "families=other"}},
		{args: []string{"mr", "run", "nosuchjob"}, errWant: `unknown job "nosuchjob"`},
		{args: []string{"mr", "run", "rowcounter"}, errWant: "rowcounter takes TABLE"},
		{args: []string{"mr", "run", "rowcounter", "nosuch"}, errWant: `"nosuch" not found`},
		{args: []string{"mr", "run", "rowcounter", "web", "--filter", "no_such_filter: 1"}, errWant: "--filter: not a RowFilter"},
		{args: []string{"mr", "run", "rowcounter", "web", "--regex", "("}, errWant: "INVALID_ARGUMENT"},
		{args: []string{"mr", "run", "rowcounter", "web", "--where", bad}, errWant: "--where " + bad + ": 1 error"},
		{args: []string{"mr", "run", "script", bad, "--table", "web"}, errWant: bad + ": 1 error"},
		{args: []string{"mr", "run", "script", bad}, errWant: "script needs --table"},
		{args: []string{"mr", "run", "export", "web", "--out", filepath.Join(file, "sub"), "--format", "jsonl"}, errWant: "output " + filepath.Join(file, "sub")},
		{args: []string{"mr", "run", "export", "web", "--out", used, "--format", "jsonl"}, errWant: "already holds part-00000-of-00001.jsonl"},
		{args: []string{"mr", "run", "export", "web", "--out", filepath.Join(tmp, "x")}, errWant: "export needs --format parquet or jsonl"},
		{args: []string{"mr", "run", "copytable", "web", "nosuch"}, errWant: `destination table "nosuch" not found`},
		{args: []string{"mr", "run", "copytable", "web", "nofam"}, errWant: `destination table "nofam" has no family "anchor"`},
		{args: []string{"mr", "run", "copytable", "web", "nofam", "--families", "nosuch:other"}, errWant: `source table "web" has no family "nosuch"`},
		{args: []string{"mr", "run", "wordcount", "web", "--output", "table:nofam"}, errWant: `output table "nofam" has no family "count"`},
		{args: []string{"mr", "run", "import", filepath.Join(tmp, "missing"), "web"}, errWant: "missing: no such file or directory"},
		{args: []string{"mr", "run", "import", tmp, "web"}, errWant: "no complete set"},
		// An export of web (family anchor) into nofam (only other): refused
		// before any row is written.
		{args: []string{"mr", "run", "export", "web", "--out", filepath.Join(tmp, "webexport"), "--format", "parquet"}, contain: []string{"wrote part-00000-of-"}},
		{args: []string{"mr", "run", "import", filepath.Join(tmp, "webexport"), "nofam"}, errWant: `table "nofam" has no families anchor that the files in`},
		{args: []string{"mr", "run", "import", filepath.Join(tmp, "webexport"), "nosuch"}, errWant: `table "nosuch": NOT_FOUND`},
		{args: []string{"mr", "run", "rowcounter", "web", "--format", "xml"}, errWant: `--format "xml"`},
		// Nothing was written by any of them.
		{args: []string{"count", "nofam"}, want: "0\n"},
	})
	if ents, _ := os.ReadDir(used); len(ents) != 1 {
		t.Errorf("the used output directory holds %d entries, want its 1", len(ents))
	}
	if _, err := os.Stat(filepath.Join(tmp, "x")); err == nil {
		t.Errorf("a refused export created its directory")
	}
}
