package syntax

import (
	"fmt"
	"sort"
)

// Error is one syntax error.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("%v: %s", e.Pos, e.Msg) }

// maxErrors bounds how many errors one parse reports; past it the rest of
// the input is noise caused by the first ones.
const maxErrors = 100

// maxDepth bounds the nesting of expressions, types and statements, so that
// a hostile script cannot exhaust the stack of the parser, the checker or
// the compiler, which all recurse over the tree.
const maxDepth = 500

// Parse parses a whole script. It returns the tree, with BadExpr nodes where
// it could not make sense of the input, and every syntax error found, sorted
// by position.
func Parse(src string) (*File, []*Error) {
	p := &parser{}
	f := &File{}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(bailout); !ok {
					panic(r)
				}
			}
		}()
		p.items = lex(src, p.errorAt)
		f = p.file()
	}()
	sort.SliceStable(p.errs, func(i, j int) bool {
		a, b := p.errs[i].Pos, p.errs[j].Pos
		return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
	})
	return f, p.errs
}

type parser struct {
	items []item
	i     int
	errs  []*Error
	depth int
	// lastErrLine suppresses a cascade of errors on one line.
	lastErr Pos
}

// bailout unwinds the parser when too many errors were reported.
type bailout struct{}

func (p *parser) errorAt(pos Pos, msg string) {
	if pos == p.lastErr {
		return
	}
	p.lastErr = pos
	p.errs = append(p.errs, &Error{pos, msg})
	if len(p.errs) >= maxErrors {
		panic(bailout{})
	}
}

func (p *parser) tok() Token           { return p.items[p.i].tok }
func (p *parser) pos() Pos             { return p.items[p.i].pos }
func (p *parser) lit() string          { return p.items[p.i].lit }
func (p *parser) peek(k int) Token     { return p.items[min(p.i+k, len(p.items)-1)].tok }
func (p *parser) got(t Token) bool     { return p.tok() == t && p.next() }
func (p *parser) next() bool           { p.i = min(p.i+1, len(p.items)-1); return true }
func (p *parser) errorHere(msg string) { p.errorAt(p.pos(), msg) }

func (p *parser) found() string {
	switch p.tok() {
	case IDENT, INT, FLOAT, STRING, BYTES, TIME:
		return fmt.Sprintf("%s %s", p.tok(), p.lit())
	}
	return fmt.Sprintf("%q", p.tok().String())
}

// expect consumes a t, or reports an error and returns the position anyway.
func (p *parser) expect(t Token, context string) Pos {
	pos := p.pos()
	if !p.got(t) {
		p.errorHere(fmt.Sprintf("expected %q %s, found %s", t.String(), context, p.found()))
	}
	return pos
}

// enter and leave track nesting depth.
func (p *parser) enter() bool {
	p.depth++
	if p.depth > maxDepth {
		p.errorHere(fmt.Sprintf("nesting deeper than %d", maxDepth))
		return false
	}
	return true
}

func (p *parser) leave() { p.depth-- }

// sync skips to just after the next semicolon, or to a closing brace or the
// end, so that one error does not hide the statements after it.
func (p *parser) sync() {
	for {
		switch p.tok() {
		case EOF, RBRACE:
			return
		case SEMICOLON:
			p.next()
			return
		}
		p.next()
	}
}

// file parses the statements of a whole script. Past maxErrors, errorAt
// unwinds it with a bailout, which Parse recovers; f keeps what was parsed.
func (p *parser) file() *File {
	f := &File{}
	for p.tok() != EOF {
		start := p.i
		if p.tok() == RBRACE {
			p.errorHere("unexpected '}'")
			p.next()
			continue
		}
		if s := p.stmt(); s != nil {
			f.Stmts = append(f.Stmts, s)
		}
		if p.i == start {
			p.next()
		}
	}
	return f
}

func (p *parser) stmt() Stmt {
	if !p.enter() {
		p.sync()
		p.leave()
		return nil
	}
	defer p.leave()
	pos := p.pos()
	switch p.tok() {
	case SEMICOLON:
		p.next()
		return &EmptyStmt{pos}
	case LBRACE:
		return p.block()
	case IF:
		p.next()
		s := &IfStmt{If: pos}
		p.expect(LPAREN, "after if")
		s.Cond = p.expr()
		p.expect(RPAREN, "after if condition")
		s.Then = p.stmt()
		if p.got(ELSE) {
			s.Else = p.stmt()
		}
		return s
	case WHILE:
		p.next()
		s := &WhileStmt{While: pos}
		p.expect(LPAREN, "after while")
		s.Cond = p.expr()
		p.expect(RPAREN, "after while condition")
		s.Body = p.stmt()
		return s
	case FOR:
		return p.forStmt()
	case WHEN:
		return p.whenStmt()
	case BREAK, CONTINUE:
		t := p.tok()
		p.next()
		p.semi()
		return &BranchStmt{pos, t}
	case RETURN:
		p.next()
		s := &ReturnStmt{Return: pos}
		if p.tok() != SEMICOLON {
			s.Result = p.expr()
		}
		p.semi()
		return s
	case EMIT:
		return p.emitStmt()
	case TYPE:
		p.next()
		s := &TypeDecl{TypePos: pos, Name: p.ident()}
		p.expect(ASSIGN, "in type declaration")
		s.Type = p.typ()
		p.semi()
		return s
	case STATIC:
		p.next()
		if p.tok() != IDENT || p.peek(1) != COLON && p.peek(1) != DEFINE {
			p.errorHere("expected declaration after static")
			p.sync()
			return nil
		}
		d := p.decl()
		if d != nil {
			d.Static = true
		}
		return d
	case IDENT:
		if p.peek(1) == COLON || p.peek(1) == DEFINE {
			return p.decl()
		}
	}
	s := p.simpleStmt()
	p.semi()
	return s
}

// semi expects the semicolon that ends a statement and resynchronizes after
// an error.
func (p *parser) semi() {
	if p.tok() == SEMICOLON {
		p.next()
		return
	}
	p.errorHere(fmt.Sprintf("expected ';', found %s", p.found()))
	p.sync()
}

func (p *parser) block() *Block {
	b := &Block{Lbrace: p.expect(LBRACE, "")}
	for p.tok() != RBRACE && p.tok() != EOF {
		start := p.i
		if s := p.stmt(); s != nil {
			b.Stmts = append(b.Stmts, s)
		}
		if p.i == start {
			p.next()
		}
	}
	p.expect(RBRACE, "at end of block")
	return b
}

// decl parses name: T = init; name := init; name: table …; and
// name: function(…) { … }.
func (p *parser) decl() *DeclStmt {
	d := &DeclStmt{Name: p.ident()}
	if p.got(DEFINE) {
		d.Init = p.expr()
		p.semi()
		return d
	}
	p.expect(COLON, "in declaration")
	if p.tok() != ASSIGN {
		d.Type = p.typ()
	}
	if _, ok := d.Type.(*FuncType); ok && p.tok() == LBRACE {
		d.Body = p.block()
		p.got(SEMICOLON) // Sawzall ends the declaration with ';'; allow it either way
		return d
	}
	if p.got(ASSIGN) {
		d.Init = p.expr()
	}
	p.semi()
	return d
}

func (p *parser) forStmt() Stmt {
	s := &ForStmt{For: p.pos()}
	p.next()
	p.expect(LPAREN, "after for")
	if p.tok() != SEMICOLON {
		if p.tok() == IDENT && (p.peek(1) == COLON || p.peek(1) == DEFINE) {
			s.Init = p.decl() // consumes the ';'
		} else {
			s.Init = p.simpleStmt()
			p.expect(SEMICOLON, "after for initialization")
		}
	} else {
		p.next()
	}
	if p.tok() != SEMICOLON {
		s.Cond = p.expr()
	}
	p.expect(SEMICOLON, "after for condition")
	if p.tok() != RPAREN {
		s.Post = p.simpleStmt()
	}
	p.expect(RPAREN, "after for clauses")
	s.Body = p.stmt()
	return s
}

func (p *parser) whenStmt() Stmt {
	s := &WhenStmt{When: p.pos()}
	p.next()
	p.expect(LPAREN, "after when")
	for p.tok() == IDENT && p.peek(1) == COLON && (p.peek(2) == SOME || p.peek(2) == EACH || p.peek(2) == ALL) {
		v := &QuantVar{Name: p.ident()}
		p.next() // ':'
		v.Quant = p.tok()
		p.next()
		v.Type = p.typ()
		p.expect(SEMICOLON, "after quantified variable")
		s.Vars = append(s.Vars, v)
	}
	if len(s.Vars) == 0 {
		p.errorHere("expected quantified variable (name: some|each|all type;) in when")
		// Skip the malformed header, so that only the body is parsed next.
		for depth := 0; p.tok() != EOF; p.next() {
			if p.tok() == LPAREN {
				depth++
			} else if p.tok() == RPAREN {
				if depth == 0 {
					p.next()
					break
				}
				depth--
			}
		}
		s.Cond = &BadExpr{s.When}
		s.Body = p.stmt()
		return s
	}
	s.Cond = p.expr()
	p.expect(RPAREN, "after when condition")
	s.Body = p.stmt()
	return s
}

func (p *parser) emitStmt() Stmt {
	s := &EmitStmt{Emit: p.pos()}
	p.next()
	s.Table = p.ident()
	for p.got(LBRACK) {
		s.Index = append(s.Index, p.expr())
		p.expect(RBRACK, "after emit index")
	}
	p.expect(ARROW, "in emit")
	s.Value = p.expr()
	if p.got(WEIGHT) {
		s.Weight = p.expr()
	}
	p.semi()
	return s
}

// simpleStmt parses an expression statement, an assignment or an
// increment, without the semicolon.
func (p *parser) simpleStmt() Stmt {
	x := p.expr()
	switch t := p.tok(); t {
	case ASSIGN, ADDASSIGN, SUBASSIGN, MULASSIGN, QUOASSIGN, REMASSIGN:
		pos := p.pos()
		p.next()
		return &AssignStmt{LHS: x, OpPos: pos, Op: t, RHS: p.expr()}
	case INC, DEC:
		pos := p.pos()
		p.next()
		return &IncDecStmt{X: x, OpPos: pos, Inc: t == INC}
	}
	return &ExprStmt{X: x}
}

func (p *parser) ident() *Ident {
	pos := p.pos()
	name := "_"
	if p.tok() == IDENT {
		name = p.lit()
		p.next()
	} else {
		p.errorHere(fmt.Sprintf("expected identifier, found %s", p.found()))
	}
	return &Ident{pos, name}
}

// typ parses a type.
func (p *parser) typ() TypeExpr {
	if !p.enter() {
		p.leave()
		return &NamedType{&Ident{p.pos(), "_"}}
	}
	defer p.leave()
	pos := p.pos()
	switch p.tok() {
	case IDENT:
		return &NamedType{p.ident()}
	case ARRAY:
		p.next()
		p.expect(OF, "after array")
		return &ArrayType{pos, p.typ()}
	case MAP:
		p.next()
		t := &MapType{Map: pos}
		p.expect(LBRACK, "after map")
		t.Key = p.field()
		p.expect(RBRACK, "after map key")
		p.expect(OF, "after map key")
		t.Value = p.field()
		return t
	case LBRACE:
		p.next()
		t := &TupleType{Lbrace: pos}
		for p.tok() != RBRACE && p.tok() != EOF {
			t.Fields = append(t.Fields, p.field())
			if !p.got(COMMA) {
				break
			}
		}
		p.expect(RBRACE, "at end of tuple type")
		return t
	case FUNCTION:
		p.next()
		t := &FuncType{Func: pos}
		p.expect(LPAREN, "after function")
		for p.tok() != RPAREN && p.tok() != EOF {
			t.Params = append(t.Params, p.field())
			if !p.got(COMMA) {
				break
			}
		}
		p.expect(RPAREN, "after parameters")
		if p.got(COLON) {
			t.Result = p.typ()
		}
		return t
	case TABLE:
		return p.tableType()
	}
	p.errorHere(fmt.Sprintf("expected type, found %s", p.found()))
	return &NamedType{&Ident{pos, "_"}}
}

// field parses [name:] type.
func (p *parser) field() *Field {
	f := &Field{}
	if p.tok() == IDENT && p.peek(1) == COLON {
		f.Name = p.ident()
		p.next()
	}
	f.Type = p.typ()
	return f
}

func (p *parser) tableType() TypeExpr {
	t := &TableType{Table: p.pos()}
	p.next()
	t.Kind = p.ident()
	if p.got(LPAREN) {
		t.Param = p.expr()
		p.expect(RPAREN, "after table parameter")
	}
	for p.got(LBRACK) {
		t.Index = append(t.Index, p.field())
		p.expect(RBRACK, "after table index")
	}
	p.expect(OF, "in table type")
	t.Elem = p.field()
	if p.got(WEIGHT) {
		t.Weight = p.field()
	}
	return t
}

// expr parses an expression by precedence climbing.
func (p *parser) expr() Expr { return p.binary(1) }

func (p *parser) binary(prec int) Expr {
	if !p.enter() {
		p.leave()
		pos := p.pos()
		p.sync()
		return &BadExpr{pos}
	}
	defer p.leave()
	x := p.unary()
	// A chain a + b + c… nests to the left as deep as it is long, so each
	// link counts as a level too: later passes recurse over it.
	links := 0
	defer func() { p.depth -= links }()
	for {
		op := p.tok()
		oprec := op.Precedence()
		if oprec < prec {
			return x
		}
		links++
		if !p.enter() {
			p.sync()
			return &BadExpr{x.Pos()}
		}
		pos := p.pos()
		p.next()
		y := p.binary(oprec + 1)
		x = &BinaryExpr{X: x, OpPos: pos, Op: op, Y: y}
	}
}

func (p *parser) unary() Expr {
	switch t := p.tok(); t {
	case SUB, ADD, NOT, TILDE:
		pos := p.pos()
		p.next()
		if !p.enter() {
			p.leave()
			p.sync()
			return &BadExpr{pos}
		}
		defer p.leave()
		return &UnaryExpr{OpPos: pos, Op: t, X: p.unary()}
	}
	return p.postfix(p.operand())
}

func (p *parser) operand() Expr {
	pos := p.pos()
	switch t := p.tok(); t {
	case IDENT:
		return p.ident()
	case INT, FLOAT, STRING, BYTES, TIME, TRUE, FALSE:
		lit := p.lit()
		p.next()
		return &BasicLit{pos, t, lit}
	case LPAREN:
		p.next()
		x := p.expr()
		p.expect(RPAREN, "after parenthesized expression")
		return &ParenExpr{pos, x}
	case LBRACE:
		return p.composite()
	}
	p.errorHere(fmt.Sprintf("expected expression, found %s", p.found()))
	if p.tok() != SEMICOLON && p.tok() != RBRACE && p.tok() != RPAREN && p.tok() != EOF {
		p.next()
	}
	return &BadExpr{pos}
}

func (p *parser) composite() Expr {
	c := &CompositeLit{Lbrace: p.pos()}
	p.next()
	if p.tok() == COLON && p.peek(1) == RBRACE {
		p.next()
		p.next()
		c.IsMap = true
		return c
	}
	for p.tok() != RBRACE && p.tok() != EOF {
		start := p.i
		e := p.expr()
		if p.got(COLON) {
			e = &KeyValue{Key: e, Value: p.expr()}
			c.IsMap = true
		}
		c.Elems = append(c.Elems, e)
		if !p.got(COMMA) || p.i == start {
			break
		}
	}
	p.expect(RBRACE, "at end of composite literal")
	return c
}

func (p *parser) postfix(x Expr) Expr {
	// Like binary chains, a[i].f(…)… nests as deep as it is long.
	links := 0
	defer func() { p.depth -= links }()
	for {
		switch p.tok() {
		case PERIOD, LPAREN, LBRACK:
			links++
			if !p.enter() {
				p.sync()
				return &BadExpr{x.Pos()}
			}
		}
		switch p.tok() {
		case PERIOD:
			p.next()
			x = &SelectorExpr{X: x, Sel: p.ident()}
		case LPAREN:
			call := &CallExpr{Fun: x, Lparen: p.pos()}
			p.next()
			for p.tok() != RPAREN && p.tok() != EOF {
				start := p.i
				call.Args = append(call.Args, p.expr())
				if !p.got(COMMA) || p.i == start {
					break
				}
			}
			p.expect(RPAREN, "after arguments")
			x = call
		case LBRACK:
			pos := p.pos()
			p.next()
			var lo, hi Expr
			if p.tok() != COLON {
				lo = p.expr()
			}
			if p.got(COLON) {
				if p.tok() != RBRACK {
					hi = p.expr()
				}
				p.expect(RBRACK, "after slice")
				x = &SliceExpr{X: x, Lbrack: pos, Lo: lo, Hi: hi}
				continue
			}
			p.expect(RBRACK, "after index")
			x = &IndexExpr{X: x, Lbrack: pos, Index: lo}
		default:
			return x
		}
	}
}
