package syntax

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// item is one token with its position and, for literals and identifiers,
// its source text.
type item struct {
	tok Token
	pos Pos
	lit string
}

// lexer splits source into items. Comments run from # to the end of the
// line, as in Sawzall; // works too. Statements end with explicit
// semicolons, so newlines are plain white space.
type lexer struct {
	src  string
	off  int
	line int
	col  int
	errs func(Pos, string)
}

func lex(src string, errs func(Pos, string)) []item {
	l := &lexer{src: src, line: 1, col: 1, errs: errs}
	items := make([]item, 0, len(src)/4+1) // about one token per 4 bytes
	for {
		it := l.next()
		items = append(items, it)
		if it.tok == EOF {
			return items
		}
	}
}

func (l *lexer) peekByte(k int) byte {
	if l.off+k < len(l.src) {
		return l.src[l.off+k]
	}
	return 0
}

// advance consumes n bytes that contain no newline.
func (l *lexer) advance(n int) {
	l.off += n
	l.col += n
}

func (l *lexer) skipSpace() {
	for l.off < len(l.src) {
		c := l.src[l.off]
		switch {
		case c == '\n':
			l.off++
			l.line++
			l.col = 1
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			l.advance(1)
		case c == '#' || (c == '/' && l.peekByte(1) == '/'):
			for l.off < len(l.src) && l.src[l.off] != '\n' {
				l.advance(1)
			}
		default:
			return
		}
	}
}

// next returns the next token, skipping (and reporting) invalid characters.
func (l *lexer) next() item {
	for {
		if it, ok := l.scan(); ok {
			return it
		}
	}
}

// scan returns the next token, or false after reporting an invalid
// character.
func (l *lexer) scan() (item, bool) {
	l.skipSpace()
	pos := Pos{l.line, l.col}
	if l.off >= len(l.src) {
		return item{tok: EOF, pos: pos}, true
	}
	c := l.src[l.off]
	switch {
	case (c == 'B' || c == 'X' || c == 'T') && (l.peekByte(1) == '"' || l.peekByte(1) == '`'):
		l.advance(1)
		s := l.quoted(pos)
		tok := BYTES
		if c == 'T' {
			tok = TIME
		}
		return item{tok: tok, pos: pos, lit: string(c) + s}, true
	case isLetter(c) || c >= utf8.RuneSelf:
		start := l.off
		for l.off < len(l.src) {
			r, n := utf8.DecodeRuneInString(l.src[l.off:])
			if !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
				if l.off == start {
					l.advance(n)
					l.errs(pos, fmt.Sprintf("invalid character %q", r))
					return item{}, false
				}
				break
			}
			l.advance(n)
		}
		word := l.src[start:l.off]
		if t, ok := keywords[word]; ok {
			return item{tok: t, pos: pos, lit: word}, true
		}
		return item{tok: IDENT, pos: pos, lit: word}, true
	case isDigit(c) || (c == '.' && isDigit(l.peekByte(1))):
		return l.number(pos), true
	case c == '"' || c == '`':
		return item{tok: STRING, pos: pos, lit: l.quoted(pos)}, true
	case c == '\'':
		return item{tok: INT, pos: pos, lit: l.quoted(pos)}, true
	}
	// Operators: longest match first.
	if l.off+1 < len(l.src) {
		if t, ok := twoCharOps[l.src[l.off:l.off+2]]; ok {
			l.advance(2)
			return item{tok: t, pos: pos, lit: l.src[l.off-2 : l.off]}, true
		}
	}
	if t := oneCharOps[c]; t != ILLEGAL {
		l.advance(1)
		return item{tok: t, pos: pos, lit: l.src[l.off-1 : l.off]}, true
	}
	l.advance(1)
	l.errs(pos, fmt.Sprintf("invalid character %q", c))
	return item{}, false
}

var twoCharOps = map[string]Token{
	"<<": SHL, ">>": SHR, "&&": LAND, "||": LOR, "==": EQL, "!=": NEQ, "<=": LEQ, ">=": GEQ,
	":=": DEFINE, "+=": ADDASSIGN, "-=": SUBASSIGN, "*=": MULASSIGN, "/=": QUOASSIGN, "%=": REMASSIGN,
	"++": INC, "--": DEC, "<-": ARROW,
}

var oneCharOps = [256]Token{
	'+': ADD, '-': SUB, '*': MUL, '/': QUO, '%': REM, '&': AND, '|': OR, '^': XOR, '!': NOT, '~': TILDE,
	'<': LSS, '>': GTR, '=': ASSIGN, '(': LPAREN, ')': RPAREN, '[': LBRACK, ']': RBRACK, '{': LBRACE,
	'}': RBRACE, ',': COMMA, ';': SEMICOLON, ':': COLON, '.': PERIOD,
}

// number scans an integer or float literal; the parser converts it.
func (l *lexer) number(pos Pos) item {
	start := l.off
	tok := INT
	if l.src[l.off] == '0' && (l.peekByte(1) == 'x' || l.peekByte(1) == 'X') {
		l.advance(2)
		for l.off < len(l.src) && isHex(l.src[l.off]) {
			l.advance(1)
		}
		return item{tok: INT, pos: pos, lit: l.src[start:l.off]}
	}
	for l.off < len(l.src) && isDigit(l.src[l.off]) {
		l.advance(1)
	}
	if l.peekByte(0) == '.' && isDigit(l.peekByte(1)) {
		tok = FLOAT
		l.advance(1)
		for l.off < len(l.src) && isDigit(l.src[l.off]) {
			l.advance(1)
		}
	}
	if c := l.peekByte(0); c == 'e' || c == 'E' {
		k := 1
		if s := l.peekByte(1); s == '+' || s == '-' {
			k = 2
		}
		if isDigit(l.peekByte(k)) {
			tok = FLOAT
			l.advance(k)
			for l.off < len(l.src) && isDigit(l.src[l.off]) {
				l.advance(1)
			}
		}
	}
	return item{tok: tok, pos: pos, lit: l.src[start:l.off]}
}

// quoted scans a quoted literal starting at the quote character and returns
// it with its quotes; the parser unquotes it. Only raw (backquoted) strings
// may span lines.
func (l *lexer) quoted(pos Pos) string {
	q := l.src[l.off]
	start := l.off
	l.advance(1)
	for l.off < len(l.src) {
		c := l.src[l.off]
		switch {
		case c == q:
			l.advance(1)
			return l.src[start:l.off]
		case c == '\\' && q != '`':
			l.advance(1)
			if l.off < len(l.src) && l.src[l.off] != '\n' {
				l.advance(1)
			}
		case c == '\n':
			if q != '`' {
				l.errs(pos, "literal not terminated")
				return l.src[start:l.off]
			}
			l.off++
			l.line++
			l.col = 1
		default:
			l.advance(1)
		}
	}
	l.errs(pos, "literal not terminated")
	return l.src[start:l.off]
}

func isLetter(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isHex(c byte) bool    { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
