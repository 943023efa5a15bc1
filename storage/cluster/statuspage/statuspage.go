// Package statuspage renders the human-readable status pages the master and
// each tablet server serve on their --http port.
//
// The package knows nothing about the roles: a role fills a MasterStatus or
// ServerStatus (plain data, copied out of its own state) and hands
// MasterHandler or ServerHandler a function that produces one per request.
// The pages are self-contained HTML (inline CSS, no scripts, no external
// resources); ?format=json returns the same data as JSON. Elements carry
// stable ids, classes and data attributes (data-server, data-tablet,
// data-event, data-cache, class="hit-rate", …) so tests and scripts can
// read a page without depending on its layout.
package statuspage

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"slices"
	"time"
)

// Tablet states as shown on the pages. Roles may pass other strings; these
// are the ones the stylesheet colours.
const (
	StateServing    = "serving"
	StateLoading    = "loading"
	StateUnloading  = "unloading"
	StateSplitting  = "splitting"
	StateUnassigned = "unassigned"
)

// Tablet is one tablet as the master sees it. An empty Start is the
// beginning of the table and an empty End its end.
type Tablet struct {
	Table  string `json:"table"`
	ID     string `json:"id"`
	Start  []byte `json:"start"` // inclusive
	End    []byte `json:"end"`   // exclusive
	Bytes  int64  `json:"bytes"`
	Server string `json:"server,omitempty"` // ID of the assigned server, "" if none
	State  string `json:"state"`
}

// Server is one live tablet server as the master sees it.
type Server struct {
	ID      string   `json:"id"`
	Addr    string   `json:"addr"`
	Tablets []Tablet `json:"tablets"`
	Bytes   int64    `json:"bytes"` // total size of its tablets
}

// Event is one entry in the master's recent history: an assignment, a
// split, a server joining or dying.
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Tablet string    `json:"tablet,omitempty"`
	Server string    `json:"server,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// MasterStatus is what the master's status page shows. Events are shown
// newest first whatever their order here.
type MasterStatus struct {
	Cluster     string    `json:"cluster"`
	Addr        string    `json:"addr"`
	Active      bool      `json:"active"`                // holds the master lock
	MasterSince time.Time `json:"master_since,omitzero"` // when it became active
	Servers     []Server  `json:"servers"`
	Unassigned  []Tablet  `json:"unassigned"`
	Events      []Event   `json:"events"`
}

// TabletStatus is one tablet as the tablet server serving it sees it.
type TabletStatus struct {
	Table         string `json:"table"`
	ID            string `json:"id"`
	Start         []byte `json:"start"`
	End           []byte `json:"end"`
	Bytes         int64  `json:"bytes"` // SSTables plus memtable
	MemtableBytes int64  `json:"memtable_bytes"`
	SSTables      int    `json:"sstables"`
	Compacting    bool   `json:"compacting"`
	State         string `json:"state"`
}

// ServerStatus is what a tablet server's status page shows.
type ServerStatus struct {
	Cluster          string         `json:"cluster"`
	ID               string         `json:"id"`
	Addr             string         `json:"addr"`
	Since            time.Time      `json:"since,omitzero"`
	LeaseValid       bool           `json:"lease_valid"` // holds its lock in the lock service
	Tablets          []TabletStatus `json:"tablets"`
	MemtableBytes    int64          `json:"memtable_bytes"`
	Compactions      int            `json:"compactions"` // running now
	BlockCacheHits   uint64         `json:"block_cache_hits"`
	BlockCacheMisses uint64         `json:"block_cache_misses"`
	ScanCacheHits    uint64         `json:"scan_cache_hits"`
	ScanCacheMisses  uint64         `json:"scan_cache_misses"`
}

//go:embed templates/*.html
var templateFiles embed.FS

var (
	masterTemplate = parse("templates/master.html")
	serverTemplate = parse("templates/server.html")
)

// parse builds one page from the shared layout and the page's own blocks.
func parse(page string) *template.Template {
	return template.Must(template.New("layout.html").Funcs(funcs).
		ParseFS(templateFiles, "templates/layout.html", page))
}

// masterPage and serverPage are the template data: the status plus what the
// page derives from it.
type masterPage struct {
	MasterStatus
	Now time.Time
}

type serverPage struct {
	ServerStatus
	Now time.Time
}

// MasterHandler serves the master's status page. get is called once per
// request with the request's context; its error is answered with 503 and
// the error's text.
func MasterHandler(get func(ctx context.Context) (MasterStatus, error)) http.Handler {
	return handler(func(ctx context.Context) (any, *template.Template, any, error) {
		st, err := get(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		st.Servers = nonNil(st.Servers)
		st.Unassigned = nonNil(st.Unassigned)
		st.Events = nonNil(slices.Clone(st.Events))
		slices.SortStableFunc(st.Events, func(a, b Event) int { return b.Time.Compare(a.Time) })
		return st, masterTemplate, masterPage{MasterStatus: st, Now: time.Now()}, nil
	})
}

// ServerHandler serves a tablet server's status page, as MasterHandler.
func ServerHandler(get func(ctx context.Context) (ServerStatus, error)) http.Handler {
	return handler(func(ctx context.Context) (any, *template.Template, any, error) {
		st, err := get(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		st.Tablets = nonNil(st.Tablets)
		return st, serverTemplate, serverPage{ServerStatus: st, Now: time.Now()}, nil
	})
}

// handler serves either representation of what load returns: the status
// as JSON, or the page rendered from tmpl and data.
func handler(load func(ctx context.Context) (status any, tmpl *template.Template, data any, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		asJSON := r.URL.Query().Get("format") == "json"
		w.Header().Set("Cache-Control", "no-store")
		status, tmpl, data, err := load(r.Context())
		if err != nil {
			if asJSON {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
				return
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if asJSON {
			writeJSON(w, http.StatusOK, status)
			return
		}
		// Render fully before writing so a template failure is a clean 500
		// rather than half a page.
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			http.Error(w, "rendering status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		// The page is self-contained: no scripts, nothing fetched.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		w.Write(buf.Bytes())
	})
}

// nonNil makes an absent list encode as [] rather than null in JSON.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, "encoding status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
