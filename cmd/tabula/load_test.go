package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
)

// dialTest connects to addr as the verbs do.
func dialTest(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := connFlags{addr: addr, project: "tabula", instance: "dev"}.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll returns every row of a table by key.
func readAll(t *testing.T, c *conn, table string) map[string]bigtable.Row {
	t.Helper()
	rows := map[string]bigtable.Row{}
	err := c.data.Open(table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows[r.Key()] = r
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestLoadWebtable loads the synthetic crawl into the emulator and checks
// the schema and that every generated cell arrived: rows, anchors,
// contents versions and languages equal the generator's.
func TestLoadWebtable(t *testing.T) {
	addr := startEmulator(t)
	const rows, seed = 300, 7
	out, _, err := runTabula(t, "load", "webtable", "--addr", addr, "--rows", "300", "--seed", "7",
		"--concurrency", "3", "--batch", "16", "--table", "wt")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "loaded wt (new table; the server has no locality-group extension, so all families share the default group): 300 rows") {
		t.Errorf("summary = %q", out)
	}
	gen := webtable.Generator{Seed: seed, Sites: 1000}
	var wantAnchors, wantContents int
	wantLang := map[string]string{}
	for i := range rows {
		p := gen.Page(i)
		wantLang[string(p.Key)] = p.Language
		for _, m := range p.Mutation.Mutations {
			switch m.Family {
			case webtable.FamilyAnchor:
				wantAnchors++
			case webtable.FamilyContents:
				wantContents++
			}
		}
	}
	c := dialTest(t, addr)
	info, err := c.admin.TableInfo(context.Background(), "wt")
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{}
	for _, f := range info.FamilyInfos {
		policies[f.Name] = f.GCPolicy
	}
	if len(policies) != 3 || policies["contents"] != "versions() > 3" || policies["anchor"] != "" || policies["language"] != "" {
		t.Errorf("families = %v, want contents (3 versions), anchor, language", policies)
	}
	got := readAll(t, c, "wt")
	if len(got) != rows {
		t.Fatalf("%d rows, want %d", len(got), rows)
	}
	var anchors, contents int
	for key, r := range got {
		anchors += len(r[webtable.FamilyAnchor])
		contents += len(r[webtable.FamilyContents])
		if l := r[webtable.FamilyLanguage]; len(l) != 1 || string(l[0].Value) != wantLang[key] {
			t.Errorf("row %s language = %v, want %q", key, l, wantLang[key])
		}
	}
	if anchors != wantAnchors || contents != wantContents {
		t.Errorf("anchors %d, contents versions %d; want %d, %d", anchors, contents, wantAnchors, wantContents)
	}
	cnn := got["com.cnn.www"]
	if len(cnn[webtable.FamilyContents]) != 3 {
		t.Errorf("com.cnn.www has %d crawls, want Figure 1's 3", len(cnn[webtable.FamilyContents]))
	}
	// Loading again into the existing table writes the same cells.
	if _, _, err := runTabula(t, "load", "webtable", "--addr", addr, "--rows", "300", "--seed", "7", "--table", "wt"); err != nil {
		t.Fatalf("second load: %v", err)
	}
	if n, err := countRows(context.Background(), c.data.Open("wt"), bigtable.InfiniteRange("")); err != nil || n != rows {
		t.Errorf("after reload: %d rows, %v; want %d", n, err, rows)
	}
}

// copyFixture copies the HTML fixture to a temporary directory and gives
// each file a known modification time (a checkout's are arbitrary).
func copyFixture(t *testing.T, mtimes map[string]time.Time) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("testdata", "html")
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
		mt, ok := mtimes[filepath.ToSlash(rel)]
		if !ok {
			t.Fatalf("fixture file %s has no mtime in the test", rel)
		}
		return os.Chtimes(dst, mt, mt)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadHTML loads the committed fixture crawl and checks every row
// key, anchor (qualifier, text, timestamp), language and contents cell.
func TestLoadHTML(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	files := map[string]time.Time{
		"www.example.com/index.html":      day(1),
		"www.example.com/news/today.html": day(2),
		"blog.example.org/post.html":      day(3),
		"www.beispiel.de/index.htm":       day(4),
		"docs-mirror/guide.html":          day(5),
	}
	dir := copyFixture(t, files)
	addr := startEmulator(t)
	out, _, err := runTabula(t, "load", "html", dir, "--addr", addr, "--table", "crawl", "--batch", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "5 pages, 18 cells (8 anchors)") {
		t.Errorf("summary = %q", out)
	}
	type anchor struct {
		text string
		day  int
	}
	want := map[string]struct {
		file    string
		lang    string
		anchors map[string]anchor
	}{
		"com.example.www": {"www.example.com/index.html", "en", map[string]anchor{
			"www.example.com":  {"Example home", 2},
			"blog.example.org": {"Example Site", 3},
		}},
		"com.example.www/news/today.html": {"www.example.com/news/today.html", "en", map[string]anchor{
			"www.example.com":  {"Today's news", 1},
			"blog.example.org": {"news", 3},
			"www.beispiel.de":  {"Nachrichten", 4},
		}},
		// URL from <link rel=canonical>; language guessed from the text.
		"org.example.blog/2026/post": {"blog.example.org/post.html", "fr", map[string]anchor{
			"www.example.com": {"Our blog", 1},
		}},
		// Two pages of www.example.com link here: the newer one's text.
		"de.beispiel.www": {"www.beispiel.de/index.htm", "de", map[string]anchor{
			"www.example.com":  {"Beispiel", 2},
			"docs.example.com": {"Beispiel DE", 5},
		}},
		// URL from <base href>; too little text to guess a language.
		"com.example.docs/guide/guide.html": {"docs-mirror/guide.html", "unknown", nil},
	}
	c := dialTest(t, addr)
	got := readAll(t, c, "crawl")
	if len(got) != len(want) {
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		t.Fatalf("rows %q, want %d rows", keys, len(want))
	}
	for key, w := range want {
		r, ok := got[key]
		if !ok {
			t.Errorf("no row %s", key)
			continue
		}
		ts := bigtable.Time(files[w.file])
		html, _ := os.ReadFile(filepath.Join(dir, w.file))
		if cs := r[webtable.FamilyContents]; len(cs) != 1 || string(cs[0].Value) != string(html) || cs[0].Timestamp != ts {
			t.Errorf("row %s contents = %v, want the file at its mtime", key, cs)
		}
		if l := r[webtable.FamilyLanguage]; len(l) != 1 || string(l[0].Value) != w.lang {
			t.Errorf("row %s language = %v, want %q", key, l, w.lang)
		}
		as := r[webtable.FamilyAnchor]
		if len(as) != len(w.anchors) {
			t.Errorf("row %s anchors = %v, want %v", key, as, w.anchors)
			continue
		}
		for _, a := range as {
			host := strings.TrimPrefix(a.Column, webtable.FamilyAnchor+":")
			wa, ok := w.anchors[host]
			if !ok || string(a.Value) != wa.text || a.Timestamp != bigtable.Time(day(wa.day)) {
				t.Errorf("row %s anchor %s = %q @ %v, want %q @ day %d", key, host, a.Value, a.Timestamp.Time(), wa.text, wa.day)
			}
		}
	}
	// --site-from-path ignores canonical and base links.
	if _, _, err := runTabula(t, "load", "html", dir, "--addr", addr, "--table", "bypath", "--site-from-path"); err != nil {
		t.Fatal(err)
	}
	bypath := readAll(t, c, "bypath")
	for _, k := range []string{"org.example.blog/post.html", "docs-mirror/guide.html"} {
		if _, ok := bypath[k]; !ok {
			t.Errorf("--site-from-path: no row %s", k)
		}
	}
	if _, _, err := runTabula(t, "load", "html", t.TempDir(), "--addr", addr); err == nil || !strings.Contains(err.Error(), "no .html") {
		t.Errorf("load of an empty directory: err = %v", err)
	}
}

func TestLoadUsage(t *testing.T) {
	for _, args := range [][]string{{"load"}, {"load", "webpages"}, {"load", "html"}, {"load", "webtable", "extra"}, {"load", "webtable", "--rowz", "1"}} {
		_, _, err := runTabula(t, args...)
		if err == nil || !strings.Contains(err.Error(), "usage: tabula load") {
			t.Errorf("%q: err = %v, want a usage error", args, err)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	cases := map[string]string{
		"http://WWW.Example.com":              "www.example.com",
		"https://www.example.com/":            "www.example.com",
		"http://www.example.com/index.html":   "www.example.com",
		"http://www.example.com/a/index.htm":  "www.example.com/a",
		"http://www.example.com:8080/a/b/":    "www.example.com/a/b",
		"http://www.example.com/a/../b?q=1#f": "www.example.com/b",
	}
	for in, want := range cases {
		u, _ := url.Parse(in)
		if got, ok := normalizeURL(u); !ok || got != want {
			t.Errorf("normalizeURL(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"mailto:a@b.c", "ftp://x.org/a", "/relative"} {
		u, _ := url.Parse(in)
		if got, ok := normalizeURL(u); ok {
			t.Errorf("normalizeURL(%s) = %q, want not a crawl URL", in, got)
		}
	}
}

func TestLanguageCode(t *testing.T) {
	cases := []struct{ declared, text, want string }{
		{"de-AT", "", "de"},
		{"EN_gb", "", "en"},
		{"", "the cat and the dog of the house", "en"},
		{"", "der Hund und die Katze, das ist nicht mein Haus", "de"},
		{"", "hello world", "unknown"},
		{"", "", "unknown"},
	}
	for _, c := range cases {
		if got := languageCode(c.declared, c.text); got != c.want {
			t.Errorf("languageCode(%q, %q) = %q, want %q", c.declared, c.text, got, c.want)
		}
	}
}
