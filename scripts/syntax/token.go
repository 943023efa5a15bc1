// Package syntax reads script source text: the lexer turns it into tokens,
// the parser into an abstract syntax tree whose nodes carry their line and
// column. Syntax errors are collected, not just the first, and the parser
// never panics, whatever the input.
package syntax

import "fmt"

// Pos is a position in the source: line and column, both from 1 (columns
// count bytes). The zero Pos is "no position".
type Pos struct {
	Line, Col int
}

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// IsValid reports whether p is a real position.
func (p Pos) IsValid() bool { return p.Line > 0 }

// Token is a lexical token kind.
type Token int

// The tokens.
const (
	ILLEGAL Token = iota
	EOF

	IDENT  // pages
	INT    // 42, 0x2a, 'a'
	FLOAT  // 1.5, 1e3
	STRING // "text", `raw`
	BYTES  // B"bytes", X"0a0b"
	TIME   // T"2006-01-02T15:04:05Z"

	// Operators and punctuation.
	ADD       // +
	SUB       // -
	MUL       // *
	QUO       // /
	REM       // %
	AND       // &
	OR        // |
	XOR       // ^
	SHL       // <<
	SHR       // >>
	LAND      // && and
	LOR       // || or
	NOT       // ! not
	TILDE     // ~
	EQL       // ==
	NEQ       // !=
	LSS       // <
	LEQ       // <=
	GTR       // >
	GEQ       // >=
	ASSIGN    // =
	DEFINE    // :=
	ADDASSIGN // +=
	SUBASSIGN // -=
	MULASSIGN // *=
	QUOASSIGN // /=
	REMASSIGN // %=
	INC       // ++
	DEC       // --
	ARROW     // <-
	LPAREN    // (
	RPAREN    // )
	LBRACK    // [
	RBRACK    // ]
	LBRACE    // {
	RBRACE    // }
	COMMA     // ,
	SEMICOLON // ;
	COLON     // :
	PERIOD    // .

	keywordBeg
	ALL
	ARRAY
	BREAK
	CONTINUE
	EACH
	ELSE
	EMIT
	FALSE
	FOR
	FUNCTION
	IF
	MAP
	OF
	RETURN
	SOME
	STATIC
	TABLE
	TRUE
	TYPE
	WEIGHT
	WHEN
	WHILE
	keywordEnd
)

var tokens = [...]string{
	ILLEGAL: "ILLEGAL", EOF: "end of file", IDENT: "identifier", INT: "integer", FLOAT: "float",
	STRING: "string", BYTES: "bytes literal", TIME: "time literal",
	ADD: "+", SUB: "-", MUL: "*", QUO: "/", REM: "%", AND: "&", OR: "|", XOR: "^", SHL: "<<", SHR: ">>",
	LAND: "&&", LOR: "||", NOT: "!", TILDE: "~", EQL: "==", NEQ: "!=", LSS: "<", LEQ: "<=", GTR: ">", GEQ: ">=",
	ASSIGN: "=", DEFINE: ":=", ADDASSIGN: "+=", SUBASSIGN: "-=", MULASSIGN: "*=", QUOASSIGN: "/=", REMASSIGN: "%=",
	INC: "++", DEC: "--", ARROW: "<-", LPAREN: "(", RPAREN: ")", LBRACK: "[", RBRACK: "]", LBRACE: "{", RBRACE: "}",
	COMMA: ",", SEMICOLON: ";", COLON: ":", PERIOD: ".",
	ALL: "all", ARRAY: "array", BREAK: "break", CONTINUE: "continue", EACH: "each", ELSE: "else", EMIT: "emit",
	FALSE: "false", FOR: "for", FUNCTION: "function", IF: "if", MAP: "map", OF: "of", RETURN: "return",
	SOME: "some", STATIC: "static", TABLE: "table", TRUE: "true", TYPE: "type", WEIGHT: "weight", WHEN: "when", WHILE: "while",
}

func (t Token) String() string {
	if t >= 0 && int(t) < len(tokens) && tokens[t] != "" {
		return tokens[t]
	}
	return fmt.Sprintf("token(%d)", int(t))
}

var keywords = func() map[string]Token {
	m := map[string]Token{"and": LAND, "or": LOR, "not": NOT}
	for t := keywordBeg + 1; t < keywordEnd; t++ {
		m[tokens[t]] = t
	}
	return m
}()

// Precedence returns the binding power of a binary operator, 0 for other
// tokens. Higher binds tighter; the levels are Go's.
func (t Token) Precedence() int {
	switch t {
	case LOR:
		return 1
	case LAND:
		return 2
	case EQL, NEQ, LSS, LEQ, GTR, GEQ:
		return 3
	case ADD, SUB, OR, XOR:
		return 4
	case MUL, QUO, REM, SHL, SHR, AND:
		return 5
	}
	return 0
}
