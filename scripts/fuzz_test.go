package scripts

import (
	"errors"
	"os"
	"testing"
	"time"
)

// fuzzSeeds start FuzzCompile off with every construct of the language; the
// committed corpus in testdata/fuzz/FuzzCompile holds them too.
var fuzzSeeds = []string{
	"",
	"x: int = 1;",
	"x := 1 + 2 * 3 - 4 / 5 % 6 << 1 >> 2 & 3 | 4 ^ 5;",
	"x: float = -1.5e3; y: bool = !(x < 0.0) && true || false and not true or false;",
	"s: string = \"a\\n\" + `raw`; b: bytes = B\"x\" + X\"0aff\"; t: time = T\"2024-01-02T03:04:05Z\"; c: int = 'c';",
	"a: array of int = {1, 2, 3}; m: map[string] of int = {\"a\": 1}; e: map[int] of bool = {:}; p: {x: int, string} = {1, \"y\"};",
	"type P = {name: string, n: int}; p: P = {\"a\", 1}; p.n++; p.name += \"b\";",
	"a: array of int = {1, 2}; a[0] = a[1]; a[1] += 2; x: array of int = a[0:1] + a[1:] + a[:1];",
	"for (i: int = 0; i < 10; i++) { if (i == 3) continue; if (i > 5) break; } while (false) {}",
	"i: int = 0; for (;;) { i--; if (i < -3) break; } for (; i < 0;) i++;",
	"if (true) ; else if (false) {} else { ; }",
	"f: function(n: int): int { if (n < 2) return n; return f(n - 1) + f(n - 2); }; x: int = f(10);",
	"g: function(s: string) { } g(\"x\");",
	"static k: string = \"x\"; static m: map[string] of int = {\"a\": 1};",
	"t: table sum[k: string][n: int] of int; emit t[\"a\"][1] <- 1;",
	"t: table maximum(3) of u: string weight w: float; emit t <- \"x\" weight 1.5;",
	"t: table top(5) of string weight int; emit t <- \"x\"; emit t <- \"y\" weight 2;",
	"a: table collection of Cell; b: table unique(10) of bytes; c: table quantile(5) of float; d: table sample(3) of int; e: table mean of int; f: table minimum(2) of int weight int;",
	"when (i: some int; input.cells[i].family == \"a\") emit keep <- true;",
	"when (i: each int; j: each int; input.cells[i].timestamp > input.cells[j].timestamp) ;",
	"m: map[string] of int = {:}; when (k: all string; m[k] > 0) {}",
	"x: int = len(input.cells) + len(input.key) + len(\"s\") + len({1}) + len({\"a\": 1});",
	"s: string = format(\"%d %s\", 1, \"x\") + lowercase(\"A\") + uppercase(\"b\") + trim(\" c \") + strreplace(\"a\", \"a\", \"b\") + join(split(\"a,b\", \",\"), \";\");",
	"b: bool = match(\"a+\", \"aa\") && hasprefix(\"ab\", \"a\") && hassuffix(\"ab\", \"b\"); a: array of string = matchstrs(\"(a)\", \"a\");",
	"n: int = strfind(\"a\", \"ba\") + strrfind(\"a\", \"aa\") + abs(-1) + min(1, 2) + max(1, 2) + fingerprint(\"x\");",
	"t: time = now(); y: int = year(t) + month(t) + day(t) + hour(t) + minute(t) + second(t) + dayofweek(t); u: time = trunctoday(t) + 1; v: time = trunctohour(t); s: string = formattime(t, \"2006\"); w: time = parsetime(\"2024\", \"2006\");",
	"f: float = sqrt(4.0) + log(1.0) + exp(0.0) + floor(1.5) + ceil(1.5) + pow(2.0, 2.0) + abs(-1.0);",
	"m: map[string] of int = {\"a\": 1}; b: bool = haskey(m, \"a\"); k: array of string = keys(m); s: array of string = sort(k); r: array of string = reverse(s); d: bool = def(m[\"z\"]);",
	"x: int = int(\"1\") + int(\"ff\", 16) + int(1.5) + int(true) + int(now()); f: float = float(1) + float(\"1.5\"); s: string = string(1) + string(1.5) + string(true) + string(B\"x\") + string(now()); b: bytes = bytes(\"x\"); t: time = time(0); t2: time = time(\"2024-01-01\"); o: bool = bool(\"true\") || bool(1);",
	"x: int = y; z: string = 1 + \"a\"; emit nope <- 1; break;",
	"if x > 1) { y = ; } }}} ((( [[",
	"# comment only\n// another",
}

// FuzzCompile checks that no input makes the parser, the checker or the
// compiler panic, and that whatever compiles runs, under tight limits, to
// completion or to a script error, never to a caught Go panic.
func FuzzCompile(f *testing.F) {
	if src, err := os.ReadFile("testdata/webtable.szl"); err == nil {
		f.Add(string(src))
	}
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	limits := Limits{Steps: 10000, Memory: 1 << 20, Time: 200 * time.Millisecond, Depth: 100}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Compile("fuzz.szl", src)
		if err != nil {
			var ce *CompileError
			if !errors.As(err, &ce) || len(ce.Diagnostics) == 0 {
				// Includes Compile's recovered internal errors: bugs.
				t.Fatalf("Compile error %T %v is not a CompileError with diagnostics", err, err)
			}
			return
		}
		r := p.NewRun(limits)
		for range 2 {
			if _, err := r.Process(testRow); err != nil {
				var re *RuntimeError
				if errors.As(err, &re) && re.Panic {
					t.Fatalf("Go panic while running:\n%s\n%v", src, err)
				}
				break
			}
		}
		_ = r.Result().String()
		if _, err := r.Partial().MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFuzzSeedsCompile keeps the seeds meaningful: all but the two
// deliberately broken ones compile and run.
func TestFuzzSeedsCompile(t *testing.T) {
	for i, src := range fuzzSeeds {
		_, err := Compile("seed.szl", src)
		broken := i == len(fuzzSeeds)-3 || i == len(fuzzSeeds)-2
		if (err != nil) != broken {
			t.Errorf("seed %d (%.40q): error %v", i, src, err)
		}
	}
}
