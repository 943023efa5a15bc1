package vm

import (
	"slices"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// when compiles a when statement. Its quantified variables are bound in
// declaration order, each ranging over the indexes of the arrays it indexes
// in the condition (up to the shortest) or over the keys of the first map
// it indexes; the ranges of later variables are computed once the earlier
// ones are bound. Then:
//
//   - some: the body runs once, for the first combination that satisfies
//     the condition, if there is one;
//   - each: the body runs for every combination that satisfies it;
//   - all: the body runs once if every combination satisfies it (so also
//     when there are none).
//
// break and continue in the body act on the enclosing loop, ending the
// when.
func (c *compiler) when(s *syntax.WhenStmt) exec {
	w := c.prog.Whens[s]
	cond := c.cond(s.Cond)
	body := c.stmt(s.Body)
	pos := s.When
	type rng struct {
		set   func(*Machine, value.Value)
		conts []eval
		isMap []bool
	}
	vars := make([]rng, len(w.Vars))
	for i, v := range w.Vars {
		vars[i].set = c.store(v)
		for _, x := range w.Ranges[i] {
			vars[i].conts = append(vars[i].conts, c.expr(x))
			vars[i].isMap = append(vars[i].isMap, c.typeOf(x).Kind == value.Map)
		}
	}
	// forEach binds variables k… to every combination in order, calling f
	// on each; f returns false to stop. It reports whether it was stopped.
	var forEach func(m *Machine, k int, f func() bool) bool
	forEach = func(m *Machine, k int, f func() bool) bool {
		if k == len(vars) {
			return !f()
		}
		r := &vars[k]
		var keys []value.Value
		n := int64(-1)
		for i, cont := range r.conts {
			v := cont(m)
			if r.isMap[i] {
				if keys == nil {
					keys = v.Map().Keys
				}
				continue
			}
			if l := int64(len(v.Array().Elems)); n < 0 || l < n {
				n = l
			}
		}
		if keys != nil {
			for _, key := range keys {
				m.tick(pos)
				r.set(m, key)
				if forEach(m, k+1, f) {
					return true
				}
			}
			return false
		}
		for i := int64(0); i < n; i++ {
			m.tick(pos)
			r.set(m, value.MakeInt(i))
			if forEach(m, k+1, f) {
				return true
			}
		}
		return false
	}
	if len(vars) == 1 && !slices.Contains(vars[0].isMap, true) {
		return c.when1(w.Quant, pos, vars[0].set, vars[0].conts, cond, body)
	}
	switch w.Quant {
	case syntax.SOME:
		return func(m *Machine) ctl {
			m.tick(pos)
			if forEach(m, 0, func() bool { return !cond(m) }) {
				return run(body, m)
			}
			return ctlNext
		}
	case syntax.ALL:
		return func(m *Machine) ctl {
			m.tick(pos)
			if !forEach(m, 0, func() bool { return cond(m) }) {
				return run(body, m)
			}
			return ctlNext
		}
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		result := ctlNext
		forEach(m, 0, func() bool {
			if !cond(m) {
				return true
			}
			switch r := run(body, m); r {
			case ctlBreak, ctlContinue, ctlReturn:
				result = r
				return false
			}
			return true
		})
		return result
	}
}

// when1 is when with one variable ranging over array indexes, the common
// case, as a plain loop.
func (c *compiler) when1(quant syntax.Token, pos syntax.Pos, set func(*Machine, value.Value), conts []eval, cond func(*Machine) bool, body exec) exec {
	length := func(m *Machine) int64 {
		n := int64(-1)
		for _, cont := range conts {
			if l := int64(len(cont(m).Array().Elems)); n < 0 || l < n {
				n = l
			}
		}
		return n
	}
	switch quant {
	case syntax.SOME:
		return func(m *Machine) ctl {
			m.tick(pos)
			n := length(m)
			for i := int64(0); i < n; i++ {
				m.tick(pos)
				set(m, value.Value{N: i})
				if cond(m) {
					return run(body, m)
				}
			}
			return ctlNext
		}
	case syntax.ALL:
		return func(m *Machine) ctl {
			m.tick(pos)
			n := length(m)
			for i := int64(0); i < n; i++ {
				m.tick(pos)
				set(m, value.Value{N: i})
				if !cond(m) {
					return ctlNext
				}
			}
			return run(body, m)
		}
	}
	return func(m *Machine) ctl {
		m.tick(pos)
		n := length(m)
		for i := int64(0); i < n; i++ {
			m.tick(pos)
			set(m, value.Value{N: i})
			if cond(m) {
				switch r := run(body, m); r {
				case ctlBreak, ctlContinue, ctlReturn:
					return r
				}
			}
		}
		return ctlNext
	}
}
