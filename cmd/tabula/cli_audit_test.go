package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCreateFamilyBadName checks that createfamily says what is wrong with
// a name it refuses (it said `bad family "a,b": <nil>`), and that it takes
// one family: a comma is no list here.
func TestCreateFamilyBadName(t *testing.T) {
	addr := closedAddr(t) // refused before any request is sent
	for _, c := range []struct{ arg, want string }{
		{"a,b", `bad family name "a,b": a family name is letters, digits, '_', '-' and '.'`},
		{"a,b", "createfamily creates one family"},
		{"a,", `bad family name "a,"`},
		{"bad name", `bad family name "bad name"`},
		{".f", "does not start with '-' or '.'"},
		{"", `bad family name ""`},
		{"f:maxversions=0", `family "f": maxversions="0"`},
	} {
		_, _, err := runTabula(t, "createfamily", "users", c.arg, "--addr", addr)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "<nil>") {
			t.Errorf("createfamily users %q: err = %v, want one containing %q", c.arg, err, c.want)
		}
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("createfamily users %q: %v is not a usage error", c.arg, err)
		}
	}
	f, err := parseFamily("n:agg=sum:maxversions=2")
	if err != nil || f.Name != "n" || typeName(f.Type) != "sum(int64)" || f.Policy.String() != "versions() > 2" {
		t.Errorf("parseFamily: %+v, %v", f, err)
	}
}

// TestParseDurationStrict checks that a duration is a sum of unsigned
// parts: "1d-23h" was accepted as 1h.
func TestParseDurationStrict(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1d": 24 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute,
		"1h30m": 90 * time.Minute, ".5h": 30 * time.Minute, "2d0s": 48 * time.Hour, "1ms": time.Millisecond,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1d-23h", "2d-1s", "1d+1h", "-1d", "+1d", "d", "d1h", "1.5d", "1d1d", "-1h", "+1h",
		"0s", "0d", "1x", "", "999999999999d", "106751d24h"} {
		if got, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "bad duration") {
			t.Errorf("parseDuration(%q): %v, want a bad duration error", in, err)
		}
	}
	_, err := parseGCPolicy("maxage=1d-23h")
	if err == nil || !strings.Contains(err.Error(), `maxage="1d-23h"`) || !strings.Contains(err.Error(), `"-23h" is not a number and a unit`) {
		t.Errorf(`parseGCPolicy("maxage=1d-23h"): %v, want an error naming -23h`, err)
	}
	_, _, err = runTabula(t, "setgcpolicy", "T", "fam", "maxage=1d-23h", "--addr", closedAddr(t))
	if err == nil || !strings.Contains(err.Error(), "bad duration") {
		t.Errorf("setgcpolicy T fam maxage=1d-23h: %v, want a bad duration error", err)
	}
}

// TestCreateTableDuplicateSplits checks that a split key listed twice is
// refused, naming it.
func TestCreateTableDuplicateSplits(t *testing.T) {
	if got, err := parseSplits("m,c,,x"); err != nil || !slices.Equal(got, []string{"m", "c", "x"}) {
		t.Errorf(`parseSplits("m,c,,x") = %q, %v`, got, err)
	}
	for _, in := range []string{"m,m", "a,m,b, m"} {
		if _, err := parseSplits(in); err == nil || !strings.Contains(err.Error(), `key "m" listed twice`) {
			t.Errorf("parseSplits(%q): %v, want an error naming m", in, err)
		}
	}
	_, _, err := runTabula(t, "createtable", "t", "splits=m,m", "--addr", closedAddr(t))
	var ue *usageError
	if err == nil || !strings.Contains(err.Error(), `splits=: key "m" listed twice`) || !errors.As(err, &ue) {
		t.Errorf("createtable t splits=m,m: %v, want a usage error naming m", err)
	}
}

// TestBenchFlagsRejected checks that bench refuses nonsensical flags
// before it connects anywhere (--rounds 0 ran one round).
func TestBenchFlagsRejected(t *testing.T) {
	addr := closedAddr(t)
	for _, c := range []struct{ args, want []string }{
		{[]string{"--rounds", "0"}, []string{"--rounds 0: want 1 to 100"}},
		{[]string{"--rounds", "-2"}, []string{"--rounds -2"}},
		{[]string{"--rounds", "101"}, []string{"--rounds 101"}},
		{[]string{"--rows", "0"}, []string{"--rows 0: want a number ≥ 1"}},
		{[]string{"--rows", "-5"}, []string{"--rows -5"}},
		{[]string{"--concurrency", "0"}, []string{"--concurrency 0: want a number ≥ 1"}},
		{[]string{"--batch", "0"}, []string{"--batch 0"}},
		{[]string{"--value-size", "-1"}, []string{"--value-size -1"}},
		{[]string{"--presplit", "-1"}, []string{"--presplit -1"}},
		{[]string{"--workloads", "nope"}, []string{`unknown workload "nope"`}},
	} {
		args := append(append([]string{"bench", "--addr", addr}, c.args...), "--json")
		err := runTabulaWithin(t, 10*time.Second, args...)
		var ue *usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("bench %s: err = %v, want a usage error", strings.Join(c.args, " "), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("bench %s: err = %v, want it to contain %q", strings.Join(c.args, " "), err, w)
			}
		}
	}
}

// TestScriptErrorCounts checks the number of the nouns counting a
// script's errors and files: "1 error", not "1 errors".
func TestScriptErrorCounts(t *testing.T) {
	one := writeScript(t, "one.szl", "x: int = ;\n")
	two := writeScript(t, "two.szl", "x: int = \"a\";\ny: string = 1;\n")
	good := writeScript(t, "good.szl", "x: int = 1;\n")
	addr := closedAddr(t) // compile errors are found before any request
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"script", "run", one, "--table", "t", "--addr", addr}, one + ": 1 error"},
		{[]string{"script", "run", two, "--table", "t", "--addr", addr}, two + ": 2 errors"},
		{[]string{"read", "t", "--where", one, "--addr", addr}, one + ": 1 error"},
		{[]string{"script", "check", one}, "script check found errors in 1 of 1 file"},
		{[]string{"script", "check", one, good}, "script check found errors in 1 of 2 files"},
	} {
		err := runTabulaWithin(t, 10*time.Second, c.args...)
		if err == nil || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one ending in %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
