//go:build integration

package statuspage

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// The status pages as a real browser renders them: headless Chromium loads
// each page from an httptest server and dumps its DOM, on which the same
// checks as the unit tests run. deploy/test.sh installs Chromium and sets
// TABULA_TEST_CHROMIUM.

// chromium returns the browser to run: $TABULA_TEST_CHROMIUM, else chromium
// or chromium-browser on PATH. Without one the test fails: integration
// tests are never skipped.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TABULA_TEST_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("TABULA_TEST_CHROMIUM=%q is not an executable: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium to render the status pages: set TABULA_TEST_CHROMIUM or put chromium on PATH " +
		"(bash deploy/test.sh installs Debian's chromium package)")
	return ""
}

// dumpDOM loads url in headless Chromium and returns the DOM after load,
// serialized.
func dumpDOM(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t),
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--user-data-dir="+t.TempDir(), // concurrent runs share no profile
		"--dump-dom", url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, stderr.Bytes())
	}
	if !bytes.Contains(out, []byte("</html>")) {
		t.Fatalf("chromium --dump-dom %s printed no document:\n%s\nstderr:\n%s", url, out, stderr.Bytes())
	}
	return out
}

// serve starts a server with h at /status and returns the page's URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/status", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/status"
}

func TestChromiumMasterPage(t *testing.T) {
	url := serve(t, fixedMaster(sampleMaster()))
	doc := parseDOM(t, bytes.NewReader(dumpDOM(t, url)))
	checkMasterDOM(t, doc)
	// The hostile table name stayed text: had it run, it would have set the
	// title.
	title := one(t, doc, func(n *html.Node) bool { return n.Data == "title" })
	if got := text(title); strings.Contains(got, "pwned") {
		t.Errorf("title = %q: the table name ran as script", got)
	}
}

func TestChromiumServerPage(t *testing.T) {
	url := serve(t, fixedServer(sampleServer()))
	checkServerDOM(t, parseDOM(t, bytes.NewReader(dumpDOM(t, url))))
}

// The browser shows get's error.
func TestChromiumErrorPage(t *testing.T) {
	url := serve(t, ServerHandler(func(context.Context) (ServerStatus, error) {
		return ServerStatus{}, errString("tablet server is shutting down")
	}))
	if got := string(dumpDOM(t, url)); !strings.Contains(got, "tablet server is shutting down") {
		t.Errorf("error page DOM lacks the error:\n%s", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
