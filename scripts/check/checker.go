package check

import (
	"fmt"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// maxErrors bounds the diagnostics of one check; beyond it they are noise.
const maxErrors = 100

type scope struct {
	parent *scope
	names  map[string]*Object
}

func (s *scope) lookup(name string) *Object {
	for ; s != nil; s = s.parent {
		if o, ok := s.names[name]; ok {
			return o
		}
	}
	return nil
}

type checker struct {
	prog  *Program
	errs  []*Error
	scope *scope
	// fn is the function being checked, nil at the top level.
	fn *Func
	// loops counts the enclosing for and while statements of the current
	// function, for break and continue.
	loops int
	// static is set while checking a static initializer, which may refer
	// only to statics.
	static bool
	// depth counts nested blocks; functions, tables, statics and types may
	// be declared only at depth 0.
	depth int
}

func newChecker(f *syntax.File) *checker {
	c := &checker{prog: &Program{
		File:   f,
		Types:  map[syntax.Expr]*value.Type{},
		Uses:   map[*syntax.Ident]*Object{},
		Defs:   map[*syntax.Ident]*Object{},
		Consts: map[*syntax.BasicLit]value.Value{},
		Whens:  map[*syntax.WhenStmt]*When{},
	}}
	universe := &scope{names: map[string]*Object{}}
	for name, t := range map[string]*value.Type{
		"int": value.IntType, "float": value.FloatType, "bool": value.BoolType, "string": value.StringType,
		"bytes": value.BytesType, "time": value.TimeType, "Cell": value.CellType,
	} {
		universe.names[name] = &Object{Kind: TypeObj, Name: name, Type: t}
	}
	for name := range builtins {
		universe.names[name] = &Object{Kind: BuiltinObj, Name: name}
	}
	universe.names["input"] = &Object{Kind: VarObj, Name: "input", Type: InputType, Global: true, Slot: InputSlot, ReadOnly: true}
	universe.names[KeepTable] = &Object{Kind: TableObj, Name: KeepTable, Slot: -1, Table: &Table{
		Name: KeepTable, Kind: KeepTable, Elem: value.Field{Type: value.BoolType},
	}}
	c.prog.NumGlobals = 1 // input
	c.scope = &scope{parent: universe, names: map[string]*Object{}}
	return c
}

func (c *checker) errorf(pos syntax.Pos, format string, args ...any) {
	if len(c.errs) >= maxErrors {
		return
	}
	c.errs = append(c.errs, &Error{pos, fmt.Sprintf(format, args...)})
}

// nOf renders a count with its noun in the right number: "1 index",
// "2 indexes" (one and many are the singular and plural forms).
func nOf(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (c *checker) push() { c.scope = &scope{parent: c.scope, names: map[string]*Object{}} }
func (c *checker) pop()  { c.scope = c.scope.parent }

// declare adds o to the current scope under id, reporting a redeclaration
// in the same scope.
func (c *checker) declare(id *syntax.Ident, o *Object) {
	o.Name, o.Pos = id.Name, id.NamePos
	if id.Name == "_" {
		c.prog.Defs[id] = o
		return
	}
	if prev, ok := c.scope.names[id.Name]; ok {
		c.errorf(id.NamePos, "%s redeclared in this block (previous declaration at %v)", id.Name, prev.Pos)
	}
	c.scope.names[id.Name] = o
	c.prog.Defs[id] = o
}

// newVar declares a variable and gives it a slot.
func (c *checker) newVar(id *syntax.Ident, t *value.Type) *Object {
	o := &Object{Kind: VarObj, Type: t}
	if c.fn != nil {
		o.Slot = c.fn.FrameSize
		c.fn.FrameSize++
	} else {
		o.Global = true
		o.Slot = c.prog.NumGlobals
		c.prog.NumGlobals++
	}
	c.declare(id, o)
	return o
}

func (c *checker) file(f *syntax.File) {
	for _, s := range f.Stmts {
		c.stmt(s)
	}
}

func (c *checker) stmts(list []syntax.Stmt) {
	for _, s := range list {
		c.stmt(s)
	}
}

// block checks a statement in a scope of its own.
func (c *checker) block(s syntax.Stmt) {
	c.push()
	c.depth++
	c.stmt(s)
	c.depth--
	c.pop()
}

func (c *checker) stmt(s syntax.Stmt) {
	switch s := s.(type) {
	case nil, *syntax.EmptyStmt:
	case *syntax.DeclStmt:
		c.decl(s)
	case *syntax.TypeDecl:
		if c.depth > 0 || c.fn != nil {
			c.errorf(s.TypePos, "types may only be declared at the top level")
		}
		t := c.typ(s.Type)
		if s.Name == nil {
			return
		}
		named := *t
		if named.Kind == value.Tuple || named.Kind == value.Array || named.Kind == value.Map {
			named.Name = s.Name.Name
		}
		c.declare(s.Name, &Object{Kind: TypeObj, Type: &named})
	case *syntax.ExprStmt:
		if _, ok := unparen(s.X).(*syntax.CallExpr); !ok {
			c.errorf(s.Pos(), "expression is not used")
		}
		c.expr(s.X, nil, true)
	case *syntax.AssignStmt:
		lt := c.lvalue(s.LHS)
		rt := c.expr(s.RHS, lt, false)
		if s.Op != syntax.ASSIGN {
			c.arith(s.OpPos, assignOp(s.Op), lt, rt)
			return
		}
		c.assignable(s.RHS.Pos(), rt, lt, "assignment")
	case *syntax.IncDecStmt:
		lt := c.lvalue(s.X)
		if lt.Kind != value.Invalid && lt.Kind != value.Int && lt.Kind != value.Float {
			c.errorf(s.OpPos, "cannot increment or decrement %v (type %v)", describe(s.X), lt)
		}
	case *syntax.Block:
		c.push()
		c.depth++
		c.stmts(s.Stmts)
		c.depth--
		c.pop()
	case *syntax.IfStmt:
		c.cond(s.Cond, "if")
		c.block(s.Then)
		c.block(s.Else)
	case *syntax.WhileStmt:
		c.cond(s.Cond, "while")
		c.loops++
		c.block(s.Body)
		c.loops--
	case *syntax.ForStmt:
		c.push()
		c.depth++
		c.stmt(s.Init)
		if s.Cond != nil {
			c.cond(s.Cond, "for")
		}
		c.stmt(s.Post)
		c.loops++
		c.block(s.Body)
		c.loops--
		c.depth--
		c.pop()
	case *syntax.WhenStmt:
		c.when(s)
	case *syntax.BranchStmt:
		if c.loops == 0 {
			c.errorf(s.TokPos, "%s is not in a loop", s.Tok)
		}
	case *syntax.ReturnStmt:
		c.ret(s)
	case *syntax.EmitStmt:
		c.emit(s)
	default:
		c.errorf(s.Pos(), "unexpected statement")
	}
}

func (c *checker) cond(x syntax.Expr, what string) {
	t := c.expr(x, nil, false)
	if t.Kind != value.Invalid && t.Kind != value.Bool {
		c.errorf(x.Pos(), "%s condition must be bool, not %v", what, t)
	}
}

func assignOp(t syntax.Token) syntax.Token {
	switch t {
	case syntax.ADDASSIGN:
		return syntax.ADD
	case syntax.SUBASSIGN:
		return syntax.SUB
	case syntax.MULASSIGN:
		return syntax.MUL
	case syntax.QUOASSIGN:
		return syntax.QUO
	}
	return syntax.REM
}

func (c *checker) decl(d *syntax.DeclStmt) {
	if d.Name == nil {
		return
	}
	switch t := d.Type.(type) {
	case *syntax.TableType:
		c.table(d, t)
		return
	case *syntax.FuncType:
		if d.Body != nil {
			c.function(d, t)
			return
		}
		c.errorf(d.Name.NamePos, "function %s has no body (function values are not supported)", d.Name.Name)
		return
	}
	if d.Static && (c.depth > 0 || c.fn != nil) {
		c.errorf(d.Name.NamePos, "statics may only be declared at the top level")
	}
	var t *value.Type
	if d.Type != nil {
		t = c.typ(d.Type)
	}
	if d.Init != nil {
		c.static = d.Static
		it := c.expr(d.Init, t, false)
		c.static = false
		if t == nil {
			t = it
			if t.Kind == value.Invalid && it != value.InvalidType {
				t = value.InvalidType
			}
		} else {
			c.assignable(d.Init.Pos(), it, t, "declaration of "+d.Name.Name)
		}
	} else if d.Static {
		c.errorf(d.Name.NamePos, "static %s must be initialized", d.Name.Name)
	}
	if t == nil {
		t = value.InvalidType
	}
	// Declare after checking the initializer: "x: int = x;" refers to an
	// outer x, as in Go.
	if d.Static {
		o := &Object{Kind: StaticObj, Type: t, Slot: c.prog.NumStatics, ReadOnly: true}
		c.prog.NumStatics++
		c.declare(d.Name, o)
		return
	}
	c.newVar(d.Name, t)
}

func (c *checker) function(d *syntax.DeclStmt, ft *syntax.FuncType) {
	if c.depth > 0 || c.fn != nil {
		c.errorf(d.Name.NamePos, "functions may only be declared at the top level")
	}
	if d.Static {
		c.errorf(d.Name.NamePos, "a function cannot be static")
	}
	f := &Func{Name: d.Name.Name, Decl: d, Index: len(c.prog.Funcs)}
	if ft.Result != nil {
		f.Result = c.typ(ft.Result)
	}
	paramTypes := make([]*value.Type, len(ft.Params))
	for i, p := range ft.Params {
		paramTypes[i] = c.typ(p.Type)
		if p.Name == nil {
			c.errorf(p.Type.Pos(), "parameter %d of %s needs a name", i+1, f.Name)
		}
	}
	c.prog.Funcs = append(c.prog.Funcs, f)
	// Declared before the body so that it may call itself.
	c.declare(d.Name, &Object{Kind: FuncObj, Func: f, Slot: f.Index})
	outerFn, outerLoops := c.fn, c.loops
	c.fn, c.loops = f, 0
	c.push()
	for i, p := range ft.Params {
		if p.Name != nil {
			f.Params = append(f.Params, c.newVar(p.Name, paramTypes[i]))
		} else {
			f.Params = append(f.Params, &Object{Kind: VarObj, Type: paramTypes[i], Slot: f.FrameSize})
			f.FrameSize++
		}
	}
	c.push()
	c.stmts(d.Body.Stmts)
	c.pop()
	c.pop()
	if f.Result != nil && !terminates(d.Body) {
		c.errorf(d.Body.Pos(), "missing return at end of function %s", f.Name)
	}
	c.fn, c.loops = outerFn, outerLoops
}

func (c *checker) ret(s *syntax.ReturnStmt) {
	if c.fn == nil {
		c.errorf(s.Return, "return outside a function")
		if s.Result != nil {
			c.expr(s.Result, nil, false)
		}
		return
	}
	switch {
	case c.fn.Result == nil && s.Result != nil:
		c.errorf(s.Result.Pos(), "function %s returns no value", c.fn.Name)
		c.expr(s.Result, nil, false)
	case c.fn.Result != nil && s.Result == nil:
		c.errorf(s.Return, "function %s must return a value of type %v", c.fn.Name, c.fn.Result)
	case s.Result != nil:
		t := c.expr(s.Result, c.fn.Result, false)
		c.assignable(s.Result.Pos(), t, c.fn.Result, "return")
	}
}

// terminates reports whether s always ends in a return, by Go's rules.
func terminates(s syntax.Stmt) bool {
	switch s := s.(type) {
	case *syntax.ReturnStmt:
		return true
	case *syntax.Block:
		return len(s.Stmts) > 0 && terminates(s.Stmts[len(s.Stmts)-1])
	case *syntax.IfStmt:
		return s.Else != nil && terminates(s.Then) && terminates(s.Else)
	case *syntax.ForStmt:
		return s.Cond == nil && !hasBreak(s.Body)
	case *syntax.WhileStmt:
		lit, ok := unparen(s.Cond).(*syntax.BasicLit)
		return ok && lit.Kind == syntax.TRUE && !hasBreak(s.Body)
	}
	return false
}

// hasBreak reports whether s contains a break that leaves it (one not
// inside a nested loop).
func hasBreak(s syntax.Stmt) bool {
	switch s := s.(type) {
	case *syntax.BranchStmt:
		return s.Tok == syntax.BREAK
	case *syntax.Block:
		for _, x := range s.Stmts {
			if hasBreak(x) {
				return true
			}
		}
	case *syntax.IfStmt:
		return hasBreak(s.Then) || hasBreak(s.Else)
	case *syntax.WhenStmt:
		return hasBreak(s.Body)
	}
	return false
}

func (c *checker) emit(s *syntax.EmitStmt) {
	var tab *Table
	if s.Table != nil {
		o := c.scope.lookup(s.Table.Name)
		switch {
		case o == nil:
			c.errorf(s.Table.NamePos, "undefined: %s", s.Table.Name)
		case o.Kind != TableObj:
			c.errorf(s.Table.NamePos, "%s is not a table", s.Table.Name)
		default:
			c.prog.Uses[s.Table] = o
			tab = o.Table
		}
	}
	if tab != nil && tab.Kind == KeepTable {
		c.prog.UsesKeep = true
	}
	if tab != nil && len(s.Index) != len(tab.Index) {
		c.errorf(s.Emit, "table %s has %s, emit gives %d", tab.Name, nOf(len(tab.Index), "index", "indexes"), len(s.Index))
	}
	for i, x := range s.Index {
		var want *value.Type
		if tab != nil && i < len(tab.Index) {
			want = tab.Index[i].Type
		}
		t := c.expr(x, want, false)
		if want != nil {
			c.assignable(x.Pos(), t, want, "index of table "+tab.Name)
		}
	}
	var elem *value.Type
	if tab != nil {
		elem = tab.Elem.Type
	}
	vt := c.expr(s.Value, elem, false)
	if tab != nil {
		c.assignable(s.Value.Pos(), vt, elem, "emit to table "+tab.Name)
	}
	if s.Weight != nil {
		wt := c.expr(s.Weight, nil, false)
		if tab != nil {
			if tab.Weight == nil {
				c.errorf(s.Weight.Pos(), "table %s (%s) takes no weight", tab.Name, tab.Kind)
			} else {
				c.assignable(s.Weight.Pos(), wt, tab.Weight.Type, "weight of table "+tab.Name)
			}
		}
	} else if tab != nil && tab.Weight != nil && tab.Kind != "top" {
		c.errorf(s.Emit, "emit to table %s (%s) needs a weight", tab.Name, tab.Kind)
	}
}

// when checks a when statement and finds what each quantified variable
// ranges over.
func (c *checker) when(s *syntax.WhenStmt) {
	c.push()
	c.depth++
	w := &When{}
	for i, v := range s.Vars {
		if i == 0 {
			w.Quant = v.Quant
		} else if v.Quant != w.Quant {
			c.errorf(v.Name.NamePos, "all variables of one when must have the same quantifier (%s); nest when statements to mix them", w.Quant)
		}
		t := c.typ(v.Type)
		if t.Kind != value.Invalid && !t.IsBasic() {
			c.errorf(v.Type.Pos(), "quantified variable %s must have a basic type, not %v", v.Name.Name, t)
		}
		w.Vars = append(w.Vars, c.newVar(v.Name, t))
	}
	c.cond(s.Cond, "when")
	w.Ranges = make([][]syntax.Expr, len(w.Vars))
	bad := c.ranges(s.Cond, w)
	for i, v := range w.Vars {
		if len(w.Ranges[i]) == 0 && v.Type.Kind != value.Invalid && !bad[i] {
			c.errorf(v.Pos, "cannot tell the range of %s: use it as an index of an array or map in the when condition", v.Name)
		}
	}
	c.prog.Whens[s] = w
	if w.Quant == syntax.ALL {
		// The body of "all" runs once, for no particular value.
		c.push()
		for _, v := range s.Vars {
			if v.Name != nil && v.Name.Name != "_" {
				c.scope.names[v.Name.Name] = &Object{Kind: hiddenObj, Name: v.Name.Name, Pos: v.Name.NamePos}
			}
		}
		c.block(s.Body)
		c.pop()
	} else {
		c.block(s.Body)
	}
	c.depth--
	c.pop()
}

// ranges finds, in the condition x, the containers indexed directly by a
// quantified variable. A container may mention only variables declared
// before that one, which are bound by the time its range is needed.
// It returns which variables had a container rejected, already reported.
func (c *checker) ranges(x syntax.Expr, w *When) []bool {
	rejected := make([]bool, len(w.Vars))
	walk(x, func(e syntax.Expr) {
		ix, ok := e.(*syntax.IndexExpr)
		if !ok {
			return
		}
		id, ok := unparen(ix.Index).(*syntax.Ident)
		if !ok {
			return
		}
		k := -1
		for i, v := range w.Vars {
			if c.prog.Uses[id] == v {
				k = i
			}
		}
		if k < 0 {
			return
		}
		ct := c.prog.Types[ix.X]
		if ct == nil || (ct.Kind != value.Array && ct.Kind != value.Map) {
			return
		}
		bad := false
		walk(ix.X, func(e syntax.Expr) {
			if id, ok := e.(*syntax.Ident); ok {
				for i := k; i < len(w.Vars); i++ {
					if c.prog.Uses[id] == w.Vars[i] {
						bad = true
					}
				}
			}
		})
		if bad {
			c.errorf(ix.X.Pos(), "the range of %s cannot depend on %s or later quantified variables", w.Vars[k].Name, w.Vars[k].Name)
			rejected[k] = true
			return
		}
		w.Ranges[k] = append(w.Ranges[k], ix.X)
	})
	return rejected
}

// walk calls f on x and on every expression inside it.
func walk(x syntax.Expr, f func(syntax.Expr)) {
	if x == nil {
		return
	}
	f(x)
	switch x := x.(type) {
	case *syntax.CompositeLit:
		for _, e := range x.Elems {
			walk(e, f)
		}
	case *syntax.KeyValue:
		walk(x.Key, f)
		walk(x.Value, f)
	case *syntax.ParenExpr:
		walk(x.X, f)
	case *syntax.UnaryExpr:
		walk(x.X, f)
	case *syntax.BinaryExpr:
		walk(x.X, f)
		walk(x.Y, f)
	case *syntax.CallExpr:
		walk(x.Fun, f)
		for _, e := range x.Args {
			walk(e, f)
		}
	case *syntax.IndexExpr:
		walk(x.X, f)
		walk(x.Index, f)
	case *syntax.SliceExpr:
		walk(x.X, f)
		walk(x.Lo, f)
		walk(x.Hi, f)
	case *syntax.SelectorExpr:
		walk(x.X, f)
	}
}

func unparen(x syntax.Expr) syntax.Expr {
	for {
		p, ok := x.(*syntax.ParenExpr)
		if !ok {
			return x
		}
		x = p.X
	}
}

// describe names an expression in an error message.
func describe(x syntax.Expr) string {
	switch x := unparen(x).(type) {
	case *syntax.Ident:
		return x.Name
	case *syntax.SelectorExpr:
		return describe(x.X) + "." + x.Sel.Name
	case *syntax.IndexExpr:
		return describe(x.X) + "[…]"
	case *syntax.CallExpr:
		return describe(x.Fun) + "(…)"
	}
	return "expression"
}
