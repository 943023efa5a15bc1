package check

import (
	"regexp"
	"strconv"
	"time"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// builtinFunc checks a call of an intrinsic and returns its result type.
type builtinFunc func(c *checker, call *syntax.CallExpr) *value.Type

// builtins are the intrinsic functions. Their run-time implementations are
// in package vm, which picks among overloads by the argument types recorded
// here.
var builtins map[string]builtinFunc

func init() {
	S, I, F, B, T := value.StringType, value.IntType, value.FloatType, value.BoolType, value.TimeType
	builtins = map[string]builtinFunc{
		"len": unary(func(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
			switch t.Kind {
			case value.String, value.Bytes, value.Array, value.Map:
				return I
			}
			c.errorf(pos, "invalid argument for len: %v", t)
			return value.InvalidType
		}),
		"format":      formatBuiltin,
		"match":       sig(B, S, S),
		"matchstrs":   sig(value.ArrayOf(S), S, S),
		"split":       sig(value.ArrayOf(S), S, S),
		"join":        sig(S, value.ArrayOf(S), S),
		"strfind":     sig(I, S, S),
		"strrfind":    sig(I, S, S),
		"strreplace":  sig(S, S, S, S),
		"hasprefix":   sig(B, S, S),
		"hassuffix":   sig(B, S, S),
		"lowercase":   sig(S, S),
		"uppercase":   sig(S, S),
		"trim":        sig(S, S),
		"now":         sig(T),
		"formattime":  sig(S, T, S),
		"parsetime":   sig(T, S, S),
		"year":        sig(I, T),
		"month":       sig(I, T),
		"day":         sig(I, T),
		"hour":        sig(I, T),
		"minute":      sig(I, T),
		"second":      sig(I, T),
		"dayofweek":   sig(I, T),
		"trunctoday":  sig(T, T),
		"trunctohour": sig(T, T),
		"sqrt":        sig(F, F),
		"log":         sig(F, F),
		"exp":         sig(F, F),
		"floor":       sig(F, F),
		"ceil":        sig(F, F),
		"pow":         sig(F, F, F),
		"fingerprint": unary(func(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
			if t.Kind != value.String && t.Kind != value.Bytes {
				c.errorf(pos, "invalid argument for fingerprint: %v (want string or bytes)", t)
			}
			return I
		}),
		"abs": unary(func(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
			if !t.IsNumeric() {
				c.errorf(pos, "invalid argument for abs: %v (want int or float)", t)
				return value.InvalidType
			}
			return t
		}),
		"min":     minMax,
		"max":     minMax,
		"haskey":  haskeyBuiltin,
		"keys":    unary(mapArg("keys", func(m *value.Type) *value.Type { return value.ArrayOf(m.Key) })),
		"def":     defBuiltin,
		"sort":    unary(sortArg),
		"reverse": unary(arrayArg),
	}
}

func (c *checker) argCount(call *syntax.CallExpr, name string, want int) bool {
	if len(call.Args) != want {
		c.errorf(call.Lparen, "%s takes %d argument(s), got %d", name, want, len(call.Args))
		for _, a := range call.Args {
			c.expr(a, nil, false)
		}
		return false
	}
	return true
}

func calleeName(call *syntax.CallExpr) string { return call.Fun.(*syntax.Ident).Name }

// sig is a builtin with a fixed signature.
func sig(result *value.Type, params ...*value.Type) builtinFunc {
	return func(c *checker, call *syntax.CallExpr) *value.Type {
		name := calleeName(call)
		if !c.argCount(call, name, len(params)) {
			return result
		}
		for i, a := range call.Args {
			t := c.expr(a, params[i], false)
			c.assignable(a.Pos(), t, params[i], "argument "+itoa(i+1)+" of "+name)
		}
		c.constRegexp(call)
		return result
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// constRegexp reports an invalid constant pattern before the script runs.
func (c *checker) constRegexp(call *syntax.CallExpr) {
	name := calleeName(call)
	if name != "match" && name != "matchstrs" {
		return
	}
	if lit, ok := call.Args[0].(*syntax.BasicLit); ok {
		if v, ok := c.prog.Consts[lit]; ok {
			if _, err := regexp.Compile(v.S); err != nil {
				c.errorf(lit.ValuePos, "invalid regular expression: %v", err)
			}
		}
	}
}

func unary(f func(c *checker, pos syntax.Pos, t *value.Type) *value.Type) builtinFunc {
	return func(c *checker, call *syntax.CallExpr) *value.Type {
		if !c.argCount(call, calleeName(call), 1) {
			return value.InvalidType
		}
		t := c.expr(call.Args[0], nil, false)
		if t.Kind == value.Invalid {
			return value.InvalidType
		}
		return f(c, call.Args[0].Pos(), t)
	}
}

func mapArg(name string, f func(*value.Type) *value.Type) func(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
	return func(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
		if t.Kind != value.Map {
			c.errorf(pos, "invalid argument for %s: %v (want a map)", name, t)
			return value.InvalidType
		}
		return f(t)
	}
}

func sortArg(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
	if t.Kind != value.Array || !t.Elem.IsOrdered() && t.Elem.Kind != value.Bool {
		c.errorf(pos, "invalid argument for sort: %v (want an array of int, float, string, bytes or time)", t)
		return value.InvalidType
	}
	return t
}

func arrayArg(c *checker, pos syntax.Pos, t *value.Type) *value.Type {
	if t.Kind != value.Array {
		c.errorf(pos, "invalid argument: %v (want an array)", t)
		return value.InvalidType
	}
	return t
}

func formatBuiltin(c *checker, call *syntax.CallExpr) *value.Type {
	if len(call.Args) == 0 {
		c.errorf(call.Lparen, "format needs a format string")
		return value.StringType
	}
	t := c.expr(call.Args[0], value.StringType, false)
	c.assignable(call.Args[0].Pos(), t, value.StringType, "format string")
	for _, a := range call.Args[1:] {
		c.expr(a, nil, false)
	}
	return value.StringType
}

func minMax(c *checker, call *syntax.CallExpr) *value.Type {
	name := calleeName(call)
	if !c.argCount(call, name, 2) {
		return value.InvalidType
	}
	a := c.expr(call.Args[0], nil, false)
	b := c.expr(call.Args[1], a, false)
	if containsInvalid(a) || containsInvalid(b) {
		return value.InvalidType
	}
	if !value.Identical(a, b) || !a.IsOrdered() {
		c.errorf(call.Lparen, "invalid arguments for %s: %v and %v (want two ints, floats, strings, bytes or times)", name, a, b)
		return value.InvalidType
	}
	return a
}

func haskeyBuiltin(c *checker, call *syntax.CallExpr) *value.Type {
	if !c.argCount(call, "haskey", 2) {
		return value.BoolType
	}
	m := c.expr(call.Args[0], nil, false)
	if m.Kind == value.Invalid {
		c.expr(call.Args[1], nil, false)
		return value.BoolType
	}
	if m.Kind != value.Map {
		c.errorf(call.Args[0].Pos(), "invalid argument for haskey: %v (want a map)", m)
		c.expr(call.Args[1], nil, false)
		return value.BoolType
	}
	k := c.expr(call.Args[1], m.Key, false)
	c.assignable(call.Args[1].Pos(), k, m.Key, "haskey")
	return value.BoolType
}

func defBuiltin(c *checker, call *syntax.CallExpr) *value.Type {
	if c.argCount(call, "def", 1) {
		c.expr(call.Args[0], nil, false)
	}
	return value.BoolType
}

// conversion checks T(x) for a basic type T.
func (c *checker) conversion(call *syntax.CallExpr, to *value.Type) *value.Type {
	name := calleeName(call)
	if !to.IsBasic() {
		c.errorf(call.Lparen, "cannot convert to %v", to)
		for _, a := range call.Args {
			c.expr(a, nil, false)
		}
		return value.InvalidType
	}
	if to.Kind == value.Int && len(call.Args) == 2 {
		from := c.expr(call.Args[0], nil, false)
		base := c.expr(call.Args[1], nil, false)
		if from.Kind != value.Invalid && from.Kind != value.String {
			c.errorf(call.Args[0].Pos(), "int(s, base) needs a string, not %v", from)
		}
		if base.Kind != value.Invalid && base.Kind != value.Int {
			c.errorf(call.Args[1].Pos(), "base must be int, not %v", base)
		}
		return to
	}
	if !c.argCount(call, name, 1) {
		return to
	}
	from := c.expr(call.Args[0], nil, false)
	if from.Kind == value.Invalid {
		return to
	}
	if !Convertible(from, to) {
		c.errorf(call.Args[0].Pos(), "cannot convert %v to %v", from, to)
	}
	return to
}

// Convertible reports whether T(x) is allowed for x of type from.
func Convertible(from, to *value.Type) bool {
	if !from.IsBasic() {
		return false
	}
	f := from.Kind
	switch to.Kind {
	case value.Int:
		return f != value.Bytes
	case value.Float:
		return f == value.Int || f == value.Float || f == value.String || f == value.Time
	case value.String:
		return true
	case value.Bytes:
		return f == value.String || f == value.Bytes
	case value.Bool:
		return f == value.Bool || f == value.String || f == value.Int
	case value.Time:
		return f == value.Int || f == value.String || f == value.Time
	}
	return false
}

// timeLayouts are tried in order when a string becomes a time.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02", time.RFC1123Z, time.RFC1123, time.UnixDate}

// ParseTime parses s as a time in one of the accepted layouts (RFC 3339
// first) and returns microseconds since the epoch. Times without a zone are
// UTC.
func ParseTime(s string) (int64, bool) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UnixMicro(), true
		}
	}
	return 0, false
}

func (c *checker) call(call *syntax.CallExpr) *value.Type {
	id, ok := unparen(call.Fun).(*syntax.Ident)
	if !ok {
		c.errorf(call.Fun.Pos(), "cannot call %s: only named functions can be called", describe(call.Fun))
		for _, a := range call.Args {
			c.expr(a, nil, false)
		}
		return value.InvalidType
	}
	call.Fun = id
	o := c.scope.lookup(id.Name)
	if o == nil {
		c.errorf(id.NamePos, "undefined: %s", id.Name)
		for _, a := range call.Args {
			c.expr(a, nil, false)
		}
		return value.InvalidType
	}
	c.prog.Uses[id] = o
	switch o.Kind {
	case TypeObj:
		return c.conversion(call, o.Type)
	case BuiltinObj:
		return builtins[id.Name](c, call)
	case FuncObj:
		f := o.Func
		if c.static {
			c.errorf(id.NamePos, "static initializer cannot call function %s", id.Name)
		}
		if len(call.Args) != len(f.Params) {
			c.errorf(call.Lparen, "%s takes %d argument(s), got %d", f.Name, len(f.Params), len(call.Args))
		}
		for i, a := range call.Args {
			var want *value.Type
			if i < len(f.Params) {
				want = f.Params[i].Type
			}
			t := c.expr(a, want, false)
			if want != nil {
				c.assignable(a.Pos(), t, want, "argument "+itoa(i+1)+" of "+f.Name)
			}
		}
		if f.Result == nil {
			return noValue
		}
		return f.Result
	}
	c.errorf(id.NamePos, "cannot call %s: not a function", id.Name)
	for _, a := range call.Args {
		c.expr(a, nil, false)
	}
	return value.InvalidType
}
