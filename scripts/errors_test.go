package scripts

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCompileErrors checks syntax and type errors, with their positions.
// Every case lists all the diagnostics expected, in order.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		src  string
		want []string
	}{
		// syntax
		{"x: int = 1", []string{"1:11: expected ';', found \"end of file\""}},
		{"x: int = ;", []string{"1:10: expected expression, found \";\""}},
		{"x: int = 1 +;", []string{"1:13: expected expression, found \";\""}},
		{"if x > 1) y = 2;", []string{"1:4: expected \"(\" after if, found identifier x"}},
		{"x: int = \"abc;", []string{"1:10: literal not terminated", "1:15: expected ';', found \"end of file\""}},
		{"x: int = 1 $ 2;", []string{"1:12: invalid character '$'", "1:14: expected ';', found integer 2"}},
		{"for (i: int = 0; i < 3) {}", []string{"1:23: expected \";\" after for condition, found \")\""}},
		{"when (i: int; true) {}", []string{"1:7: expected quantified variable (name: some|each|all type;) in when"}},
		{"emit t 1;", []string{"1:8: expected \"<-\" in emit, found integer 1"}},
		{"}", []string{"1:1: unexpected '}'"}},
		{"x: int = 1;\ny: int = ;\nz: int = ;", []string{"2:10: expected expression, found \";\"", "3:10: expected expression, found \";\""}},
		{"t: table sum int;", []string{"1:14: expected \"of\" in table type, found identifier int"}},
		// names and declarations
		{"x: int = y;", []string{"1:10: undefined: y"}},
		{"x: foo = 1;", []string{"1:4: undefined type foo"}},
		{"x: int = 1; x: int = 2;", []string{"1:13: x redeclared in this block (previous declaration at 1:1)"}},
		{"x: int = int;", []string{"1:10: type int is not an expression"}},
		{"x: len = 1;", []string{"1:4: len is not a type"}},
		{"x := {};", []string{"1:6: cannot tell the type of an empty literal here; declare it: name: T = {};"}},
		{"type T = {};", []string{"1:10: a tuple needs at least one field"}},
		{"m: map[array of int] of int;", []string{"1:8: map key must have a basic type, not array of int"}},
		{"{ type T = int; }", []string{"1:3: types may only be declared at the top level"}},
		{"{ static s: int = 1; }", []string{"1:10: statics may only be declared at the top level"}},
		{"static s: int;", []string{"1:8: static s must be initialized"}},
		{"x: int = 1; static s: int = x;", []string{"1:29: static initializer cannot refer to x, which is not static"}},
		{"static s: bytes = input.key;", []string{"1:19: static initializer cannot refer to input"}},
		{"static s: int = 1; s = 2;", []string{"1:20: cannot assign to s (statics are read-only)"}},
		{"input = input;", []string{"1:1: cannot assign to input (the input is read-only)"}},
		{"x: int = 1; x + 1;", []string{"1:13: expression is not used"}},
		{"3 = 4;", []string{"1:1: cannot assign to expression"}},
		{`s: string = "ab"; s[0] = 'x';`, []string{"1:20: cannot assign to an element of string s"}},
		// types of expressions
		{"x: int = 1.5;", []string{"1:10: cannot use float as int in declaration of x (convert with int(…))"}},
		{"x: float = 1;", []string{"1:12: cannot use int as float in declaration of x (convert with float(…))"}},
		{`x: int = 1 + "a";`, []string{"1:12: mismatched types int and string for +"}},
		{"x: int = 1 + 1.5;", []string{"1:12: mismatched types int and float for +"}},
		{"x: bool = 1 && true;", []string{"1:13: operator && needs bool operands, not int and bool"}},
		{"x: int = -true;", []string{"1:10: operator - not defined on bool"}},
		{"x: bool = !1;", []string{"1:11: operator ! not defined on int"}},
		{`x: string = "a" - "b";`, []string{"1:17: operator - not defined on string"}},
		{"x: float = 1.5 % 2.0;", []string{"1:16: operator % not defined on float"}},
		{"x: bool = {1} < {2};", []string{"1:15: operator < not defined on array of int"}},
		{"x: bool = 1 == 1.0;", []string{"1:13: mismatched types int and float for =="}},
		{"if (1) {}", []string{"1:5: if condition must be bool, not int"}},
		{"while (\"x\") {}", []string{"1:8: while condition must be bool, not string"}},
		{"for (;1;) {}", []string{"1:7: for condition must be bool, not int"}},
		{"x: int = 1; x++; s: string = \"\"; s++;", []string{"1:35: cannot increment or decrement s (type string)"}},
		{"a: array of int = {1, \"x\"};", []string{"1:23: cannot use string as int in array literal (convert with int(…))"}},
		{"m: map[string] of int = {1: 2};", []string{"1:26: cannot use int as string in map literal key (convert with string(…))"}},
		{"a: array of int = {\"k\": 1};", []string{"1:20: key: value in an array literal"}},
		{"t: {a: int, b: string} = {1};", []string{"1:26: tuple literal has 1 value, type {a: int, b: string} has 2 fields"}},
		{"x: int = 5; y: int = x[0];", []string{"1:23: cannot index x (type int)"}},
		{"a: array of int = {1}; x: int = a[\"0\"];", []string{"1:35: index must be int, not string"}},
		{"x: int = input.size;", []string{"1:16: input.size undefined (type Row has no field size)"}},
		{"x: int = 1; y: int = x.f;", []string{"1:24: x.f undefined (type int is not a tuple)"}},
		{"x: int = 1; y: int = x[1:2];", []string{"1:23: cannot slice x (type int)"}},
		// calls
		{"x: int = len(1);", []string{"1:14: invalid argument for len: int"}},
		{"x: int = len();", []string{"1:13: len takes 1 argument(s), got 0"}},
		{`x: bool = match("(", "a");`, []string{"1:17: invalid regular expression: error parsing regexp: missing closing ): `(`"}},
		{"x: int = int(B\"1\");", []string{"1:14: cannot convert bytes to int"}},
		{"x: int = foo(1);", []string{"1:10: undefined: foo"}},
		{"x: int = 1; y: int = x(1);", []string{"1:22: cannot call x: not a function"}},
		{"f: function(a: int): int { return a; } x: int = f(\"a\");", []string{"1:51: cannot use string as int in argument 1 of f (convert with int(…))"}},
		{"f: function(a: int): int { return a; } x: int = f();", []string{"1:50: f takes 1 argument(s), got 0"}},
		{"f: function() { } x: int = f();", []string{"1:28: f(…) has no value"}},
		{"f: function(): int { }", []string{"1:20: missing return at end of function f"}},
		{"f: function(): int { if (true) return 1; }", []string{"1:20: missing return at end of function f"}},
		{"f: function(): int { while (true) {} }", nil},
		{"f: function(n: int): int { for (;;) { if (n > 0) break; } }", []string{"1:26: missing return at end of function f"}},
		{"f: function(n: int): int { for (;;) { for (;;) break; } }", nil},
		{"f: function(n: int): int { if (n > 0) { return 1; } else { return 2; } }", nil},
		{"f: function(n: int): int { while (true) { when (i: each int; {1}[i] > n) break; } }", []string{"1:26: missing return at end of function f"}},
		{"x: array of int = sort({{1}});", []string{"1:24: invalid argument for sort: array of array of int (want an array of int, float, string, bytes or time)"}},
		{"x: array of int = reverse(1);", []string{"1:27: invalid argument: int (want an array)"}},
		{"x: array of int = keys(1);", []string{"1:24: invalid argument for keys: int (want a map)"}},
		{"type T = {a: int}; x: T = T(1);", []string{"1:28: cannot convert to T"}},
		{"x: string = format(1);", []string{"1:20: cannot use int as string in format string (convert with string(…))"}},
		{"x: string = format();", []string{"1:19: format needs a format string"}},
		{"f: function(): int { return; }", []string{"1:22: function f must return a value of type int"}},
		{"f: function() { return 1; }", []string{"1:24: function f returns no value"}},
		{"return;", []string{"1:1: return outside a function"}},
		{"break;", []string{"1:1: break is not in a loop"}},
		{"{ f: function() {} }", []string{"1:3: functions may only be declared at the top level"}},
		{"f: function(int) {}", []string{"1:13: parameter 1 of f needs a name"}},
		{"x: int = min(1, 1.5);", []string{"1:13: invalid arguments for min: int and float (want two ints, floats, strings, bytes or times)"}},
		{`x: bool = haskey({1}, 1);`, []string{"1:18: invalid argument for haskey: array of int (want a map)"}},
		// tables and emit
		{"t: table bogus of int;", []string{"1:10: unknown table kind bogus (want collection, sum, mean, maximum, minimum, top, unique, quantile or sample)"}},
		{"t: table sum of string;", []string{"1:17: sum table must be of int or float, not string"}},
		{"t: table maximum of int weight int;", []string{"1:10: table kind maximum needs a parameter: maximum(n)"}},
		{"t: table maximum(3) of int;", []string{"1:4: table kind maximum needs a weight: … weight name: int"}},
		{"t: table sum(3) of int;", []string{"1:14: table kind sum takes no parameter"}},
		{"t: table top(0) of int;", []string{"1:14: table parameter 0 out of range [1, 1048576]"}},
		{"n: int = 3; t: table top(n) of int;", []string{"1:26: table parameter must be an integer literal"}},
		{"t: table quantile(1) of int;", []string{"1:19: quantile needs at least 2 n-tiles, got 1"}},
		{"t: table top(3) of int weight string;", []string{"1:31: weight must be int or float, not string"}},
		{"t: table sum of int weight int;", []string{"1:28: table kind sum takes no weight"}},
		{"t: table sum[array of int] of int;", []string{"1:14: table index must have a basic type, not array of int"}},
		{"{ t: table sum of int; }", []string{"1:3: tables may only be declared at the top level"}},
		{"t: table sum of int; emit t <- 1.5;", []string{"1:32: cannot use float as int in emit to table t (convert with int(…))"}},
		{"t: table sum[string] of int; emit t <- 1;", []string{"1:30: table t has 1 index, emit gives 0"}},
		{"t: table sum[string] of int; emit t[1] <- 1;", []string{"1:37: cannot use int as string in index of table t (convert with string(…))"}},
		{"t: table maximum(2) of int weight float; emit t <- 1;", []string{"1:42: emit to table t (maximum) needs a weight"}},
		{"t: table maximum(2) of int weight float; emit t <- 1 weight 1;", []string{"1:61: cannot use int as float in weight of table t (convert with float(…))"}},
		{"x: int = 1; emit x <- 1;", []string{"1:18: x is not a table"}},
		{"emit nope <- 1;", []string{"1:6: undefined: nope"}},
		{"emit keep <- 1;", []string{"1:14: cannot use int as bool in emit to table keep (convert with bool(…))"}},
		{"t: table sum of int; x: int = t;", []string{"1:31: table t can only be used in emit"}},
		// when
		{"when (i: some int; true) {}", []string{"1:7: cannot tell the range of i: use it as an index of an array or map in the when condition"}},
		{"a: array of int; when (i: some int; j: each int; a[i] == a[j]) {}", []string{"1:37: all variables of one when must have the same quantifier (some); nest when statements to mix them"}},
		{"a: array of int; when (i: all int; a[i] > 0) emit keep <- i > 0;", []string{"1:59: i is quantified by all and has no value in the body"}},
		{"a: array of array of int; when (i: each int; j: each int; a[j][i] > 0) {}", []string{"1:59: the range of i cannot depend on i or later quantified variables"}},
		{"a: array of int; when (i: some string; a[0] > 0) {}", []string{"1:24: cannot tell the range of i: use it as an index of an array or map in the when condition"}},
		// several errors at once, in order
		{"x: int = \"a\";\ny: string = 1;\nz := w;", []string{
			"1:10: cannot use string as int in declaration of x (convert with int(…))",
			"2:13: cannot use int as string in declaration of y (convert with string(…))",
			"3:6: undefined: w",
		}},
	}
	for _, c := range cases {
		got := compileErrors(c.src)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s\ngot  %q\nwant %q", c.src, got, c.want)
		}
	}
}

// TestNestingLimit checks that deep nesting is an error, not a stack
// overflow in the parser, checker or compiler.
func TestNestingLimit(t *testing.T) {
	for _, src := range []string{
		"x := " + strings.Repeat("(", 2000) + "1" + strings.Repeat(")", 2000) + ";",
		"x := " + strings.Repeat("- ", 2000) + "1;",
		"x := " + strings.Repeat("{", 2000) + "1" + strings.Repeat("}", 2000) + ";",
		strings.Repeat("{", 2000) + strings.Repeat("}", 2000),
		strings.Repeat("if (true) ", 2000) + ";",
		"x: " + strings.Repeat("array of ", 2000) + "int;",
		"x := 1" + strings.Repeat(" + 1", 2000) + ";",
		"x := {1}" + strings.Repeat("[0]", 2000) + ";",
		"x := input" + strings.Repeat(".key", 2000) + ";",
	} {
		errs := compileErrors(src)
		if len(errs) == 0 || !strings.Contains(errs[0], "nesting deeper than 500") {
			t.Errorf("%.20s…: got %q", src, errs)
		}
	}
}

// TestSourceSizeLimit checks that oversized scripts are refused.
func TestSourceSizeLimit(t *testing.T) {
	errs := compileErrors(strings.Repeat(";", MaxSourceSize+1))
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "1:1: script is 1048577 bytes") {
		t.Fatalf("got %q", errs)
	}
}

// TestCompileErrorMessage checks the error text: one LINE:COL line each.
func TestCompileErrorMessage(t *testing.T) {
	_, err := Compile("x.szl", "x: int = \"a\";\ny: int = z;")
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Name != "x.szl" {
		t.Fatalf("got %T %v", err, err)
	}
	want := "1:10: cannot use string as int in declaration of x (convert with int(…))\n2:10: undefined: z"
	if err.Error() != want {
		t.Errorf("got %q, want %q", err.Error(), want)
	}
}

// TestRuntimeErrors checks errors found while running, with positions.
func TestRuntimeErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"a: array of int = {1, 2};\nx: int = a[5];", "2:11: runtime error: index 5 out of range [0:2]"},
		{"a: array of int = {1, 2};\ni: int = -1;\nx: int = a[i];", "3:11: runtime error: index -1 out of range [0:2]"},
		{"a: array of int = {1, 2};\na[2] = 1;", "2:2: runtime error: index 2 out of range [0:2]"},
		{`m: map[string] of int = {:}; x: int = m["k"];`, `1:40: runtime error: key "k" not in map`},
		{"x: int = 0; y: int = 1 / x;", "1:24: runtime error: integer division by zero"},
		{"x: int = 0; y: int = 1 % x;", "1:24: runtime error: integer division by zero"},
		{`x: int = int("12x");`, `1:13: runtime error: int("12x"): not an integer`},
		{`x: float = float("x");`, `1:17: runtime error: float("x"): not a number`},
		{`x: time = time("yesterday");`, `1:15: runtime error: time("yesterday"): not a time`},
		{`s: string = "ab"; x: string = s[1:5];`, "1:32: runtime error: slice bounds [1:5] out of range [0:2]"},
		{`s: string = "héllo"; x: int = s[9];`, "1:33: runtime error: index 9 out of range [0:5]"},
		{`p: string = "("; x: bool = match(p, "a");`, "1:33: runtime error: bad regular expression: error parsing regexp: missing closing ): `(`"},
		{"x: int = 1; y: int = x << -1;", "1:24: runtime error: negative shift count -1"},
		{`x: time = parsetime("x", "2006");`, `1:20: runtime error: parsetime: parsing time "x" as "2006": cannot parse "x" as "2006"`},
		{`x: string = format("%99999999d", 1);`, "1:19: runtime error: format: width or precision over 10000"},
		{`x: string = format("%.99999999f", 1.0);`, "1:19: runtime error: format: width or precision over 10000"},
		{`x: string = format("%*d", 5, 1);`, "1:19: runtime error: format: * widths are not supported"},
		{"x: int = input.cells[10].timestamp;", "1:21: runtime error: index 10 out of range [0:4]"},
	}
	for _, c := range cases {
		err := runErr(t, c.src, Limits{}, testRow)
		var re *RuntimeError
		if !errors.As(err, &re) || err.Error() != c.want {
			t.Errorf("%s\ngot  %v\nwant %s", c.src, err, c.want)
		}
	}
}

// TestErrorsAreSticky checks that a run is over after an error.
func TestErrorsAreSticky(t *testing.T) {
	p := mustCompile(t, "t: table sum of int; emit t <- 1; x: int = 1 / (len(input.cells) - 4);")
	r := p.NewRun(Limits{})
	_, err1 := r.Process(testRow)
	_, err2 := r.Process(testRow)
	if err1 == nil || err2 != err1 {
		t.Fatalf("got %v then %v, want the same error twice", err1, err2)
	}
}

// TestLimits checks that each bound stops a runaway script with an error
// naming it.
func TestLimits(t *testing.T) {
	cases := []struct {
		name   string
		src    string
		limits Limits
		want   string
	}{
		{"endless loop", "x: int = 0;\nwhile (true) x++;", Limits{Steps: 2000}, "2:15: script exceeded step limit (2000)"},
		{"endless for", "for (;;) {}", Limits{Steps: 1000}, "1:1: script exceeded step limit (1000)"},
		{"endless when", "a: array of int = {1}; for (;;) when (i: each int; a[i] > 0) {}", Limits{Steps: 1000}, "script exceeded step limit (1000)"},
		{"memory bomb", "s: string = \"x\";\nwhile (true) s = s + s;", Limits{Memory: 1 << 20}, "2:16: script exceeded memory limit (1048576 bytes)"},
		{"array bomb", "a: array of int = {1};\nwhile (true) a = a + a;", Limits{Memory: 1 << 20}, "script exceeded memory limit (1048576 bytes)"},
		{"map bomb", "m: map[int] of int = {:};\nfor (i: int = 0; ; i++) m[i] = i;", Limits{Memory: 1 << 20}, "script exceeded memory limit (1048576 bytes)"},
		{"table bomb", "t: table collection of string;\nfor (;;) emit t <- \"xxxxxxxxxxxxxxxxxxxx\";", Limits{Memory: 1 << 20}, "script exceeded memory limit (1048576 bytes)"},
		{"walking long strings", "s: string = \"x\";\nfor (i: int = 0; i < 17; i++) s = s + s;\nfor (;;) { n: int = len(s); c: int = s[100000]; }", Limits{Steps: 100000}, "script exceeded step limit (100000)"},
		{"deep recursion", "f: function(n: int): int { return f(n + 1); }\nx: int = f(0);", Limits{Depth: 1000}, "1:36: script exceeded call depth limit (1000)"},
		{"deep recursion through deep nesting", "f: function(n: int): int { return " + strings.Repeat("- ", 400) + "f(n + 1); }\nx: int = f(0);", Limits{Memory: 64 << 20}, "script exceeded memory limit (67108864 bytes)"},
		{"stack", "f: function(n: int): int { return " + strings.Repeat("- ", 400) + "f(n + 1); }\nx: int = f(0);", Limits{Memory: 1 << 40}, "script exceeded stack limit (268435456 bytes)"},
		{"time", "for (;;) {}", Limits{Time: 20 * time.Millisecond, Steps: 1 << 62}, "1:1: script exceeded time limit (20ms)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := runErr(t, c.src, c.limits, testRow)
			var le *LimitError
			if !errors.As(err, &le) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %s", err, c.want)
			}
		})
	}
}

// TestStepsArePerRow checks that a script within its step limit on each
// row runs over any number of rows.
func TestStepsArePerRow(t *testing.T) {
	p := mustCompile(t, "t: table sum of int; for (i: int = 0; i < 100; i++) emit t <- 1;")
	r := p.NewRun(Limits{Steps: 500})
	for range 50 {
		if _, err := r.Process(testRow); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Result().Table("t").Entries[0].Value; got != int64(5000) {
		t.Fatalf("sum = %v, want 5000", got)
	}
}
