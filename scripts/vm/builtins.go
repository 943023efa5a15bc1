package vm

import (
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// maxRegexps bounds the per-run cache of compiled patterns built at run
// time (constant patterns are compiled once, at compile time).
const maxRegexps = 1000

// regexp returns the compiled pattern p, failing the script on a bad one.
func (m *Machine) regexp(pos syntax.Pos, p string) *regexp.Regexp {
	if re, ok := m.regexps[p]; ok {
		return re
	}
	re, err := regexp.Compile(p)
	if err != nil {
		m.fail(pos, "bad regular expression: %v", err)
	}
	m.alloc(int64(len(p)) * 16)
	if len(m.regexps) >= maxRegexps {
		clear(m.regexps)
	}
	m.regexps[p] = re
	return re
}

func str(s string) value.Value { return value.Value{S: s} }

func strArray(m *Machine, ss []string) value.Value {
	out := make([]value.Value, len(ss))
	n := int64(0)
	for i, s := range ss {
		out[i] = value.Value{S: s}
		n += int64(len(s)) + 40
	}
	m.alloc(n + 24)
	return value.Value{R: &value.ArrayVal{Elems: out}}
}

func (c *compiler) builtin(e *syntax.CallExpr, name string) eval {
	args := make([]eval, len(e.Args))
	types := make([]*value.Type, len(e.Args))
	for i, a := range e.Args {
		args[i] = c.expr(a)
		types[i] = c.typeOf(a)
	}
	pos := e.Lparen
	a0 := func(m *Machine) value.Value { return args[0](m) }
	if len(args) > 0 {
		a0 = args[0]
	}
	unaryStr := func(f func(string) string) eval {
		return func(m *Machine) value.Value {
			s := a0(m).S
			m.work(len(s))
			m.alloc(int64(len(s)))
			return str(f(s))
		}
	}
	timeInt := func(f func(time.Time) int64) eval {
		return func(m *Machine) value.Value { return value.MakeInt(f(value.TimeOf(a0(m)))) }
	}
	float1 := func(f func(float64) float64) eval {
		return func(m *Machine) value.Value { return value.MakeFloat(f(a0(m).Float())) }
	}
	switch name {
	case "len":
		switch types[0].Kind {
		case value.String:
			return func(m *Machine) value.Value {
				s := a0(m).S
				m.work(len(s))
				return value.MakeInt(int64(utf8.RuneCountInString(s)))
			}
		case value.Bytes:
			return func(m *Machine) value.Value { return value.MakeInt(int64(len(a0(m).S))) }
		case value.Array:
			if c.isInputCells(e.Args[0]) {
				return func(m *Machine) value.Value { return value.MakeInt(int64(len(m.cells))) }
			}
			return func(m *Machine) value.Value { return value.MakeInt(int64(len(a0(m).Array().Elems))) }
		}
		return func(m *Machine) value.Value { return value.MakeInt(int64(a0(m).Map().Len())) }
	case "format":
		return func(m *Machine) value.Value {
			f := a0(m).S
			if err := checkFormat(f); err != "" {
				m.fail(pos, "format: %s", err)
			}
			vals := make([]any, len(args)-1)
			for i := range vals {
				vals[i] = goValue(types[i+1], args[i+1](m))
			}
			s := fmt.Sprintf(f, vals...)
			m.alloc(int64(len(s)))
			return str(s)
		}
	case "match", "matchstrs":
		var re *regexp.Regexp
		if lit, ok := unparen(e.Args[0]).(*syntax.BasicLit); ok {
			re = regexp.MustCompile(c.prog.Consts[lit].S) // checked
		}
		pattern := func(m *Machine) *regexp.Regexp {
			if re != nil {
				return re
			}
			return m.regexp(pos, a0(m).S)
		}
		if name == "match" {
			return func(m *Machine) value.Value {
				p := pattern(m)
				s := args[1](m).S
				m.work(len(s))
				return value.MakeBool(p.MatchString(s))
			}
		}
		return func(m *Machine) value.Value {
			p := pattern(m)
			s := args[1](m).S
			m.work(len(s))
			sub := p.FindStringSubmatch(s)
			return strArray(m, sub)
		}
	case "split":
		return func(m *Machine) value.Value {
			s, sep := a0(m).S, args[1](m).S
			m.work(len(s))
			if s == "" {
				return strArray(m, nil)
			}
			if sep == "" {
				m.alloc(int64(len(s)) * 40)
			}
			return strArray(m, strings.Split(s, sep))
		}
	case "join":
		return func(m *Machine) value.Value {
			a := a0(m).Array().Elems
			sep := args[1](m).S
			// Charge before building: the elements may all share one big
			// string.
			n := int64(len(sep)) * int64(len(a))
			for _, v := range a {
				n += int64(len(v.S))
			}
			m.alloc(n)
			m.work(int(n) + len(a))
			var b strings.Builder
			b.Grow(int(n))
			for i, v := range a {
				if i > 0 {
					b.WriteString(sep)
				}
				b.WriteString(v.S)
			}
			return str(b.String())
		}
	case "strfind", "strrfind":
		last := name == "strrfind"
		return func(m *Machine) value.Value {
			needle, s := a0(m).S, args[1](m).S
			m.work(len(s))
			i := strings.Index(s, needle)
			if last {
				i = strings.LastIndex(s, needle)
			}
			if i < 0 {
				return value.MakeInt(-1)
			}
			return value.MakeInt(int64(utf8.RuneCountInString(s[:i])))
		}
	case "strreplace":
		return func(m *Machine) value.Value {
			s, old, nw := a0(m).S, args[1](m).S, args[2](m).S
			m.work(len(s))
			n := strings.Count(s, old)
			m.alloc(int64(len(s) + n*(len(nw)-len(old)) + len(nw)))
			return str(strings.ReplaceAll(s, old, nw))
		}
	case "hasprefix":
		return func(m *Machine) value.Value { return value.MakeBool(strings.HasPrefix(a0(m).S, args[1](m).S)) }
	case "hassuffix":
		return func(m *Machine) value.Value { return value.MakeBool(strings.HasSuffix(a0(m).S, args[1](m).S)) }
	case "lowercase":
		return unaryStr(strings.ToLower)
	case "uppercase":
		return unaryStr(strings.ToUpper)
	case "trim":
		return func(m *Machine) value.Value { return str(strings.TrimSpace(a0(m).S)) }
	case "now":
		return func(m *Machine) value.Value { return value.MakeInt(m.start) }
	case "formattime":
		return func(m *Machine) value.Value {
			s := value.TimeOf(a0(m)).Format(args[1](m).S)
			m.alloc(int64(len(s)))
			return str(s)
		}
	case "parsetime":
		return func(m *Machine) value.Value {
			s, layout := a0(m).S, args[1](m).S
			t, err := time.Parse(layout, s)
			if err != nil {
				m.fail(pos, "parsetime: %v", err)
			}
			return value.MakeInt(t.UnixMicro())
		}
	case "year":
		return timeInt(func(t time.Time) int64 { return int64(t.Year()) })
	case "month":
		return timeInt(func(t time.Time) int64 { return int64(t.Month()) })
	case "day":
		return timeInt(func(t time.Time) int64 { return int64(t.Day()) })
	case "hour":
		return timeInt(func(t time.Time) int64 { return int64(t.Hour()) })
	case "minute":
		return timeInt(func(t time.Time) int64 { return int64(t.Minute()) })
	case "second":
		return timeInt(func(t time.Time) int64 { return int64(t.Second()) })
	case "dayofweek":
		// Monday is 1 and Sunday 7, as in Sawzall.
		return timeInt(func(t time.Time) int64 { return int64((t.Weekday()+6)%7) + 1 })
	case "trunctoday":
		return timeInt(func(t time.Time) int64 {
			return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC).UnixMicro()
		})
	case "trunctohour":
		return timeInt(func(t time.Time) int64 { return t.Truncate(time.Hour).UnixMicro() })
	case "sqrt":
		return float1(math.Sqrt)
	case "log":
		return float1(math.Log)
	case "exp":
		return float1(math.Exp)
	case "floor":
		return float1(math.Floor)
	case "ceil":
		return float1(math.Ceil)
	case "pow":
		return func(m *Machine) value.Value { return value.MakeFloat(math.Pow(a0(m).Float(), args[1](m).Float())) }
	case "fingerprint":
		return func(m *Machine) value.Value {
			h := fnv.New64a()
			h.Write([]byte(a0(m).S))
			return value.MakeInt(int64(h.Sum64()))
		}
	case "abs":
		if types[0].Kind == value.Float {
			return float1(math.Abs)
		}
		return func(m *Machine) value.Value {
			n := a0(m).N
			if n < 0 {
				n = -n
			}
			return value.MakeInt(n)
		}
	case "min", "max":
		t := types[0]
		isMax := name == "max"
		return func(m *Machine) value.Value {
			a, b := a0(m), args[1](m)
			r := value.Compare(t, a, b)
			if isMax == (r >= 0) {
				return a
			}
			return b
		}
	case "haskey":
		return func(m *Machine) value.Value {
			_, ok := a0(m).Map().Get(args[1](m))
			return value.MakeBool(ok)
		}
	case "keys":
		return func(m *Machine) value.Value {
			mp := a0(m).Map()
			m.alloc(int64(mp.Len())*40 + 24)
			return value.Value{R: &value.ArrayVal{Elems: slices.Clone(mp.Keys)}}
		}
	case "sort":
		t := types[0].Elem
		return func(m *Machine) value.Value {
			a := a0(m).Array().Elems
			m.alloc(int64(len(a))*40 + 24)
			out := slices.Clone(a)
			m.work(64 * len(a)) // sorting is work; count it
			slices.SortStableFunc(out, func(x, y value.Value) int { return value.Compare(t, x, y) })
			return value.Value{R: &value.ArrayVal{Elems: out}}
		}
	case "reverse":
		return func(m *Machine) value.Value {
			a := a0(m).Array().Elems
			m.alloc(int64(len(a))*40 + 24)
			out := slices.Clone(a)
			slices.Reverse(out)
			return value.Value{R: &value.ArrayVal{Elems: out}}
		}
	case "def":
		return func(m *Machine) value.Value { return value.MakeBool(m.defined(a0)) }
	}
	panic("vm: unknown intrinsic " + name)
}

// defined evaluates x and reports whether it completed without a runtime
// error (limits still stop the run). The machine's call state is restored
// when it did not.
func (m *Machine) defined(x eval) (ok bool) {
	fp, sp, depth, goStack := m.fp, m.sp, m.depth, m.goStack
	defer func() {
		if r := recover(); r != nil {
			if _, isLimit := r.(*LimitError); isLimit {
				panic(r)
			}
			m.fp, m.sp, m.depth, m.goStack = fp, sp, depth, goStack
			ok = false
		}
	}()
	x(m)
	return true
}

// maxFormatWidth bounds widths and precisions in format verbs, which
// would otherwise let a tiny format allocate gigabytes before the memory
// limit could see it.
const maxFormatWidth = 10000

// checkFormat returns why the format string f is refused, or "".
func checkFormat(f string) string {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		for i++; i < len(f) && strings.IndexByte("+-# 0", f[i]) >= 0; i++ {
		}
		for part := 0; part < 2 && i < len(f); part++ {
			if f[i] == '*' {
				return "* widths are not supported"
			}
			n := 0
			for ; i < len(f) && f[i] >= '0' && f[i] <= '9'; i++ {
				n = n*10 + int(f[i]-'0')
				if n > maxFormatWidth {
					return fmt.Sprintf("width or precision over %d", maxFormatWidth)
				}
			}
			if part == 0 && i < len(f) && f[i] == '.' {
				i++
				continue
			}
			break
		}
		if i < len(f) && f[i] == '[' {
			return "explicit argument indexes are not supported"
		}
	}
	return ""
}

// goValue converts a value to what fmt formats naturally: basic kinds to
// their Go values (times as text), others to their literal syntax.
func goValue(t *value.Type, v value.Value) any {
	switch t.Kind {
	case value.Time:
		return value.TimeOf(v).Format(value.TimeLayout)
	case value.Array, value.Map, value.Tuple:
		return value.Format(t, v)
	}
	return value.GoBasic(t, v)
}

// conversion compiles T(x) for a basic type T.
func (c *compiler) conversion(e *syntax.CallExpr, to *value.Type) eval {
	x := c.expr(e.Args[0])
	from := c.typeOf(e.Args[0])
	pos := e.Lparen
	if to.Kind == value.Int && len(e.Args) == 2 {
		base := c.expr(e.Args[1])
		return func(m *Machine) value.Value {
			s := x(m).S
			b := base(m).N
			if b != 0 && (b < 2 || b > 36) {
				m.fail(pos, "int: invalid base %d", b)
			}
			n, err := strconv.ParseInt(s, int(b), 64)
			if err != nil {
				m.fail(pos, "int(%q, %d): not an integer", s, b)
			}
			return value.MakeInt(n)
		}
	}
	if value.Identical(from, to) {
		return x
	}
	f := from.Kind
	switch to.Kind {
	case value.Int:
		switch f {
		case value.Float:
			return func(m *Machine) value.Value {
				v := x(m).Float()
				if math.IsNaN(v) || v >= 1<<63 || v < -(1<<63) {
					m.fail(pos, "int(%v): out of range", v)
				}
				return value.MakeInt(int64(v))
			}
		case value.String:
			return func(m *Machine) value.Value {
				s := x(m).S
				n, err := strconv.ParseInt(s, 0, 64)
				if err != nil {
					m.fail(pos, "int(%q): not an integer", s)
				}
				return value.MakeInt(n)
			}
		}
		return x // bool, time: same representation
	case value.Float:
		switch f {
		case value.String:
			return func(m *Machine) value.Value {
				s := x(m).S
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					m.fail(pos, "float(%q): not a number", s)
				}
				return value.MakeFloat(v)
			}
		}
		return func(m *Machine) value.Value { return value.MakeFloat(float64(x(m).N)) }
	case value.String:
		switch f {
		case value.Bytes:
			return x // same representation, no copy
		case value.Int:
			return func(m *Machine) value.Value {
				m.alloc(20)
				return str(strconv.FormatInt(x(m).N, 10))
			}
		case value.Float:
			return func(m *Machine) value.Value {
				m.alloc(24)
				return str(strconv.FormatFloat(x(m).Float(), 'g', -1, 64))
			}
		case value.Bool:
			return func(m *Machine) value.Value { return str(strconv.FormatBool(x(m).Bool())) }
		case value.Time:
			return func(m *Machine) value.Value {
				m.alloc(32)
				return str(value.TimeOf(x(m)).Format(value.TimeLayout))
			}
		}
	case value.Bytes:
		return x // from string: same representation
	case value.Bool:
		switch f {
		case value.String:
			return func(m *Machine) value.Value {
				s := x(m).S
				b, err := strconv.ParseBool(s)
				if err != nil {
					m.fail(pos, "bool(%q): not a bool", s)
				}
				return value.MakeBool(b)
			}
		case value.Int:
			return func(m *Machine) value.Value { return value.MakeBool(x(m).N != 0) }
		}
	case value.Time:
		switch f {
		case value.String:
			return func(m *Machine) value.Value {
				s := x(m).S
				t, ok := check.ParseTime(s)
				if !ok {
					m.fail(pos, "time(%q): not a time", s)
				}
				return value.MakeInt(t)
			}
		}
		return x // from int: microseconds
	}
	panic("vm: unexpected conversion from " + from.String() + " to " + to.String())
}
