package scripts

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// genInt returns a random int expression and its value computed in Go.
// Divisors are made odd (never zero) and shift counts masked to 0..31, so
// every expression is defined.
func genInt(r *rand.Rand, depth int) (string, int64) {
	if depth == 0 || r.IntN(4) == 0 {
		n := int64(r.IntN(200) - 100)
		if n < 0 {
			return fmt.Sprintf("(%d)", n), n
		}
		return strconv.FormatInt(n, 10), n
	}
	a, x := genInt(r, depth-1)
	b, y := genInt(r, depth-1)
	switch r.IntN(11) {
	case 0:
		return "(" + a + " + " + b + ")", x + y
	case 1:
		return "(" + a + " - " + b + ")", x - y
	case 2:
		return "(" + a + " * " + b + ")", x * y
	case 3:
		return "(" + a + " / (" + b + " | 1))", x / (y | 1)
	case 4:
		return "(" + a + " % (" + b + " | 1))", x % (y | 1)
	case 5:
		return "(" + a + " & " + b + ")", x & y
	case 6:
		return "(" + a + " | " + b + ")", x | y
	case 7:
		return "(" + a + " ^ " + b + ")", x ^ y
	case 8:
		return "(" + a + " << (" + b + " & 31))", x << (y & 31)
	case 9:
		return "(" + a + " >> (" + b + " & 31))", x >> (y & 31)
	}
	return "(-" + a + ")", -x
}

// genBool returns a random bool expression over int comparisons and its
// value.
func genBool(r *rand.Rand, depth int) (string, bool) {
	if depth == 0 || r.IntN(3) == 0 {
		a, x := genInt(r, 2)
		b, y := genInt(r, 2)
		ops := []struct {
			s string
			f func(int64, int64) bool
		}{
			{"==", func(a, b int64) bool { return a == b }}, {"!=", func(a, b int64) bool { return a != b }},
			{"<", func(a, b int64) bool { return a < b }}, {"<=", func(a, b int64) bool { return a <= b }},
			{">", func(a, b int64) bool { return a > b }}, {">=", func(a, b int64) bool { return a >= b }},
		}
		op := ops[r.IntN(len(ops))]
		return a + " " + op.s + " " + b, op.f(x, y)
	}
	a, x := genBool(r, depth-1)
	b, y := genBool(r, depth-1)
	switch r.IntN(3) {
	case 0:
		return "(" + a + " && " + b + ")", x && y
	case 1:
		return "(" + a + " || " + b + ")", x || y
	}
	return "!(" + a + ")", !x
}

// TestDifferentialArithmetic compares the script's integer arithmetic and
// logic with Go's on random expressions.
func TestDifferentialArithmetic(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var src strings.Builder
	var want strings.Builder
	src.WriteString("i: table collection of int;\nb: table collection of bool;\n")
	for range 300 {
		e, v := genInt(r, 5)
		fmt.Fprintf(&src, "emit i <- %s;\n", e)
		fmt.Fprintf(&want, "i = %d\n", v)
	}
	for range 300 {
		e, v := genBool(r, 3)
		fmt.Fprintf(&src, "emit b <- %s;\nif (%s) emit b <- true; else emit b <- false;\n", e, e)
		fmt.Fprintf(&want, "b = %t\nb = %t\n", v, v)
	}
	got := runText(t, src.String(), testRow)
	if got != want.String() {
		gl, wl := strings.Split(got, "\n"), strings.Split(want.String(), "\n")
		for k := range min(len(gl), len(wl)) {
			if gl[k] != wl[k] {
				t.Fatalf("line %d: got %q, want %q", k+1, gl[k], wl[k])
			}
		}
		t.Fatalf("outputs differ in length: %d vs %d lines", len(gl), len(wl))
	}
}
