package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the README's first command twice on one directory: it
// serves, loads, reads Figure 1's row back and runs a script, and the
// second run finds the table it left.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	for run := 1; run <= 2; run++ {
		var out, progress bytes.Buffer
		if err := runDemo(context.Background(), demoFlags{dir: dir, addr: "127.0.0.1:0", rows: 400}, &out, &progress); err != nil {
			t.Fatalf("run %d: %v\n%s\n%s", run, err, out.String(), progress.String())
		}
		o := out.String()
		for _, want := range []string{"anchor:cnnsi.com", "anchor:my.look.ca", `"CNN.com"`, "(crawl 3)", `language:`, `"en"`} {
			if !strings.Contains(o, want) {
				t.Fatalf("run %d: output lacks %q:\n%s", run, want, o)
			}
		}
		if want := "new table"; (run == 1) != strings.Contains(o, want) {
			t.Fatalf("run %d: %q in the output is %v:\n%s", run, want, strings.Contains(o, want), o)
		}
		// The script's pages per language add up to the rows loaded.
		total := 0
		for _, m := range regexp.MustCompile(`pages\["[a-z]+"\] = (\d+)`).FindAllStringSubmatch(o, -1) {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
		if total != 400 {
			t.Fatalf("run %d: the script counted %d pages, want 400:\n%s", run, total, o)
		}
	}
}

// TestDemoServesAWorker: the demo's server, kept up with --serve, hosts a
// MapReduce worker as tabula dev does, so that `tabula mr run` against it
// runs its tasks there (the README's MapReduce section).
func TestDemoServesAWorker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	// The demo's output, read as it is written: it says when it serves.
	pr, pw := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		err := runDemo(ctx, demoFlags{dir: t.TempDir(), addr: addr, rows: 100, serve: true}, pw, io.Discard)
		pw.CloseWithError(fmt.Errorf("demo ended: %v", err))
		ended <- err
	}()
	defer func() {
		cancel()
		go io.Copy(io.Discard, pr)
		if err := <-ended; err != nil {
			t.Errorf("demo: %v", err)
		}
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.Contains(sc.Text(), "until interrupted") {
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the demo never said it serves: %v", err)
	}
	if !hostsWorker(ctx, addr, nil) {
		t.Fatalf("the demo's server at %s hosts no MapReduce worker", addr)
	}
}
