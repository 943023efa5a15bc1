package check

import (
	"strconv"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
)

// typ resolves a written type. It returns value.InvalidType after reporting
// an error.
func (c *checker) typ(t syntax.TypeExpr) *value.Type {
	switch t := t.(type) {
	case *syntax.NamedType:
		if t.Name.Name == "_" { // the parser's placeholder after an error
			return value.InvalidType
		}
		o := c.scope.lookup(t.Name.Name)
		if o == nil {
			c.errorf(t.Name.NamePos, "undefined type %s", t.Name.Name)
			return value.InvalidType
		}
		if o.Kind != TypeObj {
			c.errorf(t.Name.NamePos, "%s is not a type", t.Name.Name)
			return value.InvalidType
		}
		c.prog.Uses[t.Name] = o
		return o.Type
	case *syntax.ArrayType:
		return value.ArrayOf(c.typ(t.Elem))
	case *syntax.MapType:
		k := c.typ(t.Key.Type)
		if k.Kind != value.Invalid && !k.IsBasic() {
			c.errorf(t.Key.Type.Pos(), "map key must have a basic type, not %v", k)
			k = value.InvalidType
		}
		return value.MapOf(k, c.typ(t.Value.Type))
	case *syntax.TupleType:
		if len(t.Fields) == 0 {
			c.errorf(t.Lbrace, "a tuple needs at least one field")
			return value.InvalidType
		}
		seen := map[string]bool{}
		fields := make([]value.Field, len(t.Fields))
		for i, f := range t.Fields {
			fields[i].Type = c.typ(f.Type)
			if f.Name != nil {
				if seen[f.Name.Name] {
					c.errorf(f.Name.NamePos, "duplicate field %s", f.Name.Name)
				}
				seen[f.Name.Name] = true
				fields[i].Name = f.Name.Name
			}
		}
		return value.TupleOf(fields...)
	case *syntax.FuncType:
		c.errorf(t.Func, "function types are allowed only in function declarations")
	case *syntax.TableType:
		c.errorf(t.Table, "tables may only be declared, as name: table …")
	}
	return value.InvalidType
}

// containsInvalid reports whether an error was already reported in t.
func containsInvalid(t *value.Type) bool {
	switch t.Kind {
	case value.Invalid:
		return true
	case value.Array:
		return containsInvalid(t.Elem)
	case value.Map:
		return containsInvalid(t.Key) || containsInvalid(t.Elem)
	case value.Tuple:
		for _, f := range t.Fields {
			if containsInvalid(f.Type) {
				return true
			}
		}
	}
	return false
}

// tableKinds says, for each aggregator, whether it takes a parameter and a
// weight (0 no, 1 optional, 2 required).
var tableKinds = map[string]struct{ param, weight int }{
	"collection": {0, 0},
	"sum":        {0, 0},
	"mean":       {0, 0},
	"maximum":    {2, 2},
	"minimum":    {2, 2},
	"top":        {2, 1},
	"unique":     {2, 0},
	"quantile":   {2, 0},
	"sample":     {2, 0},
}

// maxTableParam bounds the n of maximum(n) and the like: the state of such a
// table grows with n, and partials cross the network.
const maxTableParam = 1 << 20

func (c *checker) table(d *syntax.DeclStmt, tt *syntax.TableType) {
	if c.depth > 0 || c.fn != nil {
		c.errorf(d.Name.NamePos, "tables may only be declared at the top level")
	}
	if d.Static {
		c.errorf(d.Name.NamePos, "a table cannot be static")
	}
	if d.Init != nil {
		c.errorf(d.Init.Pos(), "a table cannot be initialized")
	}
	tab := &Table{Name: d.Name.Name, Pos: d.Name.NamePos}
	kind, ok := tableKinds[tt.Kind.Name]
	if !ok {
		c.errorf(tt.Kind.NamePos, "unknown table kind %s (want collection, sum, mean, maximum, minimum, top, unique, quantile or sample)", tt.Kind.Name)
	}
	tab.Kind = tt.Kind.Name
	if tt.Param != nil {
		lit, isLit := tt.Param.(*syntax.BasicLit)
		n, err := int64(0), error(nil)
		if isLit && lit.Kind == syntax.INT {
			n, err = strconv.ParseInt(lit.Value, 0, 64)
		}
		switch {
		case ok && kind.param == 0:
			c.errorf(tt.Param.Pos(), "table kind %s takes no parameter", tab.Kind)
		case !isLit || lit.Kind != syntax.INT || err != nil:
			c.errorf(tt.Param.Pos(), "table parameter must be an integer literal")
		case n < 1 || n > maxTableParam:
			c.errorf(tt.Param.Pos(), "table parameter %d out of range [1, %d]", n, maxTableParam)
		case tab.Kind == "quantile" && n < 2:
			c.errorf(tt.Param.Pos(), "quantile needs at least 2 n-tiles, got %d", n)
		default:
			tab.Param = int(n)
		}
	} else if ok && kind.param == 2 {
		c.errorf(tt.Kind.NamePos, "table kind %s needs a parameter: %s(n)", tab.Kind, tab.Kind)
	}
	for _, f := range tt.Index {
		t := c.typ(f.Type)
		name := ""
		if f.Name != nil {
			name = f.Name.Name
		}
		if t.Kind != value.Invalid && !t.IsBasic() {
			c.errorf(f.Type.Pos(), "table index must have a basic type, not %v", t)
		}
		tab.Index = append(tab.Index, value.Field{Name: name, Type: t})
	}
	if tt.Elem != nil {
		tab.Elem.Type = c.typ(tt.Elem.Type)
		if tt.Elem.Name != nil {
			tab.Elem.Name = tt.Elem.Name.Name
		}
		et := tab.Elem.Type
		switch tab.Kind {
		case "sum", "mean", "quantile":
			if et.Kind != value.Invalid && !et.IsNumeric() {
				c.errorf(tt.Elem.Type.Pos(), "%s table must be of int or float, not %v", tab.Kind, et)
			}
		}
	} else {
		tab.Elem.Type = value.InvalidType
	}
	if tt.Weight != nil {
		wt := c.typ(tt.Weight.Type)
		w := &value.Field{Type: wt}
		if tt.Weight.Name != nil {
			w.Name = tt.Weight.Name.Name
		}
		switch {
		case ok && kind.weight == 0:
			c.errorf(tt.Weight.Type.Pos(), "table kind %s takes no weight", tab.Kind)
		case wt.Kind != value.Invalid && !wt.IsNumeric():
			c.errorf(tt.Weight.Type.Pos(), "weight must be int or float, not %v", wt)
		}
		tab.Weight = w
	} else if ok && kind.weight == 2 {
		c.errorf(tt.Table, "table kind %s needs a weight: … weight name: int", tab.Kind)
	} else if ok && kind.weight == 1 {
		tab.Weight = &value.Field{Name: "weight", Type: value.IntType}
	}
	o := &Object{Kind: TableObj, Table: tab, Slot: len(c.prog.Tables)}
	c.prog.Tables = append(c.prog.Tables, tab)
	c.declare(d.Name, o)
}
