package syntax

// Node is any node of the syntax tree.
type Node interface {
	// Pos is where the node starts, the position errors about it name.
	Pos() Pos
}

// Expr is an expression.
type Expr interface {
	Node
	exprNode()
}

// Stmt is a statement.
type Stmt interface {
	Node
	stmtNode()
}

// TypeExpr is a written type.
type TypeExpr interface {
	Node
	typeNode()
}

// File is a whole script: the statements run once per input row.
type File struct {
	Stmts []Stmt
}

// Expressions.
type (
	// Ident is a name.
	Ident struct {
		NamePos Pos
		Name    string
	}
	// BasicLit is a literal of a basic type; Value is its source text.
	BasicLit struct {
		ValuePos Pos
		Kind     Token // INT, FLOAT, STRING, BYTES, TIME, TRUE or FALSE
		Value    string
	}
	// CompositeLit is {a, b} (array or tuple), {k: v} (map) or {:} (empty
	// map); its type comes from the context.
	CompositeLit struct {
		Lbrace Pos
		Elems  []Expr // KeyValue elements for maps
		IsMap  bool   // written with key: value pairs, or {:}
	}
	// KeyValue is k: v inside a map literal.
	KeyValue struct {
		Key, Value Expr
	}
	// ParenExpr is (X).
	ParenExpr struct {
		Lparen Pos
		X      Expr
	}
	// UnaryExpr is Op X.
	UnaryExpr struct {
		OpPos Pos
		Op    Token
		X     Expr
	}
	// BinaryExpr is X Op Y.
	BinaryExpr struct {
		X     Expr
		OpPos Pos
		Op    Token
		Y     Expr
	}
	// CallExpr is Fun(Args); conversions such as int(s) are calls too.
	CallExpr struct {
		Fun    Expr
		Lparen Pos
		Args   []Expr
	}
	// IndexExpr is X[Index].
	IndexExpr struct {
		X      Expr
		Lbrack Pos
		Index  Expr
	}
	// SliceExpr is X[Lo:Hi]; either bound may be nil.
	SliceExpr struct {
		X      Expr
		Lbrack Pos
		Lo, Hi Expr
	}
	// SelectorExpr is X.Sel.
	SelectorExpr struct {
		X   Expr
		Sel *Ident
	}
	// BadExpr stands where a syntax error was.
	BadExpr struct {
		From Pos
	}
)

// Types.
type (
	// NamedType is a type referred to by name: int, Cell, a declared type.
	NamedType struct {
		Name *Ident
	}
	// ArrayType is array of Elem.
	ArrayType struct {
		Array Pos
		Elem  TypeExpr
	}
	// MapType is map[Key] of Value; the names are documentation.
	MapType struct {
		Map   Pos
		Key   *Field
		Value *Field
	}
	// TupleType is {a: int, string}.
	TupleType struct {
		Lbrace Pos
		Fields []*Field
	}
	// FuncType is function(a: int): int.
	FuncType struct {
		Func   Pos
		Params []*Field
		Result TypeExpr // nil for none
	}
	// TableType is table Kind(Param)[Index]… of Elem weight Weight.
	TableType struct {
		Table  Pos
		Kind   *Ident
		Param  Expr // nil when absent
		Index  []*Field
		Elem   *Field
		Weight *Field // nil when absent
	}
	// Field is an optionally named type: in tuples, parameters, indexes.
	Field struct {
		Name *Ident // may be nil
		Type TypeExpr
	}
)

// Statements.
type (
	// DeclStmt declares a variable (name: T = init, name := init), a static
	// (static name: T = init), a table (name: table …) or a function
	// (name: function(…): T { … }).
	DeclStmt struct {
		Static bool
		Name   *Ident
		Type   TypeExpr // nil for name := init
		Init   Expr     // nil when absent
		Body   *Block   // function body, for function declarations
	}
	// TypeDecl is type Name = Type.
	TypeDecl struct {
		TypePos Pos
		Name    *Ident
		Type    TypeExpr
	}
	// ExprStmt is an expression evaluated for its effect (a call).
	ExprStmt struct {
		X Expr
	}
	// AssignStmt is LHS Op RHS, with Op one of = += -= *= /= %=.
	AssignStmt struct {
		LHS   Expr
		OpPos Pos
		Op    Token
		RHS   Expr
	}
	// IncDecStmt is X++ or X--.
	IncDecStmt struct {
		X     Expr
		OpPos Pos
		Inc   bool
	}
	// Block is { Stmts }.
	Block struct {
		Lbrace Pos
		Stmts  []Stmt
	}
	// IfStmt is if (Cond) Then else Else.
	IfStmt struct {
		If   Pos
		Cond Expr
		Then Stmt
		Else Stmt // nil when absent
	}
	// ForStmt is for (Init; Cond; Post) Body; any part may be nil.
	ForStmt struct {
		For  Pos
		Init Stmt
		Cond Expr
		Post Stmt
		Body Stmt
	}
	// WhileStmt is while (Cond) Body.
	WhileStmt struct {
		While Pos
		Cond  Expr
		Body  Stmt
	}
	// WhenStmt is when (v: some T; … Cond) Body.
	WhenStmt struct {
		When Pos
		Vars []*QuantVar
		Cond Expr
		Body Stmt
	}
	// QuantVar is one quantified variable of a when statement.
	QuantVar struct {
		Name  *Ident
		Quant Token // SOME, EACH or ALL
		Type  TypeExpr
	}
	// BranchStmt is break or continue.
	BranchStmt struct {
		TokPos Pos
		Tok    Token
	}
	// ReturnStmt is return [Result].
	ReturnStmt struct {
		Return Pos
		Result Expr
	}
	// EmitStmt is emit Table[Index]… <- Value weight Weight.
	EmitStmt struct {
		Emit   Pos
		Table  *Ident
		Index  []Expr
		Value  Expr
		Weight Expr // nil when absent
	}
	// EmptyStmt is a lone semicolon.
	EmptyStmt struct {
		Semi Pos
	}
)

func (x *Ident) Pos() Pos        { return x.NamePos }
func (x *BasicLit) Pos() Pos     { return x.ValuePos }
func (x *CompositeLit) Pos() Pos { return x.Lbrace }
func (x *KeyValue) Pos() Pos     { return x.Key.Pos() }
func (x *ParenExpr) Pos() Pos    { return x.Lparen }
func (x *UnaryExpr) Pos() Pos    { return x.OpPos }
func (x *BinaryExpr) Pos() Pos   { return x.X.Pos() }
func (x *CallExpr) Pos() Pos     { return x.Fun.Pos() }
func (x *IndexExpr) Pos() Pos    { return x.X.Pos() }
func (x *SliceExpr) Pos() Pos    { return x.X.Pos() }
func (x *SelectorExpr) Pos() Pos { return x.X.Pos() }
func (x *BadExpr) Pos() Pos      { return x.From }

func (*Ident) exprNode()        {}
func (*BasicLit) exprNode()     {}
func (*CompositeLit) exprNode() {}
func (*KeyValue) exprNode()     {}
func (*ParenExpr) exprNode()    {}
func (*UnaryExpr) exprNode()    {}
func (*BinaryExpr) exprNode()   {}
func (*CallExpr) exprNode()     {}
func (*IndexExpr) exprNode()    {}
func (*SliceExpr) exprNode()    {}
func (*SelectorExpr) exprNode() {}
func (*BadExpr) exprNode()      {}

func (x *NamedType) Pos() Pos { return x.Name.NamePos }
func (x *ArrayType) Pos() Pos { return x.Array }
func (x *MapType) Pos() Pos   { return x.Map }
func (x *TupleType) Pos() Pos { return x.Lbrace }
func (x *FuncType) Pos() Pos  { return x.Func }
func (x *TableType) Pos() Pos { return x.Table }

func (*NamedType) typeNode() {}
func (*ArrayType) typeNode() {}
func (*MapType) typeNode()   {}
func (*TupleType) typeNode() {}
func (*FuncType) typeNode()  {}
func (*TableType) typeNode() {}

func (s *DeclStmt) Pos() Pos   { return s.Name.NamePos }
func (s *TypeDecl) Pos() Pos   { return s.TypePos }
func (s *ExprStmt) Pos() Pos   { return s.X.Pos() }
func (s *AssignStmt) Pos() Pos { return s.LHS.Pos() }
func (s *IncDecStmt) Pos() Pos { return s.X.Pos() }
func (s *Block) Pos() Pos      { return s.Lbrace }
func (s *IfStmt) Pos() Pos     { return s.If }
func (s *ForStmt) Pos() Pos    { return s.For }
func (s *WhileStmt) Pos() Pos  { return s.While }
func (s *WhenStmt) Pos() Pos   { return s.When }
func (s *BranchStmt) Pos() Pos { return s.TokPos }
func (s *ReturnStmt) Pos() Pos { return s.Return }
func (s *EmitStmt) Pos() Pos   { return s.Emit }
func (s *EmptyStmt) Pos() Pos  { return s.Semi }

func (*DeclStmt) stmtNode()   {}
func (*TypeDecl) stmtNode()   {}
func (*ExprStmt) stmtNode()   {}
func (*AssignStmt) stmtNode() {}
func (*IncDecStmt) stmtNode() {}
func (*Block) stmtNode()      {}
func (*IfStmt) stmtNode()     {}
func (*ForStmt) stmtNode()    {}
func (*WhileStmt) stmtNode()  {}
func (*WhenStmt) stmtNode()   {}
func (*BranchStmt) stmtNode() {}
func (*ReturnStmt) stmtNode() {}
func (*EmitStmt) stmtNode()   {}
func (*EmptyStmt) stmtNode()  {}
