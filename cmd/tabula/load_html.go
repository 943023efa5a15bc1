package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
)

// htmlLoad is the configuration of `tabula load html`.
type htmlLoad struct {
	conn         connFlags
	dir          string
	table        string
	siteFromPath bool
	concurrency  int
	batch        int
}

func newLoadHTMLCommand() *cobra.Command {
	var l htmlLoad
	cmd := &cobra.Command{
		Use:   "html DIR",
		Short: "Crawl a directory of HTML files into the Webtable shape",
		Long: `load html walks DIR for .html and .htm files and writes one Webtable row per
page. A page's URL comes from its <link rel=canonical> or <base href>, else
from its path under DIR, whose first component is the host
(DIR/www.example.com/news/a.html is www.example.com/news/a.html; index.html
stands for its directory). The row key is the reversed host plus the path
(com.example.www/news/a.html). contents holds the HTML at the file's
modification time; language the <html lang> (or a guess from common words,
else "unknown"); every <a href> to another page of the crawl becomes an
anchor cell in the linked page's row, qualifier the referring host, value
the link text.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l.dir = args[0]
			// Interrupted, the load stops between batches and says how
			// far it got.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := l.conn.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = loadHTML(ctx, c, l, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return err
		},
	}
	l.conn.register(cmd.Flags())
	cmd.Flags().StringVar(&l.table, "table", "webtable", "table to create or fill")
	cmd.Flags().BoolVar(&l.siteFromPath, "site-from-path", false, "derive URLs from file paths only, ignoring <link rel=canonical> and <base href>")
	cmd.Flags().IntVar(&l.concurrency, "concurrency", 4, "concurrent bulk writers")
	cmd.Flags().IntVar(&l.batch, "batch", 50, "rows per ApplyBulk request (requests are also cut at 4 MB)")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &usageError{cmd: cmd, err: err} })
	return cmd
}

// htmlPage is one parsed file.
type htmlPage struct {
	file  string
	url   string // normalized host/path
	host  string
	mtime bigtable.Timestamp
	lang  string
	links []htmlLink
}

// htmlLink is one <a href> of a page, resolved and normalized.
type htmlLink struct {
	url  string
	text string
}

// anchorCell is the anchor a referring host leaves in a page's row.
type anchorCell struct {
	text string
	ts   bigtable.Timestamp
	from string // referring page URL, to break ties deterministically
}

// normalizeURL turns an absolute URL into the crawl's "host/path" form:
// lower-case host, no scheme, port, query or fragment, no trailing slash,
// and index.html/index.htm standing for their directory — so a link to
// http://www.example.com/ and the file www.example.com/index.html meet.
func normalizeURL(u *url.URL) (string, bool) {
	if u.Host == "" || (u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	p := path.Clean("/" + u.Path)
	switch path.Base(p) {
	case "index.html", "index.htm":
		p = path.Dir(p)
	}
	p = strings.Trim(p, "/")
	host := strings.ToLower(u.Hostname())
	if p == "" {
		return host, true
	}
	return host + "/" + p, true
}

// parseHTMLPage parses one file. fileURL is the URL its path implies;
// canonical and base links override it unless siteFromPath.
func parseHTMLPage(data []byte, fileURL *url.URL, siteFromPath bool) (htmlPage, error) {
	doc, err := html.Parse(bytes.NewReader(data))
	if err != nil {
		return htmlPage{}, err
	}
	pageURL, base := fileURL, fileURL
	var lang string
	type rawLink struct{ href, text string }
	var links []rawLink
	var text strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.DataAtom {
			case atom.Html:
				lang = attr(n, "lang")
			case atom.Link:
				if !siteFromPath && hasToken(attr(n, "rel"), "canonical") {
					if u, err := fileURL.Parse(attr(n, "href")); err == nil && u.Host != "" {
						pageURL, base = u, u
					}
				}
			case atom.Base:
				if !siteFromPath {
					if u, err := fileURL.Parse(attr(n, "href")); err == nil && u.Host != "" {
						base = u
						// The file's own name under the base is its URL,
						// unless a canonical link says otherwise.
						if pageURL == fileURL {
							pageURL = u.ResolveReference(&url.URL{Path: path.Base(fileURL.Path)})
						}
					}
				}
			case atom.Meta:
				if lang == "" && strings.EqualFold(attr(n, "http-equiv"), "content-language") {
					lang = attr(n, "content")
				}
			case atom.A:
				if href := attr(n, "href"); href != "" {
					links = append(links, rawLink{href, strings.Join(strings.Fields(nodeText(n)), " ")})
				}
			case atom.Script, atom.Style:
				return
			}
		}
		if n.Type == html.TextNode {
			text.WriteString(n.Data)
			text.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	norm, ok := normalizeURL(pageURL)
	if !ok {
		return htmlPage{}, fmt.Errorf("page URL %s is not http(s)", pageURL)
	}
	p := htmlPage{url: norm, host: strings.ToLower(pageURL.Hostname()), lang: languageCode(lang, text.String())}
	for _, l := range links {
		u, err := base.Parse(l.href)
		if err != nil {
			continue
		}
		if n, ok := normalizeURL(u); ok {
			p.links = append(p.links, htmlLink{url: n, text: l.text})
		}
	}
	return p, nil
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if strings.EqualFold(a.Key, key) {
			return strings.TrimSpace(a.Val)
		}
	}
	return ""
}

func hasToken(list, tok string) bool {
	for _, t := range strings.Fields(list) {
		if strings.EqualFold(t, tok) {
			return true
		}
	}
	return false
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && n.DataAtom == atom.Img && attr(n, "alt") != "" {
			b.WriteString(" " + attr(n, "alt") + " ")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// stopwords are a few of the most frequent words of the languages the
// heuristic knows; a page needs several hits to be classified.
var stopwords = map[string][]string{
	"en": {"the", "and", "of", "to", "is", "in", "that", "with"},
	"de": {"der", "die", "und", "das", "ist", "nicht", "mit", "ein"},
	"fr": {"le", "la", "les", "et", "est", "des", "une", "dans"},
	"es": {"el", "los", "las", "y", "es", "del", "una", "por"},
	"it": {"il", "che", "di", "della", "è", "non", "gli", "una"},
	"pt": {"o", "os", "não", "uma", "do", "da", "em", "que"},
	"nl": {"de", "het", "een", "en", "van", "niet", "is", "op"},
}

// languageCode returns the primary subtag of a declared language
// ("de-AT" → "de"), else a guess from stopwords, else "unknown".
func languageCode(declared, text string) string {
	if declared != "" {
		code, _, _ := strings.Cut(declared, "-")
		code, _, _ = strings.Cut(code, "_")
		code = strings.ToLower(strings.TrimSpace(code))
		if code != "" {
			return code
		}
	}
	counts := map[string]int{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) }) {
		for lang, sw := range stopwords {
			if slices.Contains(sw, w) {
				counts[lang]++
			}
		}
	}
	best, bestN, second := "unknown", 0, 0
	langs := make([]string, 0, len(counts))
	for l := range counts {
		langs = append(langs, l)
	}
	slices.Sort(langs) // deterministic ties
	for _, l := range langs {
		switch n := counts[l]; {
		case n > bestN:
			best, bestN, second = l, n, bestN
		case n > second:
			second = n
		}
	}
	// Several hits and a clear lead; short or mixed pages stay unknown.
	if bestN >= 3 && bestN >= 2*second {
		return best
	}
	return "unknown"
}

// fileURLOf is the URL a file's path implies: DIR/host/a/b.html is
// http://host/a/b.html.
func fileURLOf(dir, file string) (*url.URL, error) {
	rel, err := filepath.Rel(dir, file)
	if err != nil {
		return nil, err
	}
	parts := strings.SplitN(filepath.ToSlash(rel), "/", 2)
	if len(parts) < 2 {
		return nil, fmt.Errorf("%s is not under a host directory of %s (want DIR/HOST/path.html)", file, dir)
	}
	return &url.URL{Scheme: "http", Host: parts[0], Path: "/" + parts[1]}, nil
}

// crawlHTML parses every page under dir and computes the anchors each
// page receives. Several links from one referring host to one page make
// one cell (a column per referring site, as in the paper): the newest
// referring page wins, ties to the smaller URL, so the result does not
// depend on walk order.
func crawlHTML(dir string, siteFromPath bool, progress io.Writer) ([]htmlPage, map[string]map[string]anchorCell, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ext := strings.ToLower(filepath.Ext(p))
		if !d.IsDir() && (ext == ".html" || ext == ".htm") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no .html or .htm files under %s", dir)
	}
	bar := newProgress(progress, int64(len(files)), "parse", "files")
	var pages []htmlPage
	byURL := map[string]int{}
	for _, f := range files {
		fu, err := fileURLOf(dir, f)
		if err != nil {
			return nil, nil, err
		}
		st, err := os.Stat(f)
		if err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		p, err := parseHTMLPage(data, fu, siteFromPath)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		p.file = f
		// Millisecond timestamps: Cloud Bigtable's default granularity.
		p.mtime = bigtable.Time(st.ModTime().Truncate(time.Millisecond))
		if prev, dup := byURL[p.url]; dup {
			return nil, nil, fmt.Errorf("%s and %s are both the page %s", pages[prev].file, f, p.url)
		}
		byURL[p.url] = len(pages)
		pages = append(pages, p)
		_ = bar.Add(1)
	}
	_ = bar.Finish()
	anchors := map[string]map[string]anchorCell{}
	for _, p := range pages {
		for _, l := range p.links {
			if _, inCrawl := byURL[l.url]; !inCrawl || l.url == p.url {
				continue
			}
			m := anchors[l.url]
			if m == nil {
				m = map[string]anchorCell{}
				anchors[l.url] = m
			}
			cur, ok := m[p.host]
			if !ok || p.mtime > cur.ts || (p.mtime == cur.ts && p.url < cur.from) {
				m[p.host] = anchorCell{text: l.text, ts: p.mtime, from: p.url}
			}
		}
	}
	return pages, anchors, nil
}

// loadHTML crawls l.dir and writes its pages.
func loadHTML(ctx context.Context, c *conn, l htmlLoad, out, progress io.Writer) (loadSummary, error) {
	if l.concurrency < 1 || l.batch < 1 {
		return loadSummary{}, fmt.Errorf("--concurrency and --batch must be ≥ 1")
	}
	pages, anchors, err := crawlHTML(l.dir, l.siteFromPath, progress)
	if err != nil {
		return loadSummary{}, err
	}
	created, grouped, err := ensureWebtable(ctx, c, l.table)
	if err != nil {
		return loadSummary{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := bulkWriter{tbl: c.data.Open(l.table)}
	bar := newProgress(progress, int64(len(pages)), "load "+l.table, "rows")
	start := time.Now()
	type batch struct {
		keys []string
		muts []*bigtable.Mutation
	}
	batches := make(chan batch)
	first := newErrFirst()
	var s loadSummary
	var wg sync.WaitGroup
	for range l.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				if err := w.apply(ctx, b.keys, b.muts); err != nil {
					first.set(fmt.Errorf("load %s: %w", l.table, err))
					cancel()
					continue
				}
				_ = bar.Add(len(b.keys))
			}
		}()
	}
	var cur batch
	var curBytes int
	send := func() bool {
		if len(cur.keys) == 0 {
			return true
		}
		select {
		case batches <- cur:
		case <-ctx.Done():
			return false
		}
		cur, curBytes = batch{}, 0
		return true
	}
	for _, p := range pages {
		data, err := os.ReadFile(p.file)
		if err != nil {
			first.set(err)
			cancel()
			break
		}
		mut := bigtable.NewMutation()
		mut.Set(webtable.FamilyContents, "", p.mtime, data)
		mut.Set(webtable.FamilyLanguage, "", p.mtime, []byte(p.lang))
		s.Cells += 2
		s.Bytes += int64(len(data) + len(p.lang))
		hosts := make([]string, 0, len(anchors[p.url]))
		for h := range anchors[p.url] {
			hosts = append(hosts, h)
		}
		slices.Sort(hosts)
		for _, h := range hosts {
			a := anchors[p.url][h]
			mut.Set(webtable.FamilyAnchor, h, a.ts, []byte(a.text))
			s.Cells++
			s.Anchors++
			s.Bytes += int64(len(h) + len(a.text))
		}
		s.Rows++
		cur.keys = append(cur.keys, string(webtable.RowKey(p.url)))
		cur.muts = append(cur.muts, mut)
		// Cut requests at 4 MB so they fit servers that keep gRPC's
		// default message limit.
		if curBytes += len(data); len(cur.keys) >= l.batch || curBytes >= 4<<20 {
			if !send() {
				break
			}
		}
	}
	send()
	close(batches)
	wg.Wait()
	_ = bar.Finish()
	s.Elapsed = time.Since(start)
	if err := first.get(); err != nil {
		return s, err
	}
	if err := ctx.Err(); err != nil {
		return s, fmt.Errorf("load %s: %w", l.table, err)
	}
	fmt.Fprintf(out, "loaded %s into %s (%s): %d pages, %d cells (%d anchors), %.1f MB in %s: %s\n",
		l.dir, l.table, schemaNote(created, grouped), s.Rows, s.Cells, s.Anchors, float64(s.Bytes)/1e6, s.Elapsed.Round(time.Millisecond), rate(s.Rows, s.Bytes, s.Elapsed))
	return s, nil
}
