// Package webtable generates the Webtable of the Bigtable paper's Figure 1:
// one row per crawled page, keyed by its reversed URL (com.cnn.www), with
// the page's HTML in family "contents" (up to three crawl versions), one
// column per referring site in family "anchor" (qualifier: the site, value:
// the link text) and the page's language code in family "language".
//
// The crawl is synthetic and deterministic — row i is the same for a given
// seed whatever the order rows are generated in — and skewed like the web:
// a few large sites hold many pages and attract most anchors, many small
// sites hold a page or two.
package webtable

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/tabuladb/tabula/storage/cell"
)

// The Webtable's families.
const (
	FamilyContents = "contents"
	FamilyAnchor   = "anchor"
	FamilyLanguage = "language"
)

// BaseCrawlTime is the timestamp of the first crawl, in microseconds
// (2026-01-01T00:00:00Z); later crawls follow a few days apart.
const BaseCrawlTime int64 = 1767225600_000000

// bigSites are the heads of the distribution; the paper's own example
// leads.
var bigSites = []string{
	"www.cnn.com", "www.bbc.co.uk", "en.wikipedia.org", "www.nytimes.com",
	"www.spiegel.de", "www.lemonde.fr", "www.asahi.com", "www.elpais.com",
}

var languages = []struct {
	code   string
	weight int
}{{"en", 55}, {"de", 10}, {"fr", 8}, {"ja", 8}, {"es", 7}, {"pt", 5}, {"ko", 4}, {"it", 3}}

var words = strings.Fields(`the of and to in is for on that with as by at from bigtable tablet
server column family row key timestamp version anchor contents language page site news
sports weather world business science health travel market storage table data`)

// Generator produces the pages of one synthetic crawl.
type Generator struct {
	Seed  uint64
	Sites int // distinct sites; default 1000
}

// Page is one generated row and the mutation that writes it.
type Page struct {
	URL      string // e.g. www.cnn.com/sports/3
	Key      []byte // reversed host + path, e.g. com.cnn.www/sports/3
	Language string
	Mutation cell.RowMutation
}

func (g Generator) sites() int {
	if g.Sites <= 0 {
		return 1000
	}
	return g.Sites
}

// siteName returns site number s (0 is the largest).
func siteName(s int) string {
	if s < len(bigSites) {
		return bigSites[s]
	}
	return fmt.Sprintf("www.site%05d.example.org", s)
}

// zipf draws a site number with probability proportional to 1/(s+1)^1.1,
// which gives the head a large share of pages and anchors.
func zipf(r *rand.Rand, n int) int {
	z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
	return int(z.Uint64())
}

// ReverseHost turns www.cnn.com into com.cnn.www, as the paper's row keys do.
func ReverseHost(host string) string {
	parts := strings.Split(host, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".")
}

// RowKey is the Webtable row key of a URL "host/path" ("host" alone for a
// home page).
func RowKey(url string) []byte {
	host, path, _ := strings.Cut(url, "/")
	key := ReverseHost(host)
	if path != "" {
		key += "/" + path
	}
	return []byte(key)
}

// Page returns page i of the crawl. Page 0 is CNN's home page, as in
// Figure 1, with anchors from cnnsi.com and my.look.ca among others.
func (g Generator) Page(i int) Page {
	r := rand.New(rand.NewPCG(g.Seed, uint64(i)))
	var url string
	if i == 0 {
		url = "www.cnn.com"
	} else {
		site := siteName(zipf(r, g.sites()))
		section := words[r.IntN(len(words))]
		url = fmt.Sprintf("%s/%s/%d", site, section, i)
	}
	lang := pickLanguage(r)
	versions := 1 + r.IntN(3)
	if i == 0 {
		lang, versions = "en", 3 // Figure 1's row: three crawls of CNN's home page
	}
	p := Page{URL: url, Key: RowKey(url), Language: lang}
	rm := cell.RowMutation{Row: p.Key}
	for v := 0; v < versions; v++ {
		ts := BaseCrawlTime + int64(v)*3*86400_000000 + int64(r.IntN(86400))*1_000000
		rm.Mutations = append(rm.Mutations, cell.Set(FamilyContents, nil, ts, html(r, url, v)))
	}
	anchors := int(math.Min(40, r.ExpFloat64()*3))
	if i == 0 {
		anchors += 2
	}
	seen := map[string]bool{}
	for a := 0; a < anchors; a++ {
		from := siteName(zipf(r, g.sites()))
		if i == 0 && a == 0 {
			from = "cnnsi.com"
		} else if i == 0 && a == 1 {
			from = "my.look.ca"
		}
		if seen[from] || from == strings.SplitN(url, "/", 2)[0] {
			continue
		}
		seen[from] = true
		text := strings.ToUpper(words[r.IntN(len(words))][:1]) + words[r.IntN(len(words))][1:]
		if i == 0 {
			text = "CNN"
			if from == "my.look.ca" {
				text = "CNN.com"
			}
		}
		rm.Mutations = append(rm.Mutations, cell.Set(FamilyAnchor, []byte(from), BaseCrawlTime, []byte(text)))
	}
	rm.Mutations = append(rm.Mutations, cell.Set(FamilyLanguage, nil, BaseCrawlTime, []byte(lang)))
	p.Mutation = rm
	return p
}

func pickLanguage(r *rand.Rand) string {
	n := r.IntN(100)
	for _, l := range languages {
		if n < l.weight {
			return l.code
		}
		n -= l.weight
	}
	return "en"
}

// html returns a page body of 0.5–6 KB; later crawl versions differ.
func html(r *rand.Rand, url string, version int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "<html><head><title>%s (crawl %d)</title></head><body>", url, version+1)
	n := 80 + r.IntN(900)
	for w := 0; w < n; w++ {
		if w%40 == 0 {
			b.WriteString("<p>")
		}
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	b.WriteString("</body></html>")
	return []byte(b.String())
}
