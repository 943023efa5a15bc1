package main

import (
	"errors"
	"strings"
	"testing"
)

// cliScript is a session of verbs against one server; each step's output
// must contain (or equal) what it says.
type cliStep struct {
	args    []string
	want    string // exact stdout, unless contains is set
	contain []string
	absent  []string // must not appear in stdout
	errWant string   // non-empty: the verb must fail with this in its error
}

func runCLISteps(t *testing.T, addr string, steps []cliStep) {
	t.Helper()
	for _, s := range steps {
		args := append(append([]string{}, s.args...), "--addr", addr)
		out, _, err := runTabula(t, args...)
		name := strings.Join(s.args, " ")
		if s.errWant != "" {
			if err == nil || !strings.Contains(err.Error(), s.errWant) {
				t.Errorf("%s: err = %v, want one containing %q", name, err, s.errWant)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if s.contain == nil && out != s.want {
			t.Errorf("%s printed\n%s\nwant\n%s", name, out, s.want)
		}
		for _, a := range s.absent {
			if strings.Contains(out, a) {
				t.Errorf("%s printed\n%s\nwant no %q", name, out, a)
			}
		}
		for _, c := range s.contain {
			if !strings.Contains(out, c) {
				t.Errorf("%s printed\n%s\nwant it to contain %q", name, out, c)
			}
		}
	}
}

// TestCLIVerbs runs every cbt-style verb against the Cloud Bigtable
// emulator, checking output and errors.
func TestCLIVerbs(t *testing.T) {
	addr := startEmulator(t)
	row1 := rowSeparator + "\ncom.cnn.www\n" +
		"  anchor:cnnsi.com                         @ 2023/11/14-22:13:20.000000\n    \"CNN\"\n" +
		"  contents:                                @ 2023/11/14-22:13:21.000000\n    \"<html>v2\"\n" +
		"  contents:                                @ 2023/11/14-22:13:20.000000\n    \"<html>v1\"\n"
	runCLISteps(t, addr, []cliStep{
		{args: []string{"createtable", "web", "families=contents:maxversions=3,anchor", "splits=g,n"}},
		{args: []string{"createtable", "web"}, errWant: "ALREADY_EXISTS"},
		{args: []string{"ls"}, want: "web\n"},
		{args: []string{"ls", "web"}, want: "Family Name  GC Policy\n-----------  ---------\nanchor       <never>\ncontents     versions() > 3\n"},
		{args: []string{"createfamily", "web", "language:maxversions=1"}},
		{args: []string{"setgcpolicy", "web", "anchor", "maxage=1d", "or", "maxversions=2"}},
		{args: []string{"ls", "web"}, contain: []string{"anchor       (age() > 1d || versions() > 2)", "language     versions() > 1"}},
		{args: []string{"set", "web", "com.cnn.www", "contents:@1700000000000000=<html>v1", "anchor:cnnsi.com@1700000000000000=CNN"}},
		{args: []string{"set", "web", "com.cnn.www", "contents:@1700000001000000=<html>v2"}},
		{args: []string{"set", "web", "com.bbc.www", "language:=en", "contents:=" + strings.Repeat("x", 500)}},
		{args: []string{"set", "web", "org.wikipedia.en", "language:=en"}},
		{args: []string{"lookup", "web", "com.cnn.www"}, want: row1},
		{args: []string{"lookup", "web", "com.cnn.www", "columns=contents", "versions=1"},
			want: rowSeparator + "\ncom.cnn.www\n  contents:                                @ 2023/11/14-22:13:21.000000\n    \"<html>v2\"\n"},
		{args: []string{"lookup", "web", "com.bbc.www", "columns=contents"}, contain: []string{`... (500 bytes)`}},
		{args: []string{"lookup", "web", "com.bbc.www", "columns=contents", "--max-value", "0"}, contain: []string{strings.Repeat("x", 500) + `"`}},
		{args: []string{"lookup", "web", "com.nope"}, want: ""},
		{args: []string{"read", "web", "prefix=com."}, contain: []string{"\ncom.bbc.www\n", "\ncom.cnn.www\n"}},
		{args: []string{"read", "web", "count=1"}, contain: []string{"\ncom.bbc.www\n"}},
		{args: []string{"read", "web", "regex=.*\\.www", "columns=language"}, contain: []string{rowSeparator + "\ncom.bbc.www\n  language:                                @ "}, absent: []string{"org.wikipedia"}},
		{args: []string{"read", "web", "regex=org.*", "columns=language"}, contain: []string{"\norg.wikipedia.en\n"}},
		{args: []string{"read", "web", "regex=("}, errWant: "regex="},
		{args: []string{"read", "web", "start=com.c", "end=org"}, contain: []string{"\ncom.cnn.www\n"}},
		{args: []string{"read", "web", "columns=anchor:cnn.*"}, want: rowSeparator + "\ncom.cnn.www\n" +
			"  anchor:cnnsi.com                         @ 2023/11/14-22:13:20.000000\n    \"CNN\"\n"},
		{args: []string{"count", "web"}, want: "3\n"},
		{args: []string{"count", "web", "prefix=com."}, want: "2\n"},
		{args: []string{"count", "web", "start=com.c"}, want: "2\n"},
		{args: []string{"deleterow", "web", "com.cnn.www"}},
		{args: []string{"count", "web"}, want: "2\n"},
		{args: []string{"deletefamily", "web", "anchor"}},
		{args: []string{"ls", "web"}, want: "Family Name  GC Policy\n-----------  ---------\ncontents     versions() > 3\nlanguage     versions() > 1\n"},
		{args: []string{"deleteallrows", "web"}},
		{args: []string{"count", "web"}, want: "0\n"},
		{args: []string{"deletetable", "web"}},
		{args: []string{"ls"}, want: ""},
		// Errors: the server's code and message, or a usage hint.
		{args: []string{"deletetable", "web"}, errWant: "NOT_FOUND"},
		{args: []string{"read", "nope"}, errWant: "NOT_FOUND"},
		{args: []string{"lookup", "web"}, errWant: "usage: tabula lookup TABLE ROW"},
		{args: []string{"read", "web", "prefx=a"}, errWant: `unknown argument "prefx"`},
		{args: []string{"read", "web", "count=0"}, errWant: "positive integer"},
		{args: []string{"set", "web", "r", "nocolon=1"}, errWant: "want family:column"},
		{args: []string{"setgcpolicy", "web", "f", "maxversions=1", "or"}, errWant: "ends early"},
		{args: []string{"createtable", "t2", "families=bad name"}, errWant: "bad family name"},
		{args: []string{"ls", "--bogus"}, errWant: "unknown flag: --bogus"},
		// The emulator has no locality-group extension.
		{args: []string{"createtable", "lg", "families=a"}},
		{args: []string{"setlocalitygroup", "lg", "meta", "families=a", "inmemory=true"}, errWant: "UNIMPLEMENTED"},
		{args: []string{"setlocalitygroup", "lg", "meta", "compression=lz4"}, errWant: "want none, snappy or zstd"},
	})
}

// TestCLIConnectionError checks that an unreachable server is a clear,
// non-nil error naming the gRPC code.
func TestCLIConnectionError(t *testing.T) {
	_, _, err := runTabula(t, "ls", "--addr", "127.0.0.1:1", "--timeout", "3s")
	if err == nil || !strings.Contains(err.Error(), "UNAVAILABLE") && !strings.Contains(err.Error(), "DEADLINE_EXCEEDED") {
		t.Fatalf("ls against a closed port: err = %v, want UNAVAILABLE", err)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		t.Errorf("a connection failure was reported as a usage error: %v", err)
	}
}
