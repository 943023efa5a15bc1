package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
)

var updateExamples = flag.Bool("update", false, "rewrite scripts/examples/webtable/*.json from the scripts' output")

// The generated Webtable the examples' golden outputs are taken on; the
// README in scripts/examples gives the same load command.
const (
	examplesRows = "2000"
	examplesSeed = "1"
	examplesDir  = "../../scripts/examples"
)

// exampleArgs are the extra `script run` arguments of an example whose
// output over the whole table would be too long to keep.
var exampleArgs = map[string][]string{
	"anchors_as_records": {"--prefix", "com.nytimes.www"},
}

// TestScriptExamplesWebtable runs every script in scripts/examples through
// `tabula script run --format json` against tabula dev loaded by `tabula
// load webtable --rows 2000 --seed 1`, and compares the output, indented
// as `jq .` prints it, with scripts/examples/webtable/NAME.json (-update
// rewrites them). Then
// it checks numbers of each output against the same quantity computed here
// from the rows read through the official client, so the golden files are
// verified, not merely recorded.
func TestScriptExamplesWebtable(t *testing.T) {
	addr := startTabula(t)
	if _, stderr, err := runScriptCLI(t, "load", "webtable", "--addr", addr, "--rows", examplesRows, "--seed", examplesSeed); err != nil {
		t.Fatalf("load: %v\n%s", err, stderr)
	}
	c := dialTest(t, addr)
	ctx := context.Background()
	tbl := c.data.Open("webtable")
	// A collection's order is the merge order of the tablets' partials;
	// with one tablet it is key order, so the golden files are stable.
	if samples, err := tbl.SampleRowKeys(ctx); err != nil || len(samples) > 1 {
		t.Fatalf("webtable has tablet boundaries %q (err %v), want one tablet", samples, err)
	}
	var rows []bigtable.Row // in key order
	if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rows = append(rows, r)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2000 {
		t.Fatalf("read %d rows, want 2000", len(rows))
	}

	files, err := filepath.Glob(filepath.Join(examplesDir, "*.szl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s: %v", examplesDir, err)
	}
	outputs := map[string][]byte{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".szl")
		t.Run(name, func(t *testing.T) {
			args := append([]string{"script", "run", f, "--table", "webtable", "--addr", addr, "--format", "json"}, exampleArgs[name]...)
			out, stderr, err := runScriptCLI(t, args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			var got bytes.Buffer
			if err := json.Indent(&got, []byte(out), "", "  "); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out[:min(len(out), 300)])
			}
			// json.Indent keeps the CLI's final newline; the file is
			// then what `jq .` prints of the output.
			golden := filepath.Join(examplesDir, "webtable", name+".json")
			if *updateExamples {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("output differs from %s (-update rewrites it):\n%s", golden, got.String()[:min(got.Len(), 2000)])
			}
			outputs[name] = want
		})
	}
	checks := map[string]func(*testing.T, []bigtable.Row, []byte){
		"top_anchor_texts":   checkTopAnchorTexts,
		"changed_recently":   checkChangedRecently,
		"size_by_domain":     checkSizeByDomain,
		"anchors_as_records": checkAnchorsAsRecords,
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".szl")
		t.Run("verify "+name, func(t *testing.T) {
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no check of %s's golden output against the table: add one", name)
			}
			out, ok := outputs[name]
			if !ok {
				t.Fatal("no output to verify")
			}
			check(t, rows, out)
		})
	}
}

// exampleTables decodes a golden output into its tables.
func exampleTables(t *testing.T, out []byte) map[string][]jsonEntry {
	t.Helper()
	var tabs map[string][]jsonEntry
	if err := json.Unmarshal(out, &tabs); err != nil {
		t.Fatal(err)
	}
	return tabs
}

// unindexed decodes the value of an unindexed table into v.
func unindexed(t *testing.T, tabs map[string][]jsonEntry, name string, v any) {
	t.Helper()
	es := tabs[name]
	if len(es) != 1 || len(es[0].Key) != 0 {
		t.Fatalf("table %s = %v, want one unindexed entry", name, es)
	}
	if err := json.Unmarshal(es[0].Value, v); err != nil {
		t.Fatalf("table %s: %v", name, err)
	}
}

// topOf returns the n heaviest keys of counts, ties in key order, as a
// top table lists them.
func topOf(counts map[string]int64, n int) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	return keys[:min(n, len(keys))]
}

func checkTopAnchorTexts(t *testing.T, rows []bigtable.Row, out []byte) {
	texts, sites := map[string]int64{}, map[string]int64{}
	for _, r := range rows {
		for _, it := range r[webtable.FamilyAnchor] {
			texts[string(it.Value)]++
			sites[strings.TrimPrefix(it.Column, webtable.FamilyAnchor+":")]++
		}
	}
	tabs := exampleTables(t, out)
	var top []struct {
		Text  string `json:"text"`
		Links int64  `json:"links"`
	}
	unindexed(t, tabs, "texts", &top)
	want := topOf(texts, 100)
	if len(top) != len(want) {
		t.Fatalf("texts has %d entries, want %d", len(top), len(want))
	}
	for i, e := range top {
		if e.Text != want[i] || e.Links != texts[want[i]] {
			t.Errorf("texts[%d] = %q × %d, want %q × %d", i, e.Text, e.Links, want[i], texts[want[i]])
		}
	}
	var linkers []struct {
		Site   string `json:"site"`
		Weight int64  `json:"weight"`
	}
	unindexed(t, tabs, "linkers", &linkers)
	if lead := topOf(sites, 1)[0]; len(linkers) == 0 || linkers[0].Site != lead || linkers[0].Weight != sites[lead] {
		t.Errorf("linkers start with %+v, want %s × %d", linkers[:min(1, len(linkers))], lead, sites[lead])
	}
	var distinct int64
	unindexed(t, tabs, "distinct_texts", &distinct)
	// HyperLogLog: an estimate, within 2% of the exact count.
	if n := int64(len(texts)); math.Abs(float64(distinct-n)) > 0.02*float64(n) {
		t.Errorf("distinct_texts = %d, want about %d", distinct, n)
	}
}

func checkChangedRecently(t *testing.T, rows []bigtable.Row, out []byte) {
	// The script's window: the 3 days before noon on 7 January 2026.
	until := time.Date(2026, 1, 7, 12, 0, 0, 0, time.UTC)
	since := until.Add(-3 * 24 * time.Hour)
	var want []string
	perDay := map[string]int64{}
	for _, r := range rows {
		cs := r[webtable.FamilyContents] // newest first
		for i := 0; i+1 < len(cs); i++ {
			ts := cs[i].Timestamp.Time()
			if !ts.Before(since) && ts.Before(until) && !bytes.Equal(cs[i].Value, cs[i+1].Value) {
				want = append(want, r.Key())
				perDay[ts.UTC().Truncate(24*time.Hour).Format(time.RFC3339)]++
				break
			}
		}
	}
	if len(want) == 0 || len(want) == len(rows) {
		t.Fatalf("%d of %d pages changed in the window: the example's window says nothing", len(want), len(rows))
	}
	tabs := exampleTables(t, out)
	var changed []string
	unindexed(t, tabs, "changed", &changed)
	if !slices.Equal(changed, want) {
		t.Errorf("changed lists %d pages, want %d (first %q)", len(changed), len(want), want[:min(3, len(want))])
	}
	got := map[string]int64{}
	for _, e := range tabs["per_day"] {
		var n int64
		if len(e.Key) != 1 || json.Unmarshal(e.Value, &n) != nil {
			t.Fatalf("per_day entry %v", e)
		}
		got[e.Key[0].(string)] = n
	}
	if !mapsEqual(got, perDay) || len(perDay) < 2 {
		t.Errorf("per_day = %v, want %v (at least two days)", got, perDay)
	}
}

func checkSizeByDomain(t *testing.T, rows []bigtable.Row, out []byte) {
	// cnn.com: every host under com.cnn, sizes of the newest crawl.
	var n, sum, maxSize int64
	var maxURL string
	for _, r := range rows {
		host, _, _ := strings.Cut(r.Key(), "/")
		if host != "com.cnn" && !strings.HasPrefix(host, "com.cnn.") {
			continue
		}
		size := int64(len(r[webtable.FamilyContents][0].Value))
		n++
		sum += size
		if size > maxSize {
			maxSize, maxURL = size, r.Key()
		}
	}
	if n < 100 {
		t.Fatalf("cnn.com has %d pages: the generator changed", n)
	}
	tabs := exampleTables(t, out)
	entry := func(table string) json.RawMessage {
		for _, e := range tabs[table] {
			if len(e.Key) == 1 && e.Key[0] == "cnn.com" {
				return e.Value
			}
		}
		t.Fatalf("%s has no cnn.com entry", table)
		return nil
	}
	var mean float64
	if err := json.Unmarshal(entry("mean_size"), &mean); err != nil || mean != float64(sum)/float64(n) {
		t.Errorf("mean_size[cnn.com] = %v (%v), want %v", mean, err, float64(sum)/float64(n))
	}
	var largest []struct {
		URL  string `json:"url"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal(entry("largest"), &largest); err != nil || len(largest) != 1 || largest[0].URL != maxURL || largest[0].Size != maxSize {
		t.Errorf("largest[cnn.com] = %+v (%v), want %s weight %d", largest, err, maxURL, maxSize)
	}
	var quantiles []int64
	if err := json.Unmarshal(entry("sizes"), &quantiles); err != nil || len(quantiles) != 5 || quantiles[4] != maxSize {
		t.Errorf("sizes[cnn.com] = %v (%v), want 5 quantiles ending at the maximum %d", quantiles, err, maxSize)
	}
	// The small sites (www.siteNNNNN.example.org) share example.org.
	domains := map[string]bool{}
	for _, e := range tabs["mean_size"] {
		domains[e.Key[0].(string)] = true
	}
	for _, d := range []string{"cnn.com", "bbc.co.uk", "wikipedia.org", "example.org"} {
		if !domains[d] {
			t.Errorf("no domain %s among %v", d, domains)
		}
	}
}

func checkAnchorsAsRecords(t *testing.T, rows []bigtable.Row, out []byte) {
	type link struct {
		Page string `json:"page"`
		From string `json:"from"`
		Text string `json:"text"`
	}
	var want []link
	prefix := exampleArgs["anchors_as_records"][1]
	for _, r := range rows {
		if !strings.HasPrefix(r.Key(), prefix) {
			continue
		}
		if ls := r[webtable.FamilyLanguage]; len(ls) == 0 || string(ls[0].Value) != "en" {
			continue
		}
		for _, it := range r[webtable.FamilyAnchor] {
			want = append(want, link{r.Key(), strings.TrimPrefix(it.Column, webtable.FamilyAnchor+":"), strings.ToLower(string(it.Value))})
		}
	}
	var got []link
	unindexed(t, exampleTables(t, out), "links", &got)
	if len(want) < 10 || !slices.Equal(got, want) {
		t.Errorf("links has %d records, want %d (at least 10)", len(got), len(want))
	}
}
