package scripts

import (
	"testing"
)

// TestExpressions evaluates one expression per case, emitted into a
// collection, and compares its printed value.
func TestExpressions(t *testing.T) {
	cases := []struct {
		typ, expr, want string
	}{
		// literals
		{"int", "42", "42"},
		{"int", "0x2a", "42"},
		{"int", "'a'", "97"},
		{"int", "-9223372036854775808", "-9223372036854775808"},
		{"float", "1.5", "1.5"},
		{"float", "1e3", "1000.0"},
		{"bool", "true", "true"},
		{"string", `"a\tb"`, `"a\tb"`},
		{"string", "`raw\\n`", `"raw\\n"`},
		{"bytes", `B"ab"`, `B"ab"`},
		{"bytes", `X"6162"`, `B"ab"`},
		{"time", `T"2024-01-02T03:04:05Z"`, `T"2024-01-02T03:04:05Z"`},
		// arithmetic
		{"int", "7 + 3 * 2", "13"},
		{"int", "(7 + 3) * 2", "20"},
		{"int", "7 / 2", "3"},
		{"int", "-7 % 3", "-1"},
		{"int", "7 - 10", "-3"},
		{"int", "6 & 3", "2"},
		{"int", "6 | 3", "7"},
		{"int", "6 ^ 3", "5"},
		{"int", "1 << 10", "1024"},
		{"int", "1024 >> 3", "128"},
		{"int", "~0", "-1"},
		{"int", "-(3)", "-3"},
		{"int", "+3", "3"},
		{"float", "7.0 / 2.0", "3.5"},
		{"float", "1.5 * 2.0 - 0.5", "2.5"},
		{"float", "-1.5", "-1.5"},
		{"string", `"ab" + "cd"`, `"abcd"`},
		{"bytes", `B"ab" + B"cd"`, `B"abcd"`},
		{"array of int", "{1, 2} + {3}", "{1, 2, 3}"},
		{"time", `T"2024-01-01T00:00:00Z" + 1000000`, `T"2024-01-01T00:00:01Z"`},
		{"time", `T"2024-01-01T00:00:00Z" - 1000000`, `T"2023-12-31T23:59:59Z"`},
		{"int", `T"2024-01-01T00:00:01Z" - T"2024-01-01T00:00:00Z"`, "1000000"},
		// comparison and logic
		{"bool", "1 < 2", "true"},
		{"bool", "2 <= 1", "false"},
		{"bool", "2 > 1 && 1 >= 1", "true"},
		{"bool", "1 == 1", "true"},
		{"bool", "1 != 1", "false"},
		{"bool", `"a" < "b"`, "true"},
		{"bool", `"b" >= "a"`, "true"},
		{"bool", `B"a" == B"a"`, "true"},
		{"bool", "1.5 > 1.25", "true"},
		{"bool", "1.5 == 1.5", "true"},
		{"bool", `T"2024-01-01T00:00:00Z" < T"2025-01-01T00:00:00Z"`, "true"},
		{"bool", "{1, 2} == {1, 2}", "true"},
		{"bool", "{1, 2} != {1, 3}", "true"},
		{"bool", "true || false", "true"},
		{"bool", "true and not false", "true"},
		{"bool", "false or true", "true"},
		{"bool", "!true", "false"},
		// short circuit: the right side would fail
		{"bool", "false && 1 / 0 == 0", "false"},
		{"bool", "true || {1}[5] == 0", "true"},
		// indexing and slicing
		{"int", "{10, 20, 30}[1]", "20"},
		{"int", `{"a": 1, "b": 2}["b"]`, "2"},
		{"int", `"héllo"[1]`, "233"},
		{"int", `B"abc"[2]`, "99"},
		{"string", `"héllo"[1:3]`, `"él"`},
		{"string", `"hello"[:2]`, `"he"`},
		{"string", `"hello"[3:]`, `"lo"`},
		{"bytes", `B"hello"[1:3]`, `B"el"`},
		{"array of int", "{1, 2, 3, 4}[1:3]", "{2, 3}"},
		// input
		{"bytes", "input.key", `B"com.example/a"`},
		{"int", "len(input.cells)", "4"},
		{"string", "input.cells[2].family", `"contents"`},
		{"bytes", "input.cells[0].qualifier", `B"com.x"`},
		{"int", "input.cells[1].timestamp", "20"},
		{"string", "string(input.cells[3].value)", `"en"`},
		// conversions
		{"int", `int("42")`, "42"},
		{"int", `int("ff", 16)`, "255"},
		{"int", `int("0x10")`, "16"},
		{"int", "int(3.9)", "3"},
		{"int", "int(true)", "1"},
		{"int", `int(T"1970-01-01T00:00:01Z")`, "1000000"},
		{"float", "float(3)", "3.0"},
		{"float", `float("2.5")`, "2.5"},
		{"string", "string(42)", `"42"`},
		{"string", "string(2.5)", `"2.5"`},
		{"string", "string(true)", `"true"`},
		{"string", `string(B"xy")`, `"xy"`},
		{"string", "string(T\"2024-01-02T00:00:00Z\")", `"2024-01-02T00:00:00Z"`},
		{"bytes", `bytes("xy")`, `B"xy"`},
		{"bool", `bool("true")`, "true"},
		{"bool", "bool(0)", "false"},
		{"time", "time(0)", `T"1970-01-01T00:00:00Z"`},
		{"time", `time("2024-03-04")`, `T"2024-03-04T00:00:00Z"`},
		// intrinsics
		{"int", `len("héllo")`, "5"},
		{"int", `len(B"héllo")`, "6"},
		{"int", "len({1, 2, 3})", "3"},
		{"int", `len({"a": 1})`, "1"},
		{"string", `format("%s=%d %.1f %v", "x", 3, 1.25, true)`, `"x=3 1.2 true"`},
		{"string", `format("%5d|%-4s|%%|%05.2f", 42, "ab", 3.14159)`, `"   42|ab  |%|03.14"`},
		{"string", `format("%x %q", B"ab", "q")`, `"6162 \"q\""`},
		{"bool", `match("^h.*o$", "hello")`, "true"},
		{"bool", `match("^x", "hello")`, "false"},
		{"bool", `match(string(input.cells[3].value) + "$", "len")`, "true"},
		{"array of string", `matchstrs("(" + "l+" + ")o", "hello")`, `{"llo", "ll"}`},
		{"string", `"héllo wörld"[4:9]`, `"o wör"`},
		{"string", `"héllo"[5:]`, `""`},
		{"array of string", `matchstrs("(\\w+)@(\\w+)", "me@host")`, `{"me@host", "me", "host"}`},
		{"array of string", `matchstrs("z", "abc")`, "{}"},
		{"array of string", `split("a,b,,c", ",")`, `{"a", "b", "", "c"}`},
		{"array of string", `split("", ",")`, "{}"},
		{"string", `join({"a", "b"}, "-")`, `"a-b"`},
		{"int", `strfind("l", "héllo")`, "2"},
		{"int", `strrfind("l", "héllo")`, "3"},
		{"int", `strfind("z", "hello")`, "-1"},
		{"string", `strreplace("a.b.c", ".", "/")`, `"a/b/c"`},
		{"bool", `hasprefix("hello", "he")`, "true"},
		{"bool", `hassuffix("hello", "lo")`, "true"},
		{"string", `lowercase("HeLLo")`, `"hello"`},
		{"string", `uppercase("HeLLo")`, `"HELLO"`},
		{"string", `trim("  x y \n")`, `"x y"`},
		{"bool", `haskey({"a": 1}, "a")`, "true"},
		{"bool", `haskey({"a": 1}, "b")`, "false"},
		{"array of string", `keys({"b": 1, "a": 2})`, `{"b", "a"}`},
		{"array of int", "sort({3, 1, 2})", "{1, 2, 3}"},
		{"array of string", `sort({"b", "a"})`, `{"a", "b"}`},
		{"array of int", "reverse({1, 2, 3})", "{3, 2, 1}"},
		{"int", "min(3, 2)", "2"},
		{"int", "max(3, 2)", "3"},
		{"string", `max("a", "b")`, `"b"`},
		{"float", "min(1.5, -2.5)", "-2.5"},
		{"int", "abs(-4)", "4"},
		{"float", "abs(-4.5)", "4.5"},
		{"float", "sqrt(16.0)", "4.0"},
		{"float", "pow(2.0, 10.0)", "1024.0"},
		{"float", "floor(1.5)", "1.0"},
		{"float", "ceil(1.5)", "2.0"},
		{"float", "exp(0.0)", "1.0"},
		{"float", "log(1.0)", "0.0"},
		{"bool", `fingerprint("a") == fingerprint("a") && fingerprint("a") != fingerprint("b")`, "true"},
		{"bool", "now() == now()", "true"},
		{"string", `formattime(T"2024-01-02T03:04:05Z", "2006/01/02 15h")`, `"2024/01/02 03h"`},
		{"time", `parsetime("02/01/2024", "02/01/2006")`, `T"2024-01-02T00:00:00Z"`},
		{"int", `year(T"2024-01-02T03:04:05Z")`, "2024"},
		{"int", `month(T"2024-01-02T03:04:05Z")`, "1"},
		{"int", `day(T"2024-01-02T03:04:05Z")`, "2"},
		{"int", `hour(T"2024-01-02T03:04:05Z")`, "3"},
		{"int", `minute(T"2024-01-02T03:04:05Z")`, "4"},
		{"int", `second(T"2024-01-02T03:04:05Z")`, "5"},
		{"int", `dayofweek(T"2024-01-01T00:00:00Z")`, "1"}, // a Monday
		{"int", `dayofweek(T"2024-01-07T00:00:00Z")`, "7"}, // a Sunday
		{"time", `trunctoday(T"2024-01-02T03:04:05Z")`, `T"2024-01-02T00:00:00Z"`},
		{"time", `trunctohour(T"2024-01-02T03:04:05Z")`, `T"2024-01-02T03:00:00Z"`},
		{"bool", `def(int("12"))`, "true"},
		{"bool", `def(int("x"))`, "false"},
		{"bool", "def({1}[3])", "false"},
		// composites
		{"map[string] of int", `{"a": 1, "b": 2}`, `{"a": 1, "b": 2}`},
		{"map[string] of int", `{:}`, `{:}`},
		{"{a: int, b: string}", `{1, "x"}`, `{a: 1, b: "x"}`},
		{"array of array of int", "{{1}, {2, 3}}", "{{1}, {2, 3}}"},
	}
	for _, c := range cases {
		src := "out: table collection of " + c.typ + ";\nemit out <- " + c.expr + ";\n"
		got := lines(runText(t, src, testRow))
		want := "out = " + c.want
		if got != want {
			t.Errorf("%s (%s): got %q, want %q", c.expr, c.typ, got, want)
		}
	}
}

// TestStatements runs small programs and compares their text output.
func TestStatements(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"decl and assign", `
			out: table sum of int;
			x: int = 1; y: int; z := 40;
			x = x + 1; y = 3;
			emit out <- x + y + z;`, "out = 45"},
		{"compound assign", `
			out: table collection of int;
			x: int = 10; x += 5; x -= 3; x *= 2; x /= 4; x %= 4;
			emit out <- x;`, "out = 2"},
		{"inc dec", `
			out: table collection of float;
			f: float = 1.5; f++; f++; f--;
			emit out <- f;`, "out = 2.5"},
		{"if else", `
			out: table collection of string;
			for (i: int = 0; i < 3; i++)
				if (i == 0) emit out <- "zero"; else if (i == 1) emit out <- "one"; else emit out <- "many";`,
			"out = \"zero\"\nout = \"one\"\nout = \"many\""},
		{"while break continue", `
			out: table collection of int;
			i: int = 0;
			while (true) {
				i++;
				if (i % 2 == 0) continue;
				if (i > 7) break;
				emit out <- i;
			}`, "out = 1\nout = 3\nout = 5\nout = 7"},
		{"for with empty clauses", `
			out: table sum of int;
			i: int = 0;
			for (;;) { i++; if (i == 10) break; }
			for (; i < 20;) i++;
			emit out <- i;`, "out = 20"},
		{"nested loops and scopes", `
			out: table sum of int;
			n: int = 0;
			for (i: int = 0; i < 4; i++)
				for (j: int = 0; j < i; j++) { n := 100; n++; }
			for (i: int = 0; i < 4; i++)
				for (j: int = 0; j < i; j++) n++;
			emit out <- n;`, "out = 6"},
		{"array element assignment", `
			out: table collection of array of int;
			a: array of int = {1, 2, 3};
			a[1] = 20; a[2] += 10;
			emit out <- a;`, "out = {1, 20, 13}"},
		{"map assignment and counting", `
			out: table collection of map[string] of int;
			m: map[string] of int = {:};
			words: array of string = split("a b a c a b", " ");
			for (i: int = 0; i < len(words); i++) m[words[i]]++;
			m["z"] = 9;
			emit out <- m;`, `out = {"a": 3, "b": 2, "c": 1, "z": 9}`},
		{"tuple fields", `
			type Pair = {name: string, n: int};
			out: table collection of Pair;
			p: Pair = {"x", 1};
			p.n = p.n + 41;
			p.name += "y";
			emit out <- p;`, `out = {name: "xy", n: 42}`},
		{"references are shared", `
			out: table collection of int;
			a: array of int = {1};
			b: array of int = a;
			b[0] = 7;
			emit out <- a[0];`, "out = 7"},
		{"functions and recursion", `
			out: table collection of int;
			fib: function(n: int): int {
				if (n < 2) return n;
				return fib(n - 1) + fib(n - 2);
			};
			emit out <- fib(20);`, "out = 6765"},
		{"function with no result and globals", `
			out: table sum of int;
			total: int = 0;
			add: function(n: int) { total = total + n; }
			add(2); add(3);
			emit out <- total;`, "out = 5"},
		{"function locals do not clash with arguments", `
			out: table collection of string;
			f: function(a: string, b: int): string {
				s: string = a;
				for (i: int = 1; i < b; i++) s = s + a;
				return s;
			}
			emit out <- f(f("ab", 2), 2);`, `out = "abababab"`},
		{"def restores the call stack", `
			out: table collection of int;
			f: function(n: int): int { a: array of int = {}; return a[n] + f(n); }
			g: function(y: int): int {
				x: int = y * 2;
				if (def(f(3))) return -1;
				return x + y;
			}
			emit out <- g(5) + g(1);`, "out = 18"},
		{"static", `
			static greeting: string = "hi" + "!";
			static table_: map[string] of int = {"a": 1};
			out: table collection of string;
			emit out <- greeting + string(table_["a"]);`, `out = "hi!1"`},
		{"emit with index and weight", `
			m: table maximum(2)[k: string] of v: string weight w: int;
			emit m["a"] <- "x" weight 1;
			emit m["a"] <- "y" weight 3;
			emit m["a"] <- "z" weight 2;
			emit m["b"] <- "q" weight 5;`,
			"m[\"a\"] = \"y\" weight 3\nm[\"a\"] = \"z\" weight 2\nm[\"b\"] = \"q\" weight 5"},
		{"two indexes", `
			s: table sum[a: string][b: int] of int;
			emit s["x"][2] <- 1; emit s["x"][1] <- 1; emit s["x"][2] <- 1; emit s["a"][9] <- 5;`,
			"s[\"a\"][9] = 5\ns[\"x\"][1] = 1\ns[\"x\"][2] = 2"},
		{"empty statements and blocks", `
			out: table sum of int;
			;;{ } { ; }
			emit out <- 1;`, "out = 1"},
		{"shadowing", `
			out: table collection of int;
			x: int = 1;
			{ x: int = 2; x++; }
			emit out <- x;`, "out = 1"},
		{"decl refers to outer", `
			out: table collection of int;
			x: int = 1;
			{ x: int = x + 10; emit out <- x; }`, "out = 11"},
		{"collection of cells", `
			out: table collection of Cell;
			emit out <- input.cells[3];`, `out = {family: "language", qualifier: B"", timestamp: 5, value: B"en"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := lines(runText(t, c.src, testRow)); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
