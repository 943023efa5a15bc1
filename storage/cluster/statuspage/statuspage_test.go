package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFormatKey(t *testing.T) {
	for _, tc := range []struct {
		key  []byte
		want string
	}{
		{nil, ""},
		{[]byte("user#0042"), "user#0042"},
		{[]byte("a b~"), "a b~"},
		{[]byte("\x00"), `\x00`},
		{[]byte("\x00\xffbin"), `\x00\xffbin`},
		{[]byte(`a\b`), `a\\b`}, // so `a\x00` the key and `a\x00` the escape differ
		{[]byte(`a\x00`), `a\\x00`},
		{[]byte("é"), `\xc3\xa9`},
		{[]byte("tab\there\n"), `tab\x09here\x0a`},
		{[]byte("<b>&"), "<b>&"}, // HTML escaping is the template's job
	} {
		if got := FormatKey(tc.key); got != tc.want {
			t.Errorf("FormatKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestHitRate(t *testing.T) {
	for _, tc := range []struct {
		hits, misses uint64
		want         string
	}{
		{0, 0, "–"},
		{0, 5, "0.0%"},
		{5, 0, "100.0%"},
		{950, 50, "95.0%"},
		{1, 2, "33.3%"},
		{2, 1, "66.7%"},
		{1<<63 + 1, 1 << 63, "50.0%"}, // the sum overflows uint64
	} {
		if got := HitRate(tc.hits, tc.misses); got != tc.want {
			t.Errorf("HitRate(%d, %d) = %q, want %q", tc.hits, tc.misses, got, tc.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{20 << 20, "20.0 MiB"},
		{3 << 40, "3.0 TiB"},
		{-2048, "-2.0 KiB"},
	} {
		if got := FormatBytes(tc.n); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestAgo(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "never"},
		{sampleNow.Add(time.Minute), "now"},
		{sampleNow, "now"},
		{sampleNow.Add(-12 * time.Second), "12s ago"},
		{sampleNow.Add(-5 * time.Minute), "5m ago"},
		{sampleNow.Add(-3 * time.Hour), "3h ago"},
		{sampleNow.Add(-72 * time.Hour), "3d ago"},
	} {
		if got := Ago(sampleNow, tc.t); got != tc.want {
			t.Errorf("Ago(now, now%+v) = %q, want %q", tc.t.Sub(sampleNow), got, tc.want)
		}
	}
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func fixedMaster(st MasterStatus) http.Handler {
	return MasterHandler(func(context.Context) (MasterStatus, error) { return st, nil })
}

func fixedServer(st ServerStatus) http.Handler {
	return ServerHandler(func(context.Context) (ServerStatus, error) { return st, nil })
}

func TestMasterPage(t *testing.T) {
	rec := get(t, fixedMaster(sampleMaster()), "/status")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if strings.Contains(rec.Body.String(), "<script") {
		t.Errorf("page contains an unescaped <script")
	}
	checkMasterDOM(t, parseDOM(t, rec.Body))
}

func TestServerPage(t *testing.T) {
	rec := get(t, fixedServer(sampleServer()), "/status")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	checkServerDOM(t, parseDOM(t, rec.Body))
}

// An empty status (a standby master, a server with nothing loaded) renders.
func TestEmptyPages(t *testing.T) {
	rec := get(t, fixedMaster(MasterStatus{Addr: "127.0.0.1:1"}), "/")
	if rec.Code != http.StatusOK {
		t.Fatalf("master: status %d: %s", rec.Code, rec.Body)
	}
	doc := parseDOM(t, rec.Body)
	for _, id := range []string{"no-servers", "no-events", "unassigned"} {
		byID(t, doc, id)
	}
	if got := text(byID(t, doc, "role")); got != "standby" {
		t.Errorf("role = %q, want standby", got)
	}

	rec = get(t, fixedServer(ServerStatus{ID: "ts-9"}), "/")
	if rec.Code != http.StatusOK {
		t.Fatalf("server: status %d: %s", rec.Code, rec.Body)
	}
	doc = parseDOM(t, rec.Body)
	byID(t, doc, "no-tablets")
	for _, cell := range find(doc, hasClass("hit-rate")) {
		if got := text(cell); got != "–" {
			t.Errorf("hit rate without lookups = %q, want –", got)
		}
	}
	if got := text(byID(t, doc, "lease")); got != "lost" {
		t.Errorf("lease = %q, want lost", got)
	}
}

func TestMasterJSON(t *testing.T) {
	want := sampleMaster()
	rec := get(t, fixedMaster(want), "/status?format=json")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var got MasterStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding %s: %v", rec.Body, err)
	}
	// The JSON has the events newest first, as the page.
	if kinds := []string{got.Events[0].Kind, got.Events[1].Kind, got.Events[2].Kind}; !reflect.DeepEqual(kinds, sampleEventKinds) {
		t.Errorf("JSON events in order %q, want %q", kinds, sampleEventKinds)
	}
	want.Events = []Event{want.Events[1], want.Events[2], want.Events[0]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", got, want)
	}
	// The handler sorted a copy, not the caller's slice.
	if sampleMaster().Events[0].Kind != "assign" {
		t.Fatal("sample changed")
	}
}

func TestServerJSON(t *testing.T) {
	want := sampleServer()
	rec := get(t, fixedServer(want), "/status?format=json")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got ServerStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding %s: %v", rec.Body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON round trip:\n got %+v\nwant %+v", got, want)
	}
	var raw map[string]any
	json.Unmarshal(rec.Body.Bytes(), &raw)
	for _, k := range []string{"tablets", "block_cache_hits", "scan_cache_misses", "memtable_bytes", "lease_valid"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, rec.Body)
		}
	}
}

// Absent lists are [] in JSON, not null, so clients can iterate them.
func TestJSONEmptyLists(t *testing.T) {
	rec := get(t, fixedMaster(MasterStatus{}), "/?format=json")
	for _, k := range []string{`"servers": []`, `"unassigned": []`, `"events": []`} {
		if !strings.Contains(rec.Body.String(), k) {
			t.Errorf("master JSON lacks %s: %s", k, rec.Body)
		}
	}
	rec = get(t, fixedServer(ServerStatus{}), "/?format=json")
	if !strings.Contains(rec.Body.String(), `"tablets": []`) {
		t.Errorf("server JSON lacks empty tablets: %s", rec.Body)
	}
}

func TestGetError(t *testing.T) {
	errDown := errors.New("not the active master: lock held by 127.0.0.1:7001")
	handlers := map[string]http.Handler{
		"master": MasterHandler(func(context.Context) (MasterStatus, error) { return MasterStatus{}, errDown }),
		"server": ServerHandler(func(context.Context) (ServerStatus, error) { return ServerStatus{}, errDown }),
	}
	for name, h := range handlers {
		rec := get(t, h, "/")
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), errDown.Error()) {
			t.Errorf("%s: got %d %q, want 503 with the error", name, rec.Code, rec.Body)
		}
		rec = get(t, h, "/?format=json")
		var body struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable || body.Error != errDown.Error() {
			t.Errorf("%s JSON: got %d %q, want 503 with {\"error\": ...}", name, rec.Code, rec.Body)
		}
	}
}

// get runs with the request's context.
func TestGetContext(t *testing.T) {
	type key struct{}
	var saw any
	h := ServerHandler(func(ctx context.Context) (ServerStatus, error) {
		saw = ctx.Value(key{})
		return ServerStatus{}, nil
	})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req = req.WithContext(context.WithValue(req.Context(), key{}, "here"))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if saw != "here" {
		t.Errorf("get saw context value %v, want the request's", saw)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	rec := httptest.NewRecorder()
	fixedServer(sampleServer()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", rec.Code)
	}
}
