package check

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// noValue is the type of a call to a function that returns nothing.
var noValue = &value.Type{Kind: value.Invalid, Name: "no value"}

// expr checks x and returns its type, recording it in Types. hint is the
// type the context expects, which gives composite literals their type; it
// may be nil. stmt is set when the value may be discarded (an expression
// statement), so that a call returning nothing is fine.
func (c *checker) expr(x syntax.Expr, hint *value.Type, stmt bool) *value.Type {
	if x == nil {
		return value.InvalidType
	}
	t := c.expr1(x, hint)
	if t == noValue {
		if !stmt {
			c.errorf(x.Pos(), "%s has no value", describe(x))
		}
		return value.InvalidType
	}
	c.prog.Types[x] = t
	return t
}

// assignable reports an error unless a value of type got may be stored where
// a want is expected. Types must be identical: there are no implicit
// conversions, as in Sawzall.
func (c *checker) assignable(pos syntax.Pos, got, want *value.Type, context string) bool {
	if containsInvalid(got) || containsInvalid(want) || value.Identical(got, want) {
		return true
	}
	hint := ""
	if got.IsBasic() && want.IsBasic() && Convertible(got, want) {
		// There are no implicit conversions; say how to write one.
		hint = fmt.Sprintf(" (convert with %v(…))", want)
	}
	c.errorf(pos, "cannot use %v as %v in %s%s", got, want, context, hint)
	return false
}

func (c *checker) expr1(x syntax.Expr, hint *value.Type) *value.Type {
	switch x := x.(type) {
	case *syntax.BadExpr:
		return value.InvalidType
	case *syntax.Ident:
		return c.ident(x)
	case *syntax.BasicLit:
		return c.literal(x)
	case *syntax.CompositeLit:
		return c.composite(x, hint)
	case *syntax.KeyValue:
		c.errorf(x.Pos(), "key: value outside a map literal")
		return value.InvalidType
	case *syntax.ParenExpr:
		return c.expr(x.X, hint, false)
	case *syntax.UnaryExpr:
		t := c.expr(x.X, hint, false)
		if t.Kind == value.Invalid {
			return t
		}
		switch x.Op {
		case syntax.SUB, syntax.ADD:
			if t.IsNumeric() {
				return t
			}
		case syntax.NOT:
			if t.Kind == value.Bool {
				return t
			}
		case syntax.TILDE:
			if t.Kind == value.Int {
				return t
			}
		}
		c.errorf(x.OpPos, "operator %s not defined on %v", x.Op, t)
		return value.InvalidType
	case *syntax.BinaryExpr:
		return c.binary(x)
	case *syntax.CallExpr:
		return c.call(x)
	case *syntax.IndexExpr:
		xt := c.expr(x.X, nil, false)
		switch xt.Kind {
		case value.Array:
			c.intArg(x.Index, "index")
			return xt.Elem
		case value.Map:
			kt := c.expr(x.Index, xt.Key, false)
			c.assignable(x.Index.Pos(), kt, xt.Key, "map index")
			return xt.Elem
		case value.String, value.Bytes:
			c.intArg(x.Index, "index")
			return value.IntType
		case value.Invalid:
			c.expr(x.Index, nil, false)
			return value.InvalidType
		}
		c.expr(x.Index, nil, false)
		c.errorf(x.Lbrack, "cannot index %s (type %v)", describe(x.X), xt)
		return value.InvalidType
	case *syntax.SliceExpr:
		xt := c.expr(x.X, nil, false)
		if x.Lo != nil {
			c.intArg(x.Lo, "slice bound")
		}
		if x.Hi != nil {
			c.intArg(x.Hi, "slice bound")
		}
		switch xt.Kind {
		case value.Array, value.String, value.Bytes, value.Invalid:
			return xt
		}
		c.errorf(x.Lbrack, "cannot slice %s (type %v)", describe(x.X), xt)
		return value.InvalidType
	case *syntax.SelectorExpr:
		var xt *value.Type
		if id, ok := x.X.(*syntax.Ident); ok && c.scope.lookup(id.Name) != nil && c.scope.lookup(id.Name).Type == InputType {
			// input.key alone does not need the cells built.
			o := c.scope.lookup(id.Name)
			c.prog.Uses[id] = o
			if c.static {
				c.errorf(id.NamePos, "static initializer cannot refer to input")
			}
			xt = InputType
			c.prog.Types[id] = xt
		} else {
			xt = c.expr(x.X, nil, false)
		}
		if xt.Kind == value.Invalid {
			return xt
		}
		if xt.Kind != value.Tuple {
			c.errorf(x.Sel.NamePos, "%s.%s undefined (type %v is not a tuple)", describe(x.X), x.Sel.Name, xt)
			return value.InvalidType
		}
		i := xt.FieldIndex(x.Sel.Name)
		if i < 0 {
			c.errorf(x.Sel.NamePos, "%s.%s undefined (type %v has no field %s)", describe(x.X), x.Sel.Name, xt, x.Sel.Name)
			return value.InvalidType
		}
		if xt == InputType && i == InputCells {
			c.prog.UsesCells = true
		}
		return xt.Fields[i].Type
	}
	c.errorf(x.Pos(), "unexpected expression")
	return value.InvalidType
}

func (c *checker) intArg(x syntax.Expr, what string) {
	t := c.expr(x, nil, false)
	if t.Kind != value.Invalid && t.Kind != value.Int {
		c.errorf(x.Pos(), "%s must be int, not %v", what, t)
	}
}

func (c *checker) ident(x *syntax.Ident) *value.Type {
	if x.Name == "_" {
		c.errorf(x.NamePos, "cannot use _ as a value")
		return value.InvalidType
	}
	o := c.scope.lookup(x.Name)
	if o == nil {
		c.errorf(x.NamePos, "undefined: %s", x.Name)
		return value.InvalidType
	}
	c.prog.Uses[x] = o
	switch o.Kind {
	case VarObj:
		if c.static {
			c.errorf(x.NamePos, "static initializer cannot refer to %s, which is not static", x.Name)
		}
		if o.Type == InputType {
			// input used whole: assume its cells are needed; a selector
			// input.key alone does not get here.
			c.prog.UsesCells = true
		}
		return o.Type
	case StaticObj:
		return o.Type
	case hiddenObj:
		c.errorf(x.NamePos, "%s is quantified by all and has no value in the body", x.Name)
	case TableObj:
		c.errorf(x.NamePos, "table %s can only be used in emit", x.Name)
	case FuncObj, BuiltinObj:
		c.errorf(x.NamePos, "function %s must be called", x.Name)
	case TypeObj:
		c.errorf(x.NamePos, "type %s is not an expression", x.Name)
	}
	return value.InvalidType
}

// literal parses a literal once, so that it runs as a constant.
func (c *checker) literal(x *syntax.BasicLit) *value.Type {
	bad := func(what string) *value.Type {
		c.errorf(x.ValuePos, "invalid %s literal %s", what, x.Value)
		return value.InvalidType
	}
	switch x.Kind {
	case syntax.TRUE, syntax.FALSE:
		c.prog.Consts[x] = value.MakeBool(x.Kind == syntax.TRUE)
		return value.BoolType
	case syntax.INT:
		if x.Value[0] == '\'' {
			s, err := strconv.Unquote(x.Value)
			if err != nil || utf8.RuneCountInString(s) != 1 {
				return bad("character")
			}
			r, _ := utf8.DecodeRuneInString(s)
			c.prog.Consts[x] = value.MakeInt(int64(r))
			return value.IntType
		}
		n, err := strconv.ParseInt(x.Value, 0, 64)
		if err != nil {
			// Allow the most negative int to be written -9223372036854775808.
			u, uerr := strconv.ParseUint(x.Value, 0, 64)
			if uerr != nil || u != 1<<63 {
				return bad("integer")
			}
			n = math.MinInt64
		}
		c.prog.Consts[x] = value.MakeInt(n)
		return value.IntType
	case syntax.FLOAT:
		f, err := strconv.ParseFloat(x.Value, 64)
		if err != nil {
			return bad("float")
		}
		c.prog.Consts[x] = value.MakeFloat(f)
		return value.FloatType
	case syntax.STRING:
		s, err := strconv.Unquote(x.Value)
		if err != nil {
			return bad("string")
		}
		c.prog.Consts[x] = value.MakeString(s)
		return value.StringType
	case syntax.BYTES:
		s, err := strconv.Unquote(x.Value[1:])
		if err != nil {
			return bad("bytes")
		}
		if x.Value[0] == 'X' {
			b, err := hex.DecodeString(s)
			if err != nil {
				return bad("hex bytes")
			}
			s = string(b)
		}
		c.prog.Consts[x] = value.MakeString(s)
		return value.BytesType
	case syntax.TIME:
		s, err := strconv.Unquote(x.Value[1:])
		if err != nil {
			return bad("time")
		}
		t, ok := ParseTime(s)
		if !ok {
			c.errorf(x.ValuePos, "invalid time literal %s (want RFC 3339, e.g. T\"2006-01-02T15:04:05Z\")", x.Value)
			return value.InvalidType
		}
		c.prog.Consts[x] = value.MakeInt(t)
		return value.TimeType
	}
	return bad("unknown")
}

func (c *checker) composite(x *syntax.CompositeLit, hint *value.Type) *value.Type {
	if hint == nil || hint.Kind == value.Invalid {
		return c.inferComposite(x, hint)
	}
	switch hint.Kind {
	case value.Array:
		for _, e := range x.Elems {
			if kv, ok := e.(*syntax.KeyValue); ok {
				c.errorf(kv.Pos(), "key: value in an array literal")
				continue
			}
			t := c.expr(e, hint.Elem, false)
			c.assignable(e.Pos(), t, hint.Elem, "array literal")
		}
		return hint
	case value.Map:
		for _, e := range x.Elems {
			kv, ok := e.(*syntax.KeyValue)
			if !ok {
				c.errorf(e.Pos(), "missing key in map literal")
				c.expr(e, nil, false)
				continue
			}
			kt := c.expr(kv.Key, hint.Key, false)
			c.assignable(kv.Key.Pos(), kt, hint.Key, "map literal key")
			vt := c.expr(kv.Value, hint.Elem, false)
			c.assignable(kv.Value.Pos(), vt, hint.Elem, "map literal value")
		}
		return hint
	case value.Tuple:
		if x.IsMap {
			c.errorf(x.Lbrace, "key: value in a tuple literal")
			return value.InvalidType
		}
		if len(x.Elems) != len(hint.Fields) {
			c.errorf(x.Lbrace, "tuple literal has %s, type %v has %s", nOf(len(x.Elems), "value", "values"), hint, nOf(len(hint.Fields), "field", "fields"))
		}
		for i, e := range x.Elems {
			var ft *value.Type
			if i < len(hint.Fields) {
				ft = hint.Fields[i].Type
			}
			t := c.expr(e, ft, false)
			if ft != nil {
				c.assignable(e.Pos(), t, ft, "tuple literal")
			}
		}
		return hint
	}
	c.errorf(x.Lbrace, "composite literal cannot have type %v", hint)
	for _, e := range x.Elems {
		c.expr(e, nil, false)
	}
	return value.InvalidType
}

// inferComposite types a literal that has no expected type: an array from
// its first element, a map from its first pair.
func (c *checker) inferComposite(x *syntax.CompositeLit, hint *value.Type) *value.Type {
	if len(x.Elems) == 0 {
		if hint == nil {
			c.errorf(x.Lbrace, "cannot tell the type of an empty literal here; declare it: name: T = {};")
		}
		return value.InvalidType
	}
	if x.IsMap {
		kv, ok := x.Elems[0].(*syntax.KeyValue)
		if !ok {
			c.errorf(x.Elems[0].Pos(), "missing key in map literal")
			return value.InvalidType
		}
		kt := c.expr(kv.Key, nil, false)
		vt := c.expr(kv.Value, nil, false)
		if kt.Kind == value.Invalid || vt.Kind == value.Invalid {
			return value.InvalidType
		}
		if !kt.IsBasic() {
			c.errorf(kv.Key.Pos(), "map key must have a basic type, not %v", kt)
			return value.InvalidType
		}
		t := value.MapOf(kt, vt)
		return c.composite(&syntax.CompositeLit{Lbrace: x.Lbrace, Elems: x.Elems[1:], IsMap: true}, t)
	}
	et := c.expr(x.Elems[0], nil, false)
	if et.Kind == value.Invalid {
		return value.InvalidType
	}
	t := value.ArrayOf(et)
	c.composite(&syntax.CompositeLit{Lbrace: x.Lbrace, Elems: x.Elems[1:]}, t)
	return t
}

func (c *checker) binary(x *syntax.BinaryExpr) *value.Type {
	lt := c.expr(x.X, nil, false)
	hint := lt
	if lt.Kind == value.Time && (x.Op == syntax.ADD || x.Op == syntax.SUB) {
		hint = nil
	}
	rt := c.expr(x.Y, hint, false)
	if containsInvalid(lt) || containsInvalid(rt) {
		return value.InvalidType
	}
	switch x.Op {
	case syntax.LAND, syntax.LOR:
		if lt.Kind != value.Bool || rt.Kind != value.Bool {
			c.errorf(x.OpPos, "operator %s needs bool operands, not %v and %v", x.Op, lt, rt)
			return value.InvalidType
		}
		return value.BoolType
	case syntax.EQL, syntax.NEQ:
		if !value.Identical(lt, rt) {
			c.errorf(x.OpPos, "mismatched types %v and %v for %s", lt, rt, x.Op)
			return value.InvalidType
		}
		return value.BoolType
	case syntax.LSS, syntax.LEQ, syntax.GTR, syntax.GEQ:
		if !value.Identical(lt, rt) {
			c.errorf(x.OpPos, "mismatched types %v and %v for %s", lt, rt, x.Op)
			return value.InvalidType
		}
		if !lt.IsOrdered() {
			c.errorf(x.OpPos, "operator %s not defined on %v", x.Op, lt)
			return value.InvalidType
		}
		return value.BoolType
	}
	return c.arith(x.OpPos, x.Op, lt, rt)
}

// arith checks an arithmetic or bitwise operator and returns its result
// type. Operands must have identical types (no implicit int-float mixing);
// the exceptions are time ± int and time - time.
func (c *checker) arith(pos syntax.Pos, op syntax.Token, lt, rt *value.Type) *value.Type {
	if containsInvalid(lt) || containsInvalid(rt) {
		return value.InvalidType
	}
	switch {
	case lt.Kind == value.Time && rt.Kind == value.Int && (op == syntax.ADD || op == syntax.SUB):
		return value.TimeType
	case lt.Kind == value.Int && rt.Kind == value.Time && op == syntax.ADD:
		return value.TimeType
	case lt.Kind == value.Time && rt.Kind == value.Time && op == syntax.SUB:
		return value.IntType
	}
	if !value.Identical(lt, rt) {
		c.errorf(pos, "mismatched types %v and %v for %s", lt, rt, op)
		return value.InvalidType
	}
	ok := false
	switch op {
	case syntax.ADD:
		ok = lt.IsNumeric() || lt.Kind == value.String || lt.Kind == value.Bytes || lt.Kind == value.Array
	case syntax.SUB, syntax.MUL, syntax.QUO:
		ok = lt.IsNumeric()
	case syntax.REM, syntax.AND, syntax.OR, syntax.XOR, syntax.SHL, syntax.SHR:
		ok = lt.Kind == value.Int
	}
	if !ok {
		c.errorf(pos, "operator %s not defined on %v", op, lt)
		return value.InvalidType
	}
	return lt
}

// lvalue checks the target of an assignment and returns its type.
func (c *checker) lvalue(x syntax.Expr) *value.Type {
	switch x := unparen(x).(type) {
	case *syntax.Ident:
		t := c.expr(x, nil, false)
		if o := c.prog.Uses[x]; o != nil && o.ReadOnly {
			c.errorf(x.NamePos, "cannot assign to %s (%s)", x.Name, readOnlyWhy(o))
		}
		return t
	case *syntax.IndexExpr, *syntax.SelectorExpr:
		t := c.expr(x, nil, false)
		if ix, ok := x.(*syntax.IndexExpr); ok {
			if xt := c.prog.Types[ix.X]; xt != nil && (xt.Kind == value.String || xt.Kind == value.Bytes) {
				c.errorf(ix.Lbrack, "cannot assign to an element of %v %s", xt, describe(ix.X))
			}
		}
		if root := rootIdent(x); root != nil {
			if o := c.prog.Uses[root]; o != nil && o.ReadOnly {
				c.errorf(x.Pos(), "cannot assign to part of %s (%s)", root.Name, readOnlyWhy(o))
			}
		}
		return t
	}
	c.errorf(x.Pos(), "cannot assign to %s", describe(x))
	c.expr(x, nil, true)
	return value.InvalidType
}

func readOnlyWhy(o *Object) string {
	if o.Kind == StaticObj {
		return "statics are read-only"
	}
	return "the input is read-only"
}

// rootIdent returns the variable an index or selector chain starts from.
func rootIdent(x syntax.Expr) *syntax.Ident {
	for {
		switch e := x.(type) {
		case *syntax.Ident:
			return e
		case *syntax.IndexExpr:
			x = e.X
		case *syntax.SelectorExpr:
			x = e.X
		case *syntax.ParenExpr:
			x = e.X
		default:
			return nil
		}
	}
}
