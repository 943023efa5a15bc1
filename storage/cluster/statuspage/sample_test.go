package statuspage

import (
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// The sample statuses the page tests render, in unit tests from the
// handler's response and in integration tests from Chromium's DOM, and the
// checks both run on the resulting document.

var sampleNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// hostileTable is a table name that would run script if it were not
// escaped.
const hostileTable = `<script>document.title="pwned"</script>`

func sampleMaster() MasterStatus {
	return MasterStatus{
		Cluster:     "local",
		Addr:        "127.0.0.1:7000",
		Active:      true,
		MasterSince: sampleNow.Add(-90 * time.Minute),
		Servers: []Server{
			{ID: "ts-1", Addr: "127.0.0.1:7101", Bytes: 3 << 20, Tablets: []Tablet{
				{Table: "users", ID: "t-a1", End: []byte("m"), Bytes: 1 << 20, Server: "ts-1", State: StateServing},
				{Table: "users", ID: "t-a2", Start: []byte("m"), Bytes: 2 << 20, Server: "ts-1", State: StateSplitting},
			}},
			{ID: "ts-2", Addr: "127.0.0.1:7102", Bytes: 512, Tablets: []Tablet{
				{Table: hostileTable, ID: "t-b1", Bytes: 512, Server: "ts-2", State: StateLoading},
			}},
		},
		Unassigned: []Tablet{
			{Table: "blobs", ID: "t-u1", Start: []byte("\x00\xffbin"), End: []byte(`a\b`), Bytes: 0, State: StateUnassigned},
		},
		// Out of order on purpose: the page shows newest first.
		Events: []Event{
			{Time: sampleNow.Add(-3 * time.Minute), Kind: "assign", Tablet: "t-a1", Server: "ts-1"},
			{Time: sampleNow.Add(-1 * time.Minute), Kind: "split", Tablet: "t-a2", Server: "ts-1", Detail: "at m"},
			{Time: sampleNow.Add(-2 * time.Minute), Kind: "server-dead", Server: "ts-3", Detail: "lock lost"},
		},
	}
}

// sampleEventKinds is the kinds of sampleMaster's events, newest first.
var sampleEventKinds = []string{"split", "server-dead", "assign"}

func sampleServer() ServerStatus {
	return ServerStatus{
		Cluster:    "local",
		ID:         "ts-1",
		Addr:       "127.0.0.1:7101",
		Since:      sampleNow.Add(-time.Hour),
		LeaseValid: true,
		Tablets: []TabletStatus{
			{Table: "users", ID: "t-a1", End: []byte("m"), Bytes: 1 << 20, MemtableBytes: 4096, SSTables: 3, State: StateServing},
			{Table: "users", ID: "t-a2", Start: []byte("m\x01"), Bytes: 2 << 20, MemtableBytes: 0, SSTables: 7, Compacting: true, State: StateServing},
		},
		MemtableBytes:    4096,
		Compactions:      1,
		BlockCacheHits:   950,
		BlockCacheMisses: 50,
	}
}

// checkMasterDOM checks a rendered sampleMaster page.
func checkMasterDOM(t *testing.T, doc *html.Node) {
	t.Helper()
	checkNoScript(t, doc)

	servers := find(byID(t, doc, "servers"), hasAttr("data-server", ""))
	if got := attrs(servers, "data-server"); strings.Join(got, ",") != "ts-1,ts-2" {
		t.Errorf("server rows = %q, want ts-1,ts-2", got)
	}
	for i, want := range []struct{ addr, count, size string }{{"127.0.0.1:7101", "2", "3.0 MiB"}, {"127.0.0.1:7102", "1", "512 B"}} {
		if i >= len(servers) {
			break
		}
		row := servers[i]
		if got := text(one(t, row, hasClass("addr"))); got != want.addr {
			t.Errorf("server %d address = %q, want %q", i, got, want.addr)
		}
		if got := text(one(t, row, hasClass("tablet-count"))); got != want.count {
			t.Errorf("server %d tablet count = %q, want %q", i, got, want.count)
		}
		if got := text(one(t, row, hasClass("size"))); got != want.size {
			t.Errorf("server %d size = %q, want %q", i, got, want.size)
		}
	}

	// One row per tablet, under its server's section.
	for _, want := range []struct{ server, tablet, rng, state string }{
		{"ts-1", "t-a1", "(table start) – m", StateServing},
		{"ts-1", "t-a2", "m – (table end)", StateSplitting},
		{"ts-2", "t-b1", "(table start) – (table end)", StateLoading},
	} {
		sec := one(t, doc, hasAttr("id", "server-"+want.server))
		row := one(t, sec, hasAttr("data-tablet", want.tablet))
		if got := text(one(t, row, hasClass("range"))); got != want.rng {
			t.Errorf("tablet %s range = %q, want %q", want.tablet, got, want.rng)
		}
		if got := text(one(t, row, hasClass("state"))); got != want.state {
			t.Errorf("tablet %s state = %q, want %q", want.tablet, got, want.state)
		}
	}
	if rows := find(doc, hasAttr("data-tablet", "")); len(rows) != 4 {
		t.Errorf("%d tablet rows, want 4 (3 assigned, 1 unassigned)", len(rows))
	}
	b1 := one(t, doc, hasAttr("data-tablet", "t-b1"))
	if got := text(one(t, b1, hasClass("table"))); got != hostileTable {
		t.Errorf("table name shown as %q, want the literal %q", got, hostileTable)
	}

	// The non-printable start key of the unassigned tablet, hex-escaped.
	u1 := one(t, byID(t, doc, "unassigned"), hasAttr("data-tablet", "t-u1"))
	start := one(t, u1, hasAttr("data-key", "start"))
	if got, want := text(start), `\x00\xffbin`; got != want {
		t.Errorf("unassigned start key = %q, want %q", got, want)
	}
	if !hasClass("escaped")(start) {
		t.Errorf("escaped start key lacks class escaped")
	}
	if got, want := text(one(t, u1, hasAttr("data-key", "end"))), `a\\b`; got != want {
		t.Errorf("unassigned end key = %q, want %q", got, want)
	}

	events := find(byID(t, doc, "events"), hasAttr("data-event", ""))
	if got := attrs(events, "data-kind"); strings.Join(got, ",") != strings.Join(sampleEventKinds, ",") {
		t.Errorf("events in order %q, want newest first %q", got, sampleEventKinds)
	}
	if len(events) > 0 {
		if got := text(one(t, events[0], hasClass("detail"))); got != "at m" {
			t.Errorf("newest event detail = %q, want %q", got, "at m")
		}
	}
	if got := text(byID(t, doc, "role")); got != "active" {
		t.Errorf("role = %q, want active", got)
	}
}

// checkServerDOM checks a rendered sampleServer page.
func checkServerDOM(t *testing.T, doc *html.Node) {
	t.Helper()
	checkNoScript(t, doc)

	for cache, want := range map[string]string{"block": "95.0%", "scan": "–"} {
		cell := one(t, doc, func(n *html.Node) bool { return hasClass("hit-rate")(n) && hasAttr("data-cache", cache)(n) })
		if got := text(cell); got != want {
			t.Errorf("%s cache hit rate = %q, want %q", cache, got, want)
		}
	}
	rows := find(byID(t, doc, "tablets"), hasAttr("data-tablet", ""))
	if got := attrs(rows, "data-tablet"); strings.Join(got, ",") != "t-a1,t-a2" {
		t.Errorf("tablet rows = %q, want t-a1,t-a2", got)
	}
	for _, want := range []struct{ tablet, rng, size, mem, sst, state string }{
		{"t-a1", "(table start) – m", "1.0 MiB", "4.0 KiB", "3", "serving"},
		{"t-a2", `m\x01 – (table end)`, "2.0 MiB", "0 B", "7", "serving (compacting)"},
	} {
		row := one(t, doc, hasAttr("data-tablet", want.tablet))
		for class, w := range map[string]string{"range": want.rng, "size": want.size, "memtable": want.mem, "sstables": want.sst, "state": want.state} {
			if got := text(one(t, row, hasClass(class))); got != w {
				t.Errorf("tablet %s %s = %q, want %q", want.tablet, class, got, w)
			}
		}
	}
	if got := text(byID(t, doc, "memtable-bytes")); got != "4.0 KiB" {
		t.Errorf("memtable total = %q, want 4.0 KiB", got)
	}
	if got, _ := attr(byID(t, doc, "memtable-bytes"), "data-bytes"); got != "4096" {
		t.Errorf("memtable total data-bytes = %q, want 4096", got)
	}
	if got := text(byID(t, doc, "compactions")); got != "1" {
		t.Errorf("compactions = %q, want 1", got)
	}
	if got := text(byID(t, doc, "lease")); got != "valid" {
		t.Errorf("lease = %q, want valid", got)
	}
}

// checkNoScript checks that nothing in the page is a script: the pages use
// none, and an unescaped name would show up as one.
func checkNoScript(t *testing.T, doc *html.Node) {
	t.Helper()
	if s := find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "script" }); len(s) > 0 {
		t.Errorf("page has %d <script> elements, want none", len(s))
	}
}

// A small DOM query kit over golang.org/x/net/html.

func parseDOM(t *testing.T, r io.Reader) *html.Node {
	t.Helper()
	doc, err := html.Parse(r)
	if err != nil {
		t.Fatalf("parsing HTML: %v", err)
	}
	return doc
}

// find returns the elements under n (n included) that match, in document
// order.
func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	if n == nil {
		return nil
	}
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && match(d) {
			out = append(out, d)
		}
	}
	if n.Type == html.ElementNode && match(n) {
		out = append([]*html.Node{n}, out...)
	}
	return out
}

// one returns the single element under n that matches, failing the test
// unless there is exactly one.
func one(t *testing.T, n *html.Node, match func(*html.Node) bool) *html.Node {
	t.Helper()
	got := find(n, match)
	if len(got) != 1 {
		t.Fatalf("%d matching elements, want 1", len(got))
	}
	return got[0]
}

func byID(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	got := find(doc, hasAttr("id", id))
	if len(got) != 1 {
		t.Fatalf("%d elements with id %q, want 1", len(got), id)
	}
	return got[0]
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// hasAttr matches elements with attribute key equal to val, or with any
// value if val is "".
func hasAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		v, ok := attr(n, key)
		return ok && (val == "" || v == val)
	}
}

func hasClass(class string) func(*html.Node) bool {
	return func(n *html.Node) bool {
		v, _ := attr(n, "class")
		for c := range strings.FieldsSeq(v) {
			if c == class {
				return true
			}
		}
		return false
	}
}

func attrs(ns []*html.Node, key string) []string {
	var out []string
	for _, n := range ns {
		v, _ := attr(n, key)
		out = append(out, v)
	}
	return out
}

// text is the text content of n with runs of white space collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
