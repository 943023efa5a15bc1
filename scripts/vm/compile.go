package vm

import (
	"reflect"

	"github.com/tabuladb/tabula/scripts/agg"
	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// ctl says how a statement ended.
type ctl uint8

const (
	ctlNext ctl = iota
	ctlBreak
	ctlContinue
	ctlReturn
)

type (
	exec func(m *Machine) ctl
	eval func(m *Machine) value.Value
)

// Program is a compiled script.
type Program struct {
	statics    []exec // static initializers, run once per Machine
	body       []exec // run for each row
	numGlobals int
	numStatics int
	usesCells  bool
	usesKeep   bool
	specs      []*agg.Spec
}

// Specs returns the specs of the program's tables, in declaration order.
func (p *Program) Specs() []*agg.Spec { return p.specs }

// IsFilter reports whether the program emits to keep.
func (p *Program) IsFilter() bool { return p.usesKeep }

type funcCode struct {
	name      string
	frameSize int
	nparams   int
	body      exec
	// stack is the Go stack a call may take, from the nesting of the body.
	stack int64
}

type compiler struct {
	prog  *check.Program
	funcs []*funcCode
	out   *Program
}

// Compile compiles a checked program.
func Compile(prog *check.Program) *Program {
	c := &compiler{prog: prog, out: &Program{
		numGlobals: prog.NumGlobals,
		numStatics: prog.NumStatics,
		usesCells:  prog.UsesCells,
		usesKeep:   prog.UsesKeep,
	}}
	for _, t := range prog.Tables {
		c.out.specs = append(c.out.specs, &agg.Spec{
			Name: t.Name, Kind: t.Kind, Param: t.Param, Index: t.Index, Elem: t.Elem, Weight: t.Weight,
		})
	}
	for _, f := range prog.Funcs {
		c.funcs = append(c.funcs, &funcCode{name: f.Name, frameSize: f.FrameSize, nparams: len(f.Params)})
	}
	for _, s := range prog.File.Stmts {
		if d, ok := s.(*syntax.DeclStmt); ok && d.Static {
			c.out.statics = append(c.out.statics, c.stmt(s))
			continue
		}
		if e := c.stmt(s); e != nil {
			c.out.body = append(c.out.body, e)
		}
	}
	return c.out
}

func (c *compiler) typeOf(x syntax.Expr) *value.Type { return c.prog.Types[x] }

// load and store access a variable's slot.
func (c *compiler) load(o *check.Object) eval {
	s := o.Slot
	switch {
	case o.Kind == check.StaticObj:
		return func(m *Machine) value.Value { return m.statics[s] }
	case o.Global:
		return func(m *Machine) value.Value { return m.globals[s] }
	}
	return func(m *Machine) value.Value { return m.stack[m.fp+s] }
}

func (c *compiler) store(o *check.Object) func(m *Machine, v value.Value) {
	s := o.Slot
	switch {
	case o.Kind == check.StaticObj:
		return func(m *Machine, v value.Value) { m.statics[s] = v }
	case o.Global:
		return func(m *Machine, v value.Value) { m.globals[s] = v }
	}
	return func(m *Machine, v value.Value) { m.stack[m.fp+s] = v }
}

// block compiles a statement list into one statement.
func (c *compiler) block(list []syntax.Stmt) exec {
	var code []exec
	for _, s := range list {
		if e := c.stmt(s); e != nil {
			code = append(code, e)
		}
	}
	switch len(code) {
	case 0:
		return nil
	case 1:
		return code[0]
	case 2:
		a, b := code[0], code[1]
		return func(m *Machine) ctl {
			if r := a(m); r != ctlNext {
				return r
			}
			return b(m)
		}
	}
	return func(m *Machine) ctl {
		for _, s := range code {
			if r := s(m); r != ctlNext {
				return r
			}
		}
		return ctlNext
	}
}

// run executes s, which may be nil.
func run(s exec, m *Machine) ctl {
	if s == nil {
		return ctlNext
	}
	return s(m)
}

// stmt compiles one statement; nil means it does nothing at run time.
func (c *compiler) stmt(s syntax.Stmt) exec {
	switch s := s.(type) {
	case nil, *syntax.EmptyStmt, *syntax.TypeDecl:
		return nil
	case *syntax.DeclStmt:
		return c.decl(s)
	case *syntax.ExprStmt:
		x := c.expr(s.X)
		pos := s.Pos()
		return func(m *Machine) ctl {
			m.tick(pos)
			x(m)
			return ctlNext
		}
	case *syntax.AssignStmt:
		return c.assign(s)
	case *syntax.IncDecStmt:
		op := syntax.ADD
		if !s.Inc {
			op = syntax.SUB
		}
		t := c.typeOf(s.X)
		one := value.MakeInt(1)
		if t.Kind == value.Float {
			one = value.MakeFloat(1)
		}
		return c.update(s.X, s.OpPos, op, func(*Machine) value.Value { return one }, nil, t)
	case *syntax.Block:
		return c.block(s.Stmts)
	case *syntax.IfStmt:
		return c.ifStmt(s)
	case *syntax.WhileStmt:
		return c.loop(s.While, nil, s.Cond, nil, s.Body)
	case *syntax.ForStmt:
		return c.loop(s.For, s.Init, s.Cond, s.Post, s.Body)
	case *syntax.WhenStmt:
		return c.when(s)
	case *syntax.BranchStmt:
		r := ctlBreak
		if s.Tok == syntax.CONTINUE {
			r = ctlContinue
		}
		return func(*Machine) ctl { return r }
	case *syntax.ReturnStmt:
		pos := s.Return
		if s.Result == nil {
			return func(m *Machine) ctl {
				m.tick(pos)
				return ctlReturn
			}
		}
		x := c.expr(s.Result)
		return func(m *Machine) ctl {
			m.tick(pos)
			m.ret = x(m)
			return ctlReturn
		}
	case *syntax.EmitStmt:
		return c.emit(s)
	}
	panic("vm: unexpected statement")
}

func (c *compiler) decl(d *syntax.DeclStmt) exec {
	o := c.prog.Defs[d.Name]
	if o == nil {
		return nil
	}
	switch o.Kind {
	case check.FuncObj:
		c.function(o.Func)
		return nil
	case check.TableObj, check.TypeObj:
		return nil
	}
	set := c.store(o)
	pos := d.Name.NamePos
	if d.Init == nil {
		t := o.Type
		if t.IsBasic() {
			zero := value.Zero(t)
			return func(m *Machine) ctl {
				m.tick(pos)
				set(m, zero)
				return ctlNext
			}
		}
		return func(m *Machine) ctl {
			m.tick(pos)
			set(m, value.Zero(t))
			return ctlNext
		}
	}
	x := c.expr(d.Init)
	if o.Global && o.Kind == check.VarObj {
		s := o.Slot
		return func(m *Machine) ctl {
			m.tick(pos)
			m.globals[s] = x(m)
			return ctlNext
		}
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		set(m, x(m))
		return ctlNext
	}
}

func (c *compiler) function(f *check.Func) {
	fc := c.funcs[f.Index]
	fc.body = c.block(f.Decl.Body.Stmts)
	fc.stack = int64(nesting(f.Decl.Body)+4) * stackPerLevel
}

func (c *compiler) ifStmt(s *syntax.IfStmt) exec {
	cond := c.cond(s.Cond)
	then, els := c.stmt(s.Then), c.stmt(s.Else)
	pos := s.If
	if els == nil {
		if then == nil {
			return func(m *Machine) ctl {
				m.tick(pos)
				cond(m)
				return ctlNext
			}
		}
		return func(m *Machine) ctl {
			m.tick(pos)
			if cond(m) {
				return then(m)
			}
			return ctlNext
		}
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		if cond(m) {
			return run(then, m)
		}
		return els(m)
	}
}

// loop compiles for and while statements.
func (c *compiler) loop(pos syntax.Pos, init syntax.Stmt, condx syntax.Expr, post syntax.Stmt, body syntax.Stmt) exec {
	in, p, b := c.stmt(init), c.stmt(post), c.stmt(body)
	cond := func(*Machine) bool { return true }
	if condx != nil {
		cond = c.cond(condx)
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		run(in, m)
		for cond(m) {
			m.tick(pos)
			switch run(b, m) {
			case ctlBreak:
				return ctlNext
			case ctlReturn:
				return ctlReturn
			}
			run(p, m)
		}
		return ctlNext
	}
}

func (c *compiler) emit(s *syntax.EmitStmt) exec {
	o := c.prog.Uses[s.Table]
	pos := s.Emit
	v := c.expr(s.Value)
	if o.Table.Kind == check.KeepTable {
		return func(m *Machine) ctl {
			m.tick(pos)
			if v(m).N != 0 {
				m.keep = true
			}
			return ctlNext
		}
	}
	k := o.Slot
	idx := make([]eval, len(s.Index))
	for i, x := range s.Index {
		idx[i] = c.expr(x)
	}
	w := func(*Machine) value.Value { return value.MakeInt(1) }
	if s.Weight != nil {
		w = c.expr(s.Weight)
	}
	emit := func(m *Machine, key []value.Value, x, wt value.Value) {
		grew := m.tables[k].Emit(key, x, wt)
		m.tableMem += grew
		if grew > 0 {
			m.alloc(0)
		}
	}
	switch len(idx) {
	case 0:
		return func(m *Machine) ctl {
			m.tick(pos)
			x := v(m)
			emit(m, nil, x, w(m))
			return ctlNext
		}
	case 1:
		i0 := idx[0]
		return func(m *Machine) ctl {
			m.tick(pos)
			var key [1]value.Value
			key[0] = i0(m)
			x := v(m)
			emit(m, key[:], x, w(m))
			return ctlNext
		}
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		key := make([]value.Value, len(idx))
		for i, e := range idx {
			key[i] = e(m)
		}
		x := v(m)
		emit(m, key, x, w(m))
		return ctlNext
	}
}

// nesting returns the depth of the syntax tree under n, which bounds how
// deep evaluating it recurses through closures.
func nesting(n syntax.Node) int {
	d := 0
	deeper := func(children ...syntax.Node) {
		for _, c := range children {
			if c != nil && !reflect.ValueOf(c).IsNil() {
				d = max(d, nesting(c))
			}
		}
	}
	switch n := n.(type) {
	case *syntax.Block:
		for _, s := range n.Stmts {
			deeper(s)
		}
	case *syntax.DeclStmt:
		deeper(n.Init)
	case *syntax.ExprStmt:
		deeper(n.X)
	case *syntax.AssignStmt:
		deeper(n.LHS, n.RHS)
	case *syntax.IncDecStmt:
		deeper(n.X)
	case *syntax.IfStmt:
		deeper(n.Cond, n.Then, n.Else)
	case *syntax.ForStmt:
		deeper(n.Init, n.Cond, n.Post, n.Body)
	case *syntax.WhileStmt:
		deeper(n.Cond, n.Body)
	case *syntax.WhenStmt:
		deeper(n.Cond, n.Body)
	case *syntax.ReturnStmt:
		deeper(n.Result)
	case *syntax.EmitStmt:
		deeper(n.Value, n.Weight)
		for _, x := range n.Index {
			deeper(x)
		}
	case *syntax.CompositeLit:
		for _, x := range n.Elems {
			deeper(x)
		}
	case *syntax.KeyValue:
		deeper(n.Key, n.Value)
	case *syntax.ParenExpr:
		deeper(n.X)
	case *syntax.UnaryExpr:
		deeper(n.X)
	case *syntax.BinaryExpr:
		deeper(n.X, n.Y)
	case *syntax.CallExpr:
		for _, x := range n.Args {
			deeper(x)
		}
	case *syntax.IndexExpr:
		deeper(n.X, n.Index)
	case *syntax.SliceExpr:
		deeper(n.X, n.Lo, n.Hi)
	case *syntax.SelectorExpr:
		deeper(n.X)
	}
	return d + 1
}
