package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
	"github.com/tabuladb/tabula/storage/cluster"
)

// startTabula runs `tabula dev` in this process on a temporary directory
// and returns its address: the same tool paths as against the emulator,
// now against Tabula.
func startTabula(t *testing.T) string {
	t.Helper()
	srv, err := cluster.StartDev(context.Background(), cluster.DevConfig{
		Dir:    t.TempDir(),
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start tabula dev: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Addr()
}

// TestCLIVerbsTabula runs the verbs against tabula dev, including the
// locality-group extension the emulator lacks.
func TestCLIVerbsTabula(t *testing.T) {
	addr := startTabula(t)
	row := rowSeparator + "\ncom.cnn.www\n" +
		"  anchor:cnnsi.com                         @ 2023/11/14-22:13:20.000000\n    \"CNN\"\n" +
		"  contents:                                @ 2023/11/14-22:13:21.000000\n    \"<html>v2\"\n" +
		"  contents:                                @ 2023/11/14-22:13:20.000000\n    \"<html>v1\"\n"
	runCLISteps(t, addr, []cliStep{
		{args: []string{"createtable", "web", "families=contents:maxversions=3,anchor", "splits=g,n"}},
		{args: []string{"createtable", "web"}, errWant: "ALREADY_EXISTS"},
		{args: []string{"ls"}, want: "web\n"},
		{args: []string{"ls", "web"}, contain: []string{"anchor       <never>\ncontents     versions() > 3\n", "Locality Group", "default"}},
		{args: []string{"setlocalitygroup", "web", "meta", "families=language", "inmemory=true", "compression=zstd", "blocksize=4096"},
			contain: []string{"meta", "language", "true", "zstd", "4096"}},
		{args: []string{"ls", "web"}, contain: []string{"language     <never>", "meta"}},
		{args: []string{"setlocalitygroup", "web", "meta", "families=anchor"}, errWant: "FAILED_PRECONDITION"},
		// "and": the 2023 anchor below must survive Tabula's read-time GC
		// (the emulator collects lazily, so its test can use "or").
		{args: []string{"setgcpolicy", "web", "anchor", "maxage=1d", "and", "maxversions=2"}},
		{args: []string{"ls", "web"}, contain: []string{"anchor       (age() > 1d && versions() > 2)"}},
		{args: []string{"set", "web", "com.cnn.www", "contents:@1700000000000000=<html>v1", "anchor:cnnsi.com@1700000000000000=CNN"}},
		{args: []string{"set", "web", "com.cnn.www", "contents:@1700000001000000=<html>v2"}},
		{args: []string{"set", "web", "com.bbc.www", "language:=en"}},
		{args: []string{"set", "web", "org.wikipedia.en", "language:=en"}},
		{args: []string{"lookup", "web", "com.cnn.www"}, want: row},
		{args: []string{"lookup", "web", "com.cnn.www", "columns=contents", "versions=1"},
			want: rowSeparator + "\ncom.cnn.www\n  contents:                                @ 2023/11/14-22:13:21.000000\n    \"<html>v2\"\n"},
		{args: []string{"read", "web", "columns=anchor:cnn.*"}, want: rowSeparator + "\ncom.cnn.www\n" +
			"  anchor:cnnsi.com                         @ 2023/11/14-22:13:20.000000\n    \"CNN\"\n"},
		{args: []string{"read", "web", "count=1"}, contain: []string{"\ncom.bbc.www\n"}},
		{args: []string{"read", "web", "regex=.*\\.www", "columns=language"}, contain: []string{rowSeparator + "\ncom.bbc.www\n  language:                                @ "}, absent: []string{"org.wikipedia"}},
		{args: []string{"read", "web", "regex=org.*", "columns=language"}, contain: []string{"\norg.wikipedia.en\n"}},
		{args: []string{"read", "web", "regex=("}, errWant: "regex="},
		{args: []string{"count", "web"}, want: "3\n"},
		{args: []string{"count", "web", "prefix=com."}, want: "2\n"},
		{args: []string{"deleterow", "web", "com.cnn.www"}},
		{args: []string{"count", "web"}, want: "2\n"},
		{args: []string{"deletefamily", "web", "anchor"}},
		{args: []string{"deleteallrows", "web"}},
		{args: []string{"count", "web"}, want: "0\n"},
		{args: []string{"set", "web", "r", "nofamily:c=v"}, errWant: "NOT_FOUND"},
		{args: []string{"deletetable", "web"}},
		{args: []string{"ls"}, want: ""},
		{args: []string{"deletetable", "web"}, errWant: "NOT_FOUND"},
		{args: []string{"read", "web"}, errWant: "NOT_FOUND"},
	})
}

// TestLoadTabula loads the synthetic Webtable and the HTML fixture into
// tabula dev and checks counts and the in-memory group.
func TestLoadTabula(t *testing.T) {
	addr := startTabula(t)
	out, _, err := runTabula(t, "load", "webtable", "--addr", addr, "--rows", "300", "--seed", "7", "--concurrency", "3", "--batch", "16")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "in the in-memory locality group meta): 300 rows") {
		t.Errorf("summary = %q", out)
	}
	gen := webtable.Generator{Seed: 7, Sites: 1000}
	wantAnchors := 0
	for i := range 300 {
		for _, m := range gen.Page(i).Mutation.Mutations {
			if m.Family == webtable.FamilyAnchor {
				wantAnchors++
			}
		}
	}
	c := dialTest(t, addr)
	rows := readAll(t, c, "webtable")
	anchors := 0
	for _, r := range rows {
		anchors += len(r[webtable.FamilyAnchor])
	}
	if len(rows) != 300 || anchors != wantAnchors {
		t.Errorf("%d rows, %d anchors; want 300, %d", len(rows), anchors, wantAnchors)
	}
	groups, ok, err := localityGroups(context.Background(), c, "webtable")
	if err != nil || !ok {
		t.Fatalf("locality groups: %v, %v", ok, err)
	}
	var meta string
	for _, g := range groups {
		if g.GetName() == webtableMetaGroup && g.GetInMemory() {
			meta = strings.Join(g.GetFamilies(), ",")
		}
	}
	if meta != "anchor,language" {
		t.Errorf("in-memory group %s holds %q, want anchor,language; groups %v", webtableMetaGroup, meta, groups)
	}
	if n, err := countRows(context.Background(), c.data.Open("webtable"), bigtable.PrefixRange("com.cnn.www")); err != nil || n < 1 {
		t.Errorf("count com.cnn.www: %d, %v", n, err)
	}

	dir := copyFixture(t, map[string]time.Time{
		"www.example.com/index.html":      time.Unix(1767225600, 0),
		"www.example.com/news/today.html": time.Unix(1767312000, 0),
		"blog.example.org/post.html":      time.Unix(1767398400, 0),
		"www.beispiel.de/index.htm":       time.Unix(1767484800, 0),
		"docs-mirror/guide.html":          time.Unix(1767571200, 0),
	})
	out, _, err = runTabula(t, "load", "html", dir, "--addr", addr, "--table", "crawl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "5 pages, 18 cells (8 anchors)") {
		t.Errorf("summary = %q", out)
	}
	crawl := readAll(t, c, "crawl")
	if len(crawl) != 5 || len(crawl["com.example.www/news/today.html"][webtable.FamilyAnchor]) != 3 ||
		string(crawl["org.example.blog/2026/post"][webtable.FamilyLanguage][0].Value) != "fr" {
		t.Errorf("crawl rows: %v", crawl)
	}
}

// TestBenchTabula runs every workload against tabula dev, whose in-memory
// family really is in an in-memory locality group.
func TestBenchTabula(t *testing.T) {
	addr := startTabula(t)
	out, _, err := runTabula(t, "bench", "--addr", addr, "--rows", "120", "--concurrency", "3",
		"--batch", "7", "--value-size", "100", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	checkResults(t, rep.Targets[0], allWorkloads, 120)
	if note := rep.Targets[0].Results[4].Note; !strings.Contains(note, "in the in-memory locality group") {
		t.Errorf("randread-mem note = %q, want the in-memory group used", note)
	}
}

// TestCLIAggregatesTabula: createtable and createfamily make aggregate
// families, ls shows their types, and set (a SetCell) on one is refused
// with the field named.
func TestCLIAggregatesTabula(t *testing.T) {
	addr := startTabula(t)
	runCLISteps(t, addr, []cliStep{
		{args: []string{"createtable", "ctr", "families=hits:agg=sum,visitors:agg=hll:maxversions=1,plain"}},
		{args: []string{"createfamily", "ctr", "low:agg=min"}},
		{args: []string{"createfamily", "ctr", "high:agg=max:maxage=1d"}},
		{args: []string{"ls", "ctr"}, contain: []string{
			"Family Name  GC Policy       Type\n",
			"high         age() > 1d      max(int64)\n",
			"hits         <never>         sum(int64)\n",
			"low          <never>         min(int64)\n",
			"plain        <never>         \n",
			"visitors     versions() > 1  hll(int64)\n",
		}},
		{args: []string{"set", "ctr", "r", "hits:n=1"}, errWant: "set_cell.family_name"},
		{args: []string{"set", "ctr", "r", "plain:n=1"}},
		{args: []string{"createfamily", "ctr", "bad:agg=avg"}, errWant: "want sum, min, max or hll"},
	})
}

// TestTabletVerbs runs the forced tablet operations against tabula dev
// (which hosts the cluster's roles): a split is seen at once by the next
// call — tablets lists the children, compacttablet finds the right one —
// and a merge puts the table back in one tablet.
func TestTabletVerbs(t *testing.T) {
	addr := startTabula(t)
	run := func(args ...string) (string, error) {
		out, _, err := runTabula(t, append(args, "--addr", addr)...)
		return out, err
	}
	if _, err := run("createtable", "t", "families=f"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "h", "p", "x"} {
		if _, err := run("set", "t", k, "f:c=v"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := run("splittablet", "t", "a", "--at", "m")
	if err != nil {
		t.Fatalf("splittablet: %v", err)
	}
	var children []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		children = append(children, strings.Fields(l)[0])
	}
	if len(children) != 2 {
		t.Fatalf("splittablet printed %q, want two children", out)
	}
	// At once: the master's view has the children.
	list, err := run("tablets", "t")
	if err != nil {
		t.Fatalf("tablets: %v", err)
	}
	for _, c := range children {
		if !strings.Contains(list, c) {
			t.Errorf("tablets right after the split lacks child %s:\n%s", c, list)
		}
	}
	if out, err := run("compacttablet", "t", "p"); err != nil || !strings.Contains(out, "compacted "+children[1]) {
		t.Errorf("compacttablet right after the split: %q, %v; want child %s compacted", out, err, children[1])
	}
	if out, err := run("mergetablets", "t", "a"); err != nil || !strings.Contains(out, "merged "+children[0]+" and "+children[1]) {
		t.Fatalf("mergetablets: %q, %v", out, err)
	}
	// At once too: the merged tablet serves a moment after the merge
	// returns, and meanwhile the official client is told UNAVAILABLE,
	// which it retries (FAILED_PRECONDITION, which it would not, failed
	// this read).
	if out, err := run("read", "t"); err != nil || strings.Count(out, "f:c") != 4 {
		t.Errorf("rows right after split and merge: %q, %v", out, err)
	}
}
