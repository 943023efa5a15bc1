package scripts

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

var update = flag.Bool("update", false, "rewrite the expected outputs of the examples")

// exampleRows is a small Webtable in the generator's schema: contents
// versions a few days apart (newest first), anchors keyed by referring site
// with short texts, a language.
func exampleRows() []cell.Row {
	const day = 86400_000000
	base := int64(1767225600_000000) // 2026-01-01
	rng := rand.New(rand.NewPCG(42, 0))
	hosts := []string{"com.cnn.www", "uk.co.bbc.www", "org.wikipedia.en", "de.spiegel.www", "com.example"}
	texts := []string{"CNN", "News", "Home", "Sports", "Weather"}
	refs := []string{"cnnsi.com", "my.look.ca", "news.google.com", "reddit.com"}
	langs := []string{"en", "en", "de", "fr"}
	var rows []cell.Row
	for i := range 40 {
		row := cell.Row{Key: fmt.Appendf(nil, "%s/p%02d", hosts[i%len(hosts)], i)}
		for _, ref := range refs {
			if rng.IntN(2) == 0 {
				row.Cells = append(row.Cells, cell.Cell{Family: "anchor", Qualifier: []byte(ref), Timestamp: base, Value: []byte(texts[rng.IntN(len(texts))])})
			}
		}
		versions := 1 + rng.IntN(3)
		for v := versions - 1; v >= 0; v-- {
			size := 1000 + rng.IntN(50000)
			if v > 0 && rng.IntN(3) == 0 {
				size = 1000 + i // unchanged contents size below
			}
			body := strings.Repeat("x", size)
			if v == versions-1 && versions > 1 && rng.IntN(2) == 0 {
				body = strings.Repeat("x", 1000+i) // the newest crawl is sometimes the same page
			}
			row.Cells = append(row.Cells, cell.Cell{Family: "contents", Timestamp: base + int64(v)*3*day + int64(i)*3600_000000, Value: []byte(body)})
		}
		row.Cells = append(row.Cells, cell.Cell{Family: "language", Timestamp: base, Value: []byte(langs[i%len(langs)])})
		rows = append(rows, row)
	}
	return rows
}

// TestExamples runs every script in examples/ over exampleRows and compares
// its text output with examples/NAME.out (go test -run TestExamples -update
// rewrites them).
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/*.szl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	rows := exampleRows()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got := runText(t, string(src), rows...)
			golden := strings.TrimSuffix(f, ".szl") + ".out"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestExampleTopAnchorTexts checks one example against a direct count.
func TestExampleTopAnchorTexts(t *testing.T) {
	src, err := os.ReadFile("examples/top_anchor_texts.szl")
	if err != nil {
		t.Fatal(err)
	}
	rows := exampleRows()
	counts := map[string]int64{}
	for _, r := range rows {
		for _, c := range r.Cells {
			if c.Family == "anchor" {
				counts[string(c.Value)]++
			}
		}
	}
	p := mustCompile(t, string(src))
	r := p.NewRun(Limits{})
	for _, row := range rows {
		if _, err := r.Process(row); err != nil {
			t.Fatal(err)
		}
	}
	top := r.Result().Table("texts").Entries[0].Value.([]any)
	if len(top) != len(counts) {
		t.Fatalf("%d texts, want %d", len(top), len(counts))
	}
	for _, e := range top {
		m := e.(map[string]any)
		if m["links"] != counts[m["text"].(string)] {
			t.Errorf("%v: want %d", m, counts[m["text"].(string)])
		}
	}
}

// TestExampleFilter checks that changed_recently keeps exactly the rows it
// lists.
func TestExampleFilter(t *testing.T) {
	src, err := os.ReadFile("examples/changed_recently.szl")
	if err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, string(src))
	r := p.NewRun(Limits{})
	var kept []any
	for _, row := range exampleRows() {
		k, err := r.Process(row)
		if err != nil {
			t.Fatal(err)
		}
		if k {
			kept = append(kept, string(row.Key))
		}
	}
	listed := r.Result().Table("changed").Entries[0].Value.([]any)
	if len(kept) == 0 || fmt.Sprint(kept) != fmt.Sprint(listed) {
		t.Errorf("kept %v, listed %v", kept, listed)
	}
}
