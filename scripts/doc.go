// Package scripts is Tabula's script language: a dialect of Sawzall (Pike,
// Dorward, Griesemer, Quinlan, "Interpreting the Data: Parallel Analysis
// with Sawzall", 2005) that runs inside the tablet servers, one row at a
// time, and summarizes, filters or transforms what a scan returns.
//
// # Using it
//
// Compile checks a script and reports every syntax and type error, each as
// LINE:COL: message. A Program is immutable and safe to share; NewRun starts
// a Run, which processes rows (cell.Row, as the tablet server reads them)
// under Limits. A run's tables are a Partial: partials from many runs (one
// per tablet) merge, travel as bytes (MarshalBinary, UnmarshalBinary, safe
// on untrusted input), and finalize into a Result, printed as JSON or text.
//
// # The language
//
// A script is a list of statements, run once for each row. Comments start
// with # (or //). Statements end with a semicolon.
//
//	Declarations  name: type = expr;   name: type;   name := expr;
//	              static name: type = expr;   (once per run, then read-only)
//	              type Name = type;
//	              name: function(a: int, b: string): int { … }   (top level)
//	              name: table kind(n)[index: type]… of [name:] type [weight [name:] type];
//	Statements    lvalue = expr;  lvalue op= expr;  lvalue++;  lvalue--;  f(…);
//	              { … }  if (c) s [else s]  while (c) s  for (init; c; post) s
//	              break;  continue;  return [expr];
//	              when (i: some|each|all type; … cond) s
//	              emit table[index]… <- expr [weight expr];
//	Types         int float bool string bytes time
//	              array of T   map[K] of V   {name: T, …}   Cell
//	Expressions   || && (also or, and), == != < <= > >=, + - | ^, * / % << >> &,
//	              unary - + ! not ~, calls, a[i], a[i:j], t.field,
//	              literals 42 0x2a 'c' 1.5 "s" `raw` B"bytes" X"0aff" T"2006-01-02T15:04:05Z"
//	              true false, composites {1, 2} {"k": 1} {:} {x, "y"} (typed by context)
//
// Types are static and there are no implicit conversions: T(x) converts
// between basic types (int("42"), int(s, 16), string(b), bytes(s),
// float(i), time("2006-01-02"), …). Arrays, maps and tuples are references:
// assignment shares them. Strings are Unicode: len, indexing and slicing
// count characters; bytes count bytes. Times are microseconds since the
// epoch, UTC; time ± int and time - time are allowed. Reading m[k] for a
// key k not in map m is a run-time error (test with haskey, or def), but
// m[k]++ and m[k] op= x start from the zero value, so counting needs no
// test.
//
// The input row is the predeclared, read-only input: input.key (bytes) and
// input.cells (array of Cell), every cell version the scan returned, in scan
// order (column by column, newest first). Cell is {family: string,
// qualifier: bytes, timestamp: int, value: bytes}.
//
// when runs its body depending on a condition over quantified variables,
// each ranging over the indexes of the arrays (or keys of the maps) it
// indexes in the condition: some runs it once for the first match, each for
// every match, all once if every value matches. See package vm.
//
// Intrinsics: len; format (printf verbs); match, matchstrs (RE2); split,
// join, strfind, strrfind, strreplace, hasprefix, hassuffix, lowercase,
// uppercase, trim; haskey, keys, sort, reverse; min, max, abs, sqrt, log,
// exp, pow, floor, ceil; fingerprint; now (the time the run started),
// formattime(t, layout), parsetime(s, layout) (Go layouts), year, month,
// day, hour, minute, second, dayofweek (Monday = 1), trunctoday,
// trunctohour; def(x), true when x evaluates without a run-time error.
//
// # Output
//
// Output is only by emit into tables, which aggregate across rows and
// merge across runs (see package agg): collection, sum, mean, maximum(n)
// and minimum(n) with a weight, top(n) with an optional weight, unique(n),
// quantile(n), sample(n); indexed tables keep one aggregate per index.
// Scripts cannot write to Bigtable, files or the network.
//
// Filter mode: the predeclared table keep (of bool) needs no declaration.
// A row is kept when the script emits true to it at least once while
// processing the row (emitting false changes nothing):
//
//	when (i: some int; input.cells[i].family == "contents" && len(input.cells[i].value) > 100000)
//	    emit keep <- true;
//
// Process reports whether the row was kept; the tablet server returns kept
// rows with their cells. Transform mode: emit transformed records into a
// collection table (of a tuple type, say); they come back in the Result.
//
// # Limits
//
// A run is bounded in steps per row (statements, loop iterations, calls,
// and the work of intrinsics that walk long strings), memory (bytes
// allocated per row plus table state plus the estimated Go stack of deep
// calls), wall time for the whole run, and call depth; past a bound,
// Process returns a *LimitError naming it, e.g. "3:1: script exceeded step
// limit (1000000)", and the run is over. Scripts over MaxSourceSize and
// nesting deeper than 500 levels are refused by Compile, so no script can
// exhaust the stack of the parser, the checker or the evaluator. Run-time errors (index out of range, missing map
// key, division by zero, failed conversion) are *RuntimeError values with
// the script position; a Go panic inside evaluation becomes one too.
package scripts
