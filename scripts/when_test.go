package scripts

import (
	"testing"
)

// TestWhen checks the quantifiers' semantics over arrays and maps.
func TestWhen(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"some runs once with the first match", `
			out: table collection of int;
			a: array of int = {5, 7, 9, 7};
			when (i: some int; a[i] > 6) emit out <- i;`, "out = 1"},
		{"some without a match does not run", `
			out: table collection of int;
			a: array of int = {1, 2};
			when (i: some int; a[i] > 6) emit out <- i;
			emit out <- -1;`, "out = -1"},
		{"each runs for every match", `
			out: table collection of int;
			a: array of int = {5, 7, 9, 7};
			when (i: each int; a[i] > 6) emit out <- i;`, "out = 1\nout = 2\nout = 3"},
		{"all runs once when every value matches", `
			out: table collection of string;
			a: array of int = {5, 7, 9};
			when (i: all int; a[i] > 4) emit out <- "all";
			when (i: all int; a[i] > 5) emit out <- "not all";`, `out = "all"`},
		{"all over an empty range is true", `
			out: table collection of string;
			a: array of int = {};
			when (i: all int; a[i] > 4) emit out <- "vacuous";`, `out = "vacuous"`},
		{"range is the shortest array", `
			out: table collection of int;
			a: array of int = {1, 2, 3, 4};
			b: array of int = {1, 2};
			when (i: each int; a[i] == b[i]) emit out <- i;`, "out = 0\nout = 1"},
		{"two variables, each", `
			out: table collection of string;
			a: array of string = {"x", "y", "z"};
			b: array of string = {"z", "x"};
			when (i: each int; j: each int; a[i] == b[j]) emit out <- format("%d,%d", i, j);`,
			"out = \"0,1\"\nout = \"2,0\""},
		{"inner range depends on outer variable", `
			out: table collection of int;
			rows: array of array of int = {{1, 2}, {3, 40, 5}, {}};
			when (i: each int; j: each int; rows[i][j] > 2) emit out <- rows[i][j];`,
			"out = 3\nout = 40\nout = 5"},
		{"map keys", `
			out: table collection of string;
			m: map[string] of int = {"a": 1, "b": 5, "c": 9};
			when (k: each string; m[k] > 2) emit out <- k;`, "out = \"b\"\nout = \"c\""},
		{"input cells", `
			out: table collection of string;
			when (i: each int; input.cells[i].family == "anchor") emit out <- string(input.cells[i].qualifier);`,
			"out = \"com.x\"\nout = \"org.y\""},
		{"break in each leaves the enclosing loop", `
			out: table collection of int;
			a: array of int = {1, 2, 3};
			for (n: int = 0; n < 3; n++) {
				when (i: each int; a[i] > 0) { emit out <- n * 10 + i; if (i == 1) break; }
			}`, "out = 0\nout = 1"},
		{"continue in each goes to the next loop iteration", `
			out: table collection of int;
			a: array of int = {1, 2, 3};
			for (n: int = 0; n < 2; n++) {
				when (i: each int; a[i] > 0) { emit out <- n * 10 + i; continue; }
				emit out <- 99;
			}`, "out = 0\nout = 10"},
		{"return from each inside a function", `
			out: table collection of int;
			first: function(a: array of int, x: int): int {
				when (i: each int; a[i] == x) return i;
				return -1;
			}
			emit out <- first({4, 5, 6}, 6);
			emit out <- first({4, 5, 6}, 7);`, "out = 2\nout = -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := lines(runText(t, c.src, testRow)); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
