package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Off a terminal, progress is plain lines: no carriage returns or bar
// frames, one line at the end with the count and the rate, and lines
// while work goes on at most once per interval.
func TestPlainProgress(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, 1000, "load webtable", "rows")
	if _, ok := p.(*plainProgress); !ok {
		t.Fatalf("newProgress on a buffer is a %T, want *plainProgress", p)
	}
	for range 10 {
		_ = p.Add(100)
	}
	p.Describe("load webtable 1.50 MB/s")
	if out.Len() != 0 {
		t.Fatalf("a line before the interval passed: %q", out.String())
	}
	_ = p.Finish()
	_ = p.Finish()
	_ = p.Add(5)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1 || strings.Contains(out.String(), "\r") {
		t.Fatalf("after Finish (twice) and a late Add: %q, want one plain line", out.String())
	}
	if !strings.HasPrefix(lines[0], "load webtable 1.50 MB/s: 1000/1000 rows after ") || !strings.HasSuffix(lines[0], " rows/s)") {
		t.Errorf("final line %q", lines[0])
	}

	// Concurrent adders over several intervals: lines appear, never two
	// within one interval, and the last says everything was counted.
	out.Reset()
	pp := newPlainProgress(&out, -1, "scan", "req")
	pp.every = 20 * time.Millisecond
	pp.nextLine.Store(pp.start.Add(pp.every).UnixNano())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = pp.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	_ = pp.Finish()
	lines = strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("%q: want lines while work went on, then the last", out.String())
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "scan: 200 req after ") {
		t.Errorf("last line %q, want the count without a total", last)
	}
	// Each adder sleeps ≥ 100 ms in all, so the run spans at most a few
	// seconds on a loaded machine; one line per 20 ms interval is the cap.
	if len(lines) > 1+int(time.Since(pp.start)/pp.every)+1 {
		t.Errorf("%d lines in %s: more than one per interval", len(lines), time.Since(pp.start))
	}
}
