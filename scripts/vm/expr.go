package vm

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// expr compiles an expression.
func (c *compiler) expr(x syntax.Expr) eval {
	switch x := x.(type) {
	case *syntax.Ident:
		return c.load(c.prog.Uses[x])
	case *syntax.BasicLit:
		v := c.prog.Consts[x]
		return func(*Machine) value.Value { return v }
	case *syntax.ParenExpr:
		return c.expr(x.X)
	case *syntax.CompositeLit:
		return c.composite(x)
	case *syntax.UnaryExpr:
		return c.unary(x)
	case *syntax.BinaryExpr:
		return c.binary(x)
	case *syntax.CallExpr:
		return c.call(x)
	case *syntax.IndexExpr:
		return c.index(x)
	case *syntax.SliceExpr:
		return c.slice(x)
	case *syntax.SelectorExpr:
		return c.selector(x)
	}
	panic("vm: unexpected expression")
}

// cond compiles a bool expression to a closure returning a Go bool, with
// the common comparisons specialized.
func (c *compiler) cond(x syntax.Expr) func(*Machine) bool {
	x = unparen(x)
	switch e := x.(type) {
	case *syntax.UnaryExpr:
		if e.Op == syntax.NOT {
			inner := c.cond(e.X)
			return func(m *Machine) bool { return !inner(m) }
		}
	case *syntax.BinaryExpr:
		switch e.Op {
		case syntax.LAND:
			a, b := c.cond(e.X), c.cond(e.Y)
			return func(m *Machine) bool { return a(m) && b(m) }
		case syntax.LOR:
			a, b := c.cond(e.X), c.cond(e.Y)
			return func(m *Machine) bool { return a(m) || b(m) }
		}
		if f := c.compare(e); f != nil {
			return f
		}
	}
	v := c.expr(x)
	return func(m *Machine) bool { return v(m).N != 0 }
}

// intOperand compiles an int or time expression to a closure returning an
// int64, reading variables, constants and len(input.cells) directly.
func (c *compiler) intOperand(x syntax.Expr) func(*Machine) int64 {
	switch e := unparen(x).(type) {
	case *syntax.BasicLit:
		n := c.prog.Consts[e].N
		return func(*Machine) int64 { return n }
	case *syntax.Ident:
		if o := c.prog.Uses[e]; o.Kind == check.VarObj {
			s := o.Slot
			if o.Global {
				return func(m *Machine) int64 { return m.globals[s].N }
			}
			return func(m *Machine) int64 { return m.stack[m.fp+s].N }
		}
	case *syntax.CallExpr:
		if id, ok := e.Fun.(*syntax.Ident); ok && id.Name == "len" && c.prog.Uses[id].Kind == check.BuiltinObj && c.isInputCells(e.Args[0]) {
			return func(m *Machine) int64 { return int64(len(m.cells)) }
		}
	}
	f := c.expr(x)
	return func(m *Machine) int64 { return f(m).N }
}

// compare returns a specialized closure for comparisons of ints, times and
// strings, or nil.
func (c *compiler) compare(e *syntax.BinaryExpr) func(*Machine) bool {
	t := c.typeOf(e.X)
	if t == nil || e.Op.Precedence() != 3 {
		return nil
	}
	switch t.Kind {
	case value.Int, value.Time:
		a, b := c.intOperand(e.X), c.intOperand(e.Y)
		switch e.Op {
		case syntax.EQL:
			return func(m *Machine) bool { return a(m) == b(m) }
		case syntax.NEQ:
			return func(m *Machine) bool { return a(m) != b(m) }
		case syntax.LSS:
			return func(m *Machine) bool { return a(m) < b(m) }
		case syntax.LEQ:
			return func(m *Machine) bool { return a(m) <= b(m) }
		case syntax.GTR:
			return func(m *Machine) bool { return a(m) > b(m) }
		case syntax.GEQ:
			return func(m *Machine) bool { return a(m) >= b(m) }
		}
	case value.String, value.Bytes:
		a, b := c.expr(e.X), c.expr(e.Y)
		if lit, ok := unparen(e.Y).(*syntax.BasicLit); ok {
			k := c.prog.Consts[lit].S
			switch e.Op {
			case syntax.EQL:
				return func(m *Machine) bool { return a(m).S == k }
			case syntax.NEQ:
				return func(m *Machine) bool { return a(m).S != k }
			}
		}
		switch e.Op {
		case syntax.EQL:
			return func(m *Machine) bool { return a(m).S == b(m).S }
		case syntax.NEQ:
			return func(m *Machine) bool { return a(m).S != b(m).S }
		case syntax.LSS:
			return func(m *Machine) bool { return a(m).S < b(m).S }
		case syntax.LEQ:
			return func(m *Machine) bool { return a(m).S <= b(m).S }
		case syntax.GTR:
			return func(m *Machine) bool { return a(m).S > b(m).S }
		case syntax.GEQ:
			return func(m *Machine) bool { return a(m).S >= b(m).S }
		}
	}
	return nil
}

func boolEval(f func(*Machine) bool) eval {
	return func(m *Machine) value.Value {
		if f(m) {
			return value.Value{N: 1}
		}
		return value.Value{}
	}
}

func (c *compiler) binary(e *syntax.BinaryExpr) eval {
	switch e.Op {
	case syntax.LAND, syntax.LOR:
		return boolEval(c.cond(e))
	case syntax.EQL, syntax.NEQ, syntax.LSS, syntax.LEQ, syntax.GTR, syntax.GEQ:
		if f := c.compare(e); f != nil {
			return boolEval(f)
		}
		t := c.typeOf(e.X)
		a, b := c.expr(e.X), c.expr(e.Y)
		op := e.Op
		return func(m *Machine) value.Value {
			r := value.Compare(t, a(m), b(m))
			var ok bool
			switch op {
			case syntax.EQL:
				ok = r == 0
			case syntax.NEQ:
				ok = r != 0
			case syntax.LSS:
				ok = r < 0
			case syntax.LEQ:
				ok = r <= 0
			case syntax.GTR:
				ok = r > 0
			default:
				ok = r >= 0
			}
			return value.MakeBool(ok)
		}
	}
	lt, rt := c.typeOf(e.X), c.typeOf(e.Y)
	a, b := c.expr(e.X), c.expr(e.Y)
	if lt.Kind == value.Int && rt.Kind == value.Int {
		switch e.Op {
		case syntax.ADD:
			return func(m *Machine) value.Value { return value.Value{N: a(m).N + b(m).N} }
		case syntax.SUB:
			return func(m *Machine) value.Value { return value.Value{N: a(m).N - b(m).N} }
		case syntax.MUL:
			return func(m *Machine) value.Value { return value.Value{N: a(m).N * b(m).N} }
		}
	}
	f := c.binop(e.Op, lt, rt, e.OpPos)
	return func(m *Machine) value.Value {
		x := a(m)
		return f(m, x, b(m))
	}
}

// binop returns the arithmetic operator op for operands of types lt and rt,
// as the checker allowed it.
func (c *compiler) binop(op syntax.Token, lt, rt *value.Type, pos syntax.Pos) func(m *Machine, a, b value.Value) value.Value {
	switch {
	case lt.Kind == value.Float:
		switch op {
		case syntax.ADD:
			return func(_ *Machine, a, b value.Value) value.Value { return value.MakeFloat(a.Float() + b.Float()) }
		case syntax.SUB:
			return func(_ *Machine, a, b value.Value) value.Value { return value.MakeFloat(a.Float() - b.Float()) }
		case syntax.MUL:
			return func(_ *Machine, a, b value.Value) value.Value { return value.MakeFloat(a.Float() * b.Float()) }
		case syntax.QUO:
			return func(_ *Machine, a, b value.Value) value.Value { return value.MakeFloat(a.Float() / b.Float()) }
		}
	case lt.Kind == value.Int || lt.Kind == value.Time:
		// time ± int, int + time and time - time are plain arithmetic on
		// microseconds.
		switch op {
		case syntax.ADD:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N + b.N} }
		case syntax.SUB:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N - b.N} }
		case syntax.MUL:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N * b.N} }
		case syntax.QUO:
			return func(m *Machine, a, b value.Value) value.Value {
				if b.N == 0 {
					m.fail(pos, "integer division by zero")
				}
				return value.Value{N: a.N / b.N}
			}
		case syntax.REM:
			return func(m *Machine, a, b value.Value) value.Value {
				if b.N == 0 {
					m.fail(pos, "integer division by zero")
				}
				return value.Value{N: a.N % b.N}
			}
		case syntax.AND:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N & b.N} }
		case syntax.OR:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N | b.N} }
		case syntax.XOR:
			return func(_ *Machine, a, b value.Value) value.Value { return value.Value{N: a.N ^ b.N} }
		case syntax.SHL, syntax.SHR:
			left := op == syntax.SHL
			return func(m *Machine, a, b value.Value) value.Value {
				if b.N < 0 {
					m.fail(pos, "negative shift count %d", b.N)
				}
				if left {
					return value.Value{N: a.N << uint64(b.N)}
				}
				return value.Value{N: a.N >> uint64(b.N)}
			}
		}
	case lt.Kind == value.String || lt.Kind == value.Bytes:
		return func(m *Machine, a, b value.Value) value.Value {
			m.alloc(int64(len(a.S) + len(b.S)))
			return value.Value{S: a.S + b.S}
		}
	case lt.Kind == value.Array:
		// Concatenation makes a new array: arrays are shared by
		// reference, so neither operand may be extended in place.
		return func(m *Machine, a, b value.Value) value.Value {
			x, y := a.Array().Elems, b.Array().Elems
			m.alloc(int64(len(x)+len(y)) * 40)
			out := make([]value.Value, 0, len(x)+len(y))
			out = append(append(out, x...), y...)
			return value.Value{R: &value.ArrayVal{Elems: out}}
		}
	}
	panic("vm: unexpected operator " + op.String() + " on " + lt.String())
}

func (c *compiler) unary(e *syntax.UnaryExpr) eval {
	x := c.expr(e.X)
	t := c.typeOf(e.X)
	switch e.Op {
	case syntax.ADD:
		return x
	case syntax.SUB:
		if t.Kind == value.Float {
			return func(m *Machine) value.Value { return value.MakeFloat(-x(m).Float()) }
		}
		return func(m *Machine) value.Value { return value.Value{N: -x(m).N} }
	case syntax.NOT:
		return func(m *Machine) value.Value { return value.Value{N: x(m).N ^ 1} }
	case syntax.TILDE:
		return func(m *Machine) value.Value { return value.Value{N: ^x(m).N} }
	}
	panic("vm: unexpected unary operator")
}

func (c *compiler) composite(e *syntax.CompositeLit) eval {
	t := c.typeOf(e)
	elems := make([]eval, len(e.Elems))
	keys := make([]eval, len(e.Elems))
	for i, x := range e.Elems {
		if kv, ok := x.(*syntax.KeyValue); ok {
			keys[i] = c.expr(kv.Key)
			elems[i] = c.expr(kv.Value)
		} else {
			elems[i] = c.expr(x)
		}
	}
	size := int64(len(elems))*48 + 48
	switch t.Kind {
	case value.Map:
		return func(m *Machine) value.Value {
			m.alloc(size)
			mp := value.NewMap()
			for i := range elems {
				k := keys[i](m)
				mp.Set(k, elems[i](m))
			}
			return value.Value{R: mp}
		}
	case value.Tuple:
		return func(m *Machine) value.Value {
			m.alloc(size)
			f := make([]value.Value, len(elems))
			for i, x := range elems {
				f[i] = x(m)
			}
			return value.Value{R: &value.TupleVal{Fields: f}}
		}
	}
	return func(m *Machine) value.Value {
		m.alloc(size)
		a := make([]value.Value, len(elems))
		for i, x := range elems {
			a[i] = x(m)
		}
		return value.Value{R: &value.ArrayVal{Elems: a}}
	}
}

// isInput reports whether x is the predeclared input.
func (c *compiler) isInput(x syntax.Expr) bool {
	id, ok := unparen(x).(*syntax.Ident)
	return ok && c.prog.Uses[id] != nil && c.prog.Uses[id].Type == check.InputType
}

// isInputCells reports whether x is input.cells, which is always the
// machine's cell buffer: no part of input can be assigned.
func (c *compiler) isInputCells(x syntax.Expr) bool {
	sel, ok := unparen(x).(*syntax.SelectorExpr)
	return ok && c.isInput(sel.X) && sel.Sel.Name == "cells"
}

func (c *compiler) selector(e *syntax.SelectorExpr) eval {
	f := c.typeOf(e.X).FieldIndex(e.Sel.Name)
	if c.isInput(e.X) {
		return func(m *Machine) value.Value { return m.input.Fields[f] }
	}
	// input.cells[i].field reads the cell buffer directly.
	if ix, ok := unparen(e.X).(*syntax.IndexExpr); ok && c.isInputCells(ix.X) {
		i := c.intOperand(ix.Index)
		pos := ix.Lbrack
		return func(m *Machine) value.Value {
			n := i(m)
			if uint64(n) >= uint64(len(m.cells)) {
				m.fail(pos, "index %d out of range [0:%d]", n, len(m.cells))
			}
			return m.cellVals[4*n+int64(f)]
		}
	}
	// v.field for a variable v reads its slot directly.
	if id, ok := unparen(e.X).(*syntax.Ident); ok {
		if o := c.prog.Uses[id]; o.Kind == check.VarObj {
			s := o.Slot
			if o.Global {
				return func(m *Machine) value.Value { return m.globals[s].R.(*value.TupleVal).Fields[f] }
			}
			return func(m *Machine) value.Value { return m.stack[m.fp+s].R.(*value.TupleVal).Fields[f] }
		}
	}
	x := c.expr(e.X)
	return func(m *Machine) value.Value { return x(m).Tuple().Fields[f] }
}

func (c *compiler) index(e *syntax.IndexExpr) eval {
	x, ix := c.expr(e.X), c.expr(e.Index)
	pos := e.Lbrack
	t := c.typeOf(e.X)
	switch t.Kind {
	case value.Array:
		if c.isInputCells(e.X) {
			ix := c.intOperand(e.Index)
			return func(m *Machine) value.Value {
				i := ix(m)
				if uint64(i) >= uint64(len(m.cells)) {
					m.fail(pos, "index %d out of range [0:%d]", i, len(m.cells))
				}
				return m.cells[i]
			}
		}
		ixn := c.intOperand(e.Index)
		return func(m *Machine) value.Value {
			a := x(m).Array().Elems
			i := ixn(m)
			if uint64(i) >= uint64(len(a)) {
				m.fail(pos, "index %d out of range [0:%d]", i, len(a))
			}
			return a[i]
		}
	case value.Map:
		kt := t.Key
		return func(m *Machine) value.Value {
			mp := x(m).Map()
			k := ix(m)
			v, ok := mp.Get(k)
			if !ok {
				m.fail(pos, "key %s not in map", value.Format(kt, k))
			}
			return v
		}
	case value.Bytes:
		return func(m *Machine) value.Value {
			s := x(m).S
			i := ix(m).N
			if uint64(i) >= uint64(len(s)) {
				m.fail(pos, "index %d out of range [0:%d]", i, len(s))
			}
			return value.Value{N: int64(s[i])}
		}
	}
	// Strings index by character, as in Sawzall.
	return func(m *Machine) value.Value {
		s := x(m).S
		i := ix(m).N
		m.work(int(min(i, int64(len(s)))))
		r, ok := runeAt(s, i)
		if !ok {
			m.fail(pos, "index %d out of range [0:%d]", i, utf8.RuneCountInString(s))
		}
		return value.Value{N: int64(r)}
	}
}

// runeAt returns the i-th character of s.
func runeAt(s string, i int64) (rune, bool) {
	if i < 0 {
		return 0, false
	}
	for _, r := range s {
		if i == 0 {
			return r, true
		}
		i--
	}
	return 0, false
}

// runeOffset returns the byte offset of the i-th character of s (len(s) for
// i == number of characters), or -1.
func runeOffset(s string, i int64) int {
	if i < 0 {
		return -1
	}
	n := int64(0)
	for off := range s {
		if n == i {
			return off
		}
		n++
	}
	if n == i {
		return len(s)
	}
	return -1
}

func (c *compiler) slice(e *syntax.SliceExpr) eval {
	x := c.expr(e.X)
	t := c.typeOf(e.X)
	var lo, hi eval
	if e.Lo != nil {
		lo = c.expr(e.Lo)
	}
	if e.Hi != nil {
		hi = c.expr(e.Hi)
	}
	pos := e.Lbrack
	// bounds evaluates the bounds against a length n.
	bounds := func(m *Machine, n int64) (int64, int64) {
		l, h := int64(0), n
		if lo != nil {
			l = lo(m).N
		}
		if hi != nil {
			h = hi(m).N
		}
		if l < 0 || h > n || l > h {
			m.fail(pos, "slice bounds [%d:%d] out of range [0:%d]", l, h, n)
		}
		return l, h
	}
	switch t.Kind {
	case value.Array:
		return func(m *Machine) value.Value {
			a := x(m).Array().Elems
			l, h := bounds(m, int64(len(a)))
			return value.Value{R: &value.ArrayVal{Elems: a[l:h:h]}}
		}
	case value.Bytes:
		return func(m *Machine) value.Value {
			s := x(m).S
			l, h := bounds(m, int64(len(s)))
			return value.Value{S: s[l:h]}
		}
	}
	return func(m *Machine) value.Value {
		s := x(m).S
		m.work(len(s))
		if isASCII(s) {
			l, h := bounds(m, int64(len(s)))
			return value.Value{S: s[l:h]}
		}
		l, h := bounds(m, int64(utf8.RuneCountInString(s)))
		return value.Value{S: s[runeOffset(s, l):runeOffset(s, h)]}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// call compiles a call of a user function, an intrinsic or a conversion.
func (c *compiler) call(e *syntax.CallExpr) eval {
	id := e.Fun.(*syntax.Ident)
	o := c.prog.Uses[id]
	switch o.Kind {
	case check.TypeObj:
		return c.conversion(e, o.Type)
	case check.BuiltinObj:
		return c.builtin(e, id.Name)
	}
	fc := c.funcs[o.Func.Index]
	args := make([]eval, len(e.Args))
	for i, a := range e.Args {
		args[i] = c.expr(a)
	}
	pos := e.Lparen
	return func(m *Machine) value.Value {
		m.tick(pos)
		if m.depth >= m.limits.Depth {
			m.pos = pos
			m.limit("call depth", strconv.Itoa(m.limits.Depth))
		}
		base := m.sp
		top := base + fc.frameSize
		if top > cap(m.stack) {
			m.alloc(int64(top-cap(m.stack)) * 40)
			grown := make([]value.Value, top, 2*top)
			copy(grown, m.stack)
			m.stack = grown
		}
		m.stack = m.stack[:max(len(m.stack), top)]
		// Arguments are evaluated in the caller's frame; nested calls in
		// them use the stack above top.
		m.sp = top
		for i, a := range args {
			v := a(m)
			m.stack[base+i] = v
		}
		oldFP := m.fp
		m.fp = base
		m.depth++
		m.goStack += fc.stack
		if m.goStack > maxGoStack {
			m.limit("stack", fmt.Sprintf("%d bytes", maxGoStack))
		}
		m.alloc(0)
		m.ret = value.Value{}
		run(fc.body, m)
		r := m.ret
		m.ret = value.Value{}
		m.goStack -= fc.stack
		m.depth--
		m.fp, m.sp = oldFP, base
		return r
	}
}
