package scripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// webtableRows builds n Webtable-like rows, deterministically: anchors from
// a pool of referring sites (some with two versions), zero to two versions
// of contents, usually a language. Cells are in scan order: by family, then
// qualifier, then timestamp descending.
func webtableRows(n int, seed uint64) []cell.Row {
	rng := rand.New(rand.NewPCG(seed, 1))
	langs := []string{"en", "fr", "de", "ja", "pt"}
	rows := make([]cell.Row, n)
	for i := range rows {
		row := cell.Row{Key: fmt.Appendf(nil, "com.site%03d.www/page%05d", rng.IntN(200), i)}
		sites := map[string]bool{}
		for range rng.IntN(6) {
			sites[fmt.Sprintf("com.ref%02d.www", rng.IntN(60))] = true
		}
		keys := make([]string, 0, len(sites))
		for s := range sites {
			keys = append(keys, s)
		}
		slices.Sort(keys)
		for _, s := range keys {
			versions := 1 + rng.IntN(2)
			for v := range versions {
				row.Cells = append(row.Cells, cell.Cell{Family: "anchor", Qualifier: []byte(s), Timestamp: int64(100 - v), Value: []byte("link text")})
			}
		}
		for v := range rng.IntN(3) {
			size := 100 + rng.IntN(100000)
			row.Cells = append(row.Cells, cell.Cell{Family: "contents", Timestamp: int64(50 - v), Value: make([]byte, size)})
		}
		if rng.IntN(10) > 0 {
			row.Cells = append(row.Cells, cell.Cell{Family: "language", Timestamp: 10, Value: []byte(langs[rng.IntN(len(langs))])})
		}
		rows[i] = row
	}
	return rows
}

func webtableProgram(t testing.TB) *Program {
	src, err := os.ReadFile("testdata/webtable.szl")
	if err != nil {
		t.Fatal(err)
	}
	return mustCompile(t, string(src))
}

type webtableWant struct {
	pages, refs map[string]int64
	largest     []string // "url size", best first
	sites       int
}

// expectedWebtable computes what the example program should output,
// directly from the rows.
func expectedWebtable(rows []cell.Row) webtableWant {
	w := webtableWant{pages: map[string]int64{}, refs: map[string]int64{}}
	type page struct {
		url  string
		size int
	}
	var pages []page
	sites := map[string]bool{}
	for _, r := range rows {
		lang := "unknown"
		first := -1
		for _, c := range r.Cells {
			switch c.Family {
			case "language":
				lang = string(c.Value)
			case "anchor":
				w.refs[string(c.Qualifier)]++
				sites[string(c.Qualifier)] = true
			case "contents":
				if first < 0 {
					first = len(c.Value)
				}
			}
		}
		w.pages[lang]++
		if first >= 0 {
			pages = append(pages, page{string(r.Key), first})
		}
	}
	slices.SortFunc(pages, func(a, b page) int {
		if a.size != b.size {
			return b.size - a.size
		}
		return strings.Compare(a.url, b.url)
	})
	for _, p := range pages[:min(10, len(pages))] {
		w.largest = append(w.largest, fmt.Sprintf("%s %d", p.url, p.size))
	}
	w.sites = len(sites)
	return w
}

// webtableJSON is the JSON output shape of the example program.
type webtableJSON struct {
	Pages []struct {
		Key   []string `json:"key"`
		Value int64    `json:"value"`
	} `json:"pages"`
	Refs []struct {
		Key   []string `json:"key"`
		Value int64    `json:"value"`
	} `json:"refs"`
	Largest []struct {
		Key   []any `json:"key"`
		Value []struct {
			URL  string `json:"url"`
			Size int    `json:"size"`
		} `json:"value"`
	} `json:"largest"`
	Sites []struct {
		Key   []any `json:"key"`
		Value int   `json:"value"`
	} `json:"sites"`
}

func checkWebtable(t *testing.T, res *Result, want webtableWant) {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"pages":[{"key":[`) {
		t.Errorf("JSON does not start with the pages table: %.60s", b)
	}
	var got webtableJSON
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	pages := map[string]int64{}
	for _, e := range got.Pages {
		pages[e.Key[0]] = e.Value
	}
	refs := map[string]int64{}
	for _, e := range got.Refs {
		refs[e.Key[0]] = e.Value
	}
	if !reflect.DeepEqual(pages, want.pages) {
		t.Errorf("pages = %v, want %v", pages, want.pages)
	}
	if !reflect.DeepEqual(refs, want.refs) {
		t.Errorf("refs = %v, want %v", refs, want.refs)
	}
	if len(got.Largest) != 1 || len(got.Largest[0].Key) != 0 {
		t.Fatalf("largest = %+v, want one unindexed entry", got.Largest)
	}
	var largest []string
	for _, p := range got.Largest[0].Value {
		largest = append(largest, fmt.Sprintf("%s %d", p.URL, p.Size))
	}
	if !reflect.DeepEqual(largest, want.largest) {
		t.Errorf("largest = %v, want %v", largest, want.largest)
	}
	if len(got.Sites) != 1 || math.Abs(float64(got.Sites[0].Value-want.sites)) > 0.02*float64(want.sites)+1 {
		t.Errorf("sites = %+v, want about %d", got.Sites, want.sites)
	}
}

// TestWebtableExample runs the example program, as written, over
// generated rows and checks its tables against a direct computation.
func TestWebtableExample(t *testing.T) {
	rows := webtableRows(2000, 1)
	want := expectedWebtable(rows)
	p := webtableProgram(t)
	r := p.NewRun(Limits{})
	for _, row := range rows {
		kept, err := r.Process(row)
		if err != nil {
			t.Fatal(err)
		}
		if kept {
			t.Fatal("a summarizing script kept a row")
		}
	}
	checkWebtable(t, r.Result(), want)
	if p.IsFilter() {
		t.Error("IsFilter() = true for a script without keep")
	}
}

// TestWebtableMergedPartials splits the rows into "tablets", runs each
// separately, ships the partials as bytes, merges them and checks that the
// result is the single-run result.
func TestWebtableMergedPartials(t *testing.T) {
	rows := webtableRows(2000, 2)
	p := webtableProgram(t)
	single := p.NewRun(Limits{})
	for _, row := range rows {
		if _, err := single.Process(row); err != nil {
			t.Fatal(err)
		}
	}
	merged := p.NewPartial()
	for _, bounds := range [][2]int{{0, 150}, {150, 151}, {151, 1200}, {1200, 1200}, {1200, 2000}} {
		run := p.NewRun(Limits{})
		for _, row := range rows[bounds[0]:bounds[1]] {
			if _, err := run.Process(row); err != nil {
				t.Fatal(err)
			}
		}
		b, err := run.Partial().MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		received := p.NewPartial()
		if err := received.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if err := merged.Merge(received); err != nil {
			t.Fatal(err)
		}
	}
	checkWebtable(t, merged.Result(), expectedWebtable(rows))
	a, _ := json.Marshal(single.Result())
	b, _ := json.Marshal(merged.Result())
	if string(a) != string(b) {
		t.Errorf("merged result differs from the single run:\n%s\n%s", a, b)
	}
	// A merged partial travels on like any other (a gateway may merge
	// before forwarding).
	mb, err := merged.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	again := p.NewPartial()
	if err := again.UnmarshalBinary(mb); err != nil {
		t.Fatal(err)
	}
	if c, _ := json.Marshal(again.Result()); string(c) != string(a) {
		t.Errorf("re-encoded merged partial differs:\n%s\n%s", c, a)
	}
}

// TestPartialFromAnotherProgram checks that partials are refused by a
// program with different tables.
func TestPartialFromAnotherProgram(t *testing.T) {
	p := webtableProgram(t)
	other := mustCompile(t, "pages: table sum[lang: string] of float;")
	b, err := p.NewPartial().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.NewPartial().UnmarshalBinary(b); err == nil {
		t.Fatal("a partial of another program was accepted")
	}
	if err := other.NewPartial().Merge(p.NewPartial()); err == nil {
		t.Fatal("merging partials of different programs succeeded")
	}
}

// TestFilterMode checks that keep selects rows, and that a filter can also
// transform what it sees into a collection.
func TestFilterMode(t *testing.T) {
	p := mustCompile(t, `
		big: table collection of {url: string, size: int};
		when (i: some int; input.cells[i].family == "contents" && len(input.cells[i].value) > 50000) {
			emit keep <- true;
			emit big <- {string(input.key), len(input.cells[i].value)};
		}
		emit keep <- false;  # false never unkeeps a row
	`)
	if !p.IsFilter() {
		t.Fatal("IsFilter() = false")
	}
	rows := webtableRows(300, 3)
	r := p.NewRun(Limits{})
	var kept []string
	for _, row := range rows {
		k, err := r.Process(row)
		if err != nil {
			t.Fatal(err)
		}
		if k {
			kept = append(kept, string(row.Key))
		}
	}
	var want []string
	for _, row := range rows {
		// some: any version of the contents will do.
		for _, c := range row.Cells {
			if c.Family == "contents" && len(c.Value) > 50000 {
				want = append(want, string(row.Key))
				break
			}
		}
	}
	if len(want) == 0 || !reflect.DeepEqual(kept, want) {
		t.Fatalf("kept %d rows %v, want %d %v", len(kept), kept, len(want), want)
	}
	if st := r.Stats(); st.Rows != int64(len(rows)) || st.Kept != int64(len(want)) || st.Steps < st.Rows || st.TableBytes <= 0 {
		t.Errorf("stats %+v", st)
	}
	big := r.Result().Table("big").Entries[0].Value.([]any)
	if len(big) != len(want) || big[0].(map[string]any)["url"] != want[0] {
		t.Fatalf("transformed records: %v", big)
	}
}

// TestRowBytesNotRetained checks that tables copy what they keep: the
// caller may reuse a row's buffers after Process.
func TestRowBytesNotRetained(t *testing.T) {
	p := mustCompile(t, `
		keys: table collection of bytes;
		vals: table sum[v: string] of int;
		emit keys <- input.key;
		emit vals[string(input.cells[0].value)] <- 1;`)
	r := p.NewRun(Limits{})
	key, val := []byte("row1"), []byte("v1")
	if _, err := r.Process(cell.Row{Key: key, Cells: []cell.Cell{{Family: "f", Value: val}}}); err != nil {
		t.Fatal(err)
	}
	copy(key, "XXXX")
	copy(val, "ZZ")
	got := r.Result().String()
	if got != "keys = B\"row1\"\nvals[\"v1\"] = 1\n" {
		t.Fatalf("got %q", got)
	}
}

// TestPartialCorrupt checks that damaged partials are refused with
// ErrCorruptPartial, whatever the damage.
func TestPartialCorrupt(t *testing.T) {
	p := webtableProgram(t)
	r := p.NewRun(Limits{})
	for _, row := range webtableRows(50, 4) {
		if _, err := r.Process(row); err != nil {
			t.Fatal(err)
		}
	}
	good, err := r.Partial().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(good); i += 1 + i/50 {
		if err := p.NewPartial().UnmarshalBinary(good[:i]); !errors.Is(err, ErrCorruptPartial) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	if err := p.NewPartial().UnmarshalBinary(flipped); err == nil {
		// A flipped byte inside a count may still decode; then the
		// result must at least be usable.
		_ = p.NewPartial().Result()
	}
	if err := p.NewPartial().UnmarshalBinary(append(bytes.Clone(good), 1)); !errors.Is(err, ErrCorruptPartial) {
		t.Fatalf("trailing byte: %v", err)
	}
}
