package vm

import (
	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

func unparen(x syntax.Expr) syntax.Expr {
	for {
		p, ok := x.(*syntax.ParenExpr)
		if !ok {
			return x
		}
		x = p.X
	}
}

func (c *compiler) assign(s *syntax.AssignStmt) exec {
	rhs := c.expr(s.RHS)
	if s.Op != syntax.ASSIGN {
		return c.update(s.LHS, s.OpPos, compoundOp(s.Op), rhs, s.RHS, c.typeOf(s.RHS))
	}
	pos := s.OpPos
	switch x := unparen(s.LHS).(type) {
	case *syntax.Ident:
		o := c.prog.Uses[x]
		if o.Global {
			slot := o.Slot
			return func(m *Machine) ctl {
				m.tick(pos)
				m.globals[slot] = rhs(m)
				return ctlNext
			}
		}
		set := c.store(o)
		return func(m *Machine) ctl {
			m.tick(pos)
			set(m, rhs(m))
			return ctlNext
		}
	case *syntax.IndexExpr:
		cont, ix := c.expr(x.X), c.expr(x.Index)
		ct := c.typeOf(x.X)
		if ct.Kind == value.Map {
			kt, et := ct.Key, ct.Elem
			return func(m *Machine) ctl {
				m.tick(pos)
				mp := cont(m).Map()
				k := ix(m)
				v := rhs(m)
				if mp.Set(k, v) {
					m.alloc(value.Size(kt, k) + value.Size(et, v) + 80)
				}
				return ctlNext
			}
		}
		ipos := x.Lbrack
		return func(m *Machine) ctl {
			m.tick(pos)
			a := cont(m).Array()
			i := ix(m).N
			v := rhs(m)
			if uint64(i) >= uint64(len(a.Elems)) {
				m.fail(ipos, "index %d out of range [0:%d]", i, len(a.Elems))
			}
			a.Elems[i] = v
			return ctlNext
		}
	case *syntax.SelectorExpr:
		cont := c.expr(x.X)
		f := c.typeOf(x.X).FieldIndex(x.Sel.Name)
		return func(m *Machine) ctl {
			m.tick(pos)
			t := cont(m).Tuple()
			t.Fields[f] = rhs(m)
			return ctlNext
		}
	}
	panic("vm: bad assignment target")
}

func compoundOp(t syntax.Token) syntax.Token {
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

// update compiles x op= rhs (and x++, x--), evaluating the target's
// container and index once. A missing map key reads as the zero value, so
// that counts[w]++ works on a fresh key.
// rhsx is the right-hand side's expression, nil for ++ and --.
func (c *compiler) update(lhs syntax.Expr, pos syntax.Pos, op syntax.Token, rhs eval, rhsx syntax.Expr, rt *value.Type) exec {
	lt := c.typeOf(lhs)
	f := c.binop(op, lt, rt, pos)
	switch x := unparen(lhs).(type) {
	case *syntax.Ident:
		o := c.prog.Uses[x]
		if o.Global && o.Kind == check.VarObj && lt.Kind == value.Int && rt.Kind == value.Int && (op == syntax.ADD || op == syntax.SUB) {
			slot := o.Slot
			if lit, ok := unparen(rhsx).(*syntax.BasicLit); ok || rhsx == nil {
				d := int64(1)
				if ok {
					d = c.prog.Consts[lit].N
				}
				if op == syntax.SUB {
					d = -d
				}
				return func(m *Machine) ctl {
					m.tick(pos)
					m.globals[slot].N += d
					return ctlNext
				}
			}
			if op == syntax.SUB {
				return func(m *Machine) ctl {
					m.tick(pos)
					m.globals[slot].N -= rhs(m).N
					return ctlNext
				}
			}
			return func(m *Machine) ctl {
				m.tick(pos)
				m.globals[slot].N += rhs(m).N
				return ctlNext
			}
		}
		get, set := c.load(o), c.store(o)
		return func(m *Machine) ctl {
			m.tick(pos)
			old := get(m)
			set(m, f(m, old, rhs(m)))
			return ctlNext
		}
	case *syntax.IndexExpr:
		cont, ix := c.expr(x.X), c.expr(x.Index)
		ct := c.typeOf(x.X)
		if ct.Kind == value.Map {
			kt, et := ct.Key, ct.Elem
			return func(m *Machine) ctl {
				m.tick(pos)
				mp := cont(m).Map()
				k := ix(m)
				old, ok := mp.Get(k)
				if !ok {
					old = value.Zero(et)
				}
				v := f(m, old, rhs(m))
				if mp.Set(k, v) {
					m.alloc(value.Size(kt, k) + value.Size(et, v) + 80)
				}
				return ctlNext
			}
		}
		ipos := x.Lbrack
		return func(m *Machine) ctl {
			m.tick(pos)
			a := cont(m).Array()
			i := ix(m).N
			if uint64(i) >= uint64(len(a.Elems)) {
				m.fail(ipos, "index %d out of range [0:%d]", i, len(a.Elems))
			}
			a.Elems[i] = f(m, a.Elems[i], rhs(m))
			return ctlNext
		}
	case *syntax.SelectorExpr:
		cont := c.expr(x.X)
		fi := c.typeOf(x.X).FieldIndex(x.Sel.Name)
		return func(m *Machine) ctl {
			m.tick(pos)
			t := cont(m).Tuple()
			t.Fields[fi] = f(m, t.Fields[fi], rhs(m))
			return ctlNext
		}
	}
	panic("vm: bad assignment target")
}
