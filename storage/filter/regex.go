package filter

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// bytesRegexp is an RE2 pattern compiled with Cloud Bigtable's semantics for
// row keys, family names, qualifiers and values, which are RE2's Latin-1
// mode over raw bytes:
//
//   - the pattern must match the whole input (Cloud Bigtable evaluates every
//     regex filter as a full match);
//   - every byte of the input is one character (U+0000..U+00FF): '.' matches
//     any one byte except '\n', a negated class matches any byte outside it,
//     and \xHH (or \x{HH}) is the byte HH. So `\xC2\xA7` matches the UTF-8
//     encoding of '§', as the official client's integration suite expects of
//     the service;
//   - the pattern's own bytes are Latin-1 characters too: a UTF-8 literal
//     such as "§" is its two bytes in sequence and matches those two bytes,
//     and a pattern need not be valid UTF-8;
//   - \C matches any single byte, '\n' included (Cloud Bigtable's documented
//     "true wildcard");
//   - (?i) folds case within Latin-1, and Unicode classes (\pL, [[:alpha:]])
//     keep only their members up to U+00FF, as RE2 compiles them in Latin-1
//     mode.
//
// The official emulator (bttest) implements the same mode with a byte-wise
// fork of Go's regexp. Here Go's own regexp is used on a Latin-1 view: the
// pattern's bytes are read as the runes U+0000..U+00FF, and an input that is
// not all ASCII is presented to the compiled program with each byte as the
// rune of the same value. Since the view holds no rune above U+00FF, every
// construct of the pattern (classes, '.', case folding) behaves on it exactly
// as RE2's Latin-1 mode does on the bytes; on ASCII input the view is the
// input itself.
type bytesRegexp struct {
	pattern string
	re      *regexp.Regexp
	// literal is the only string the pattern matches, when it matches
	// exactly one (hasLiteral): matching is then a comparison (the
	// official clients' FamilyFilter and ColumnFilter send names as
	// patterns, and a filter matches each cell), and the read planner
	// uses it to narrow the families it opens.
	literal    string
	hasLiteral bool
}

// errRegexpTooLong is wrapped by compileBytesRegexp when the pattern exceeds
// the limit given to it.
var errRegexpTooLong = errors.New("regular expression too long")

// compileBytesRegexp compiles an RE2 pattern for full-match matching over
// bytes in Latin-1 mode. maxLen bounds the pattern length in bytes (0 = no
// bound). The error says what is wrong with the pattern (prefixed "invalid
// RE2") or that it is too long.
func compileBytesRegexp(pattern []byte, maxLen int) (*bytesRegexp, error) {
	if maxLen > 0 && len(pattern) > maxLen {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errRegexpTooLong, len(pattern), maxLen)
	}
	src, anyByte := substituteAnyByte(latin1ToUTF8(nil, pattern))
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("invalid RE2: %v", unsubstituteError(err, anyByte))
	}
	out := replaceAnyByte(tree, anyByte)
	// Full match: anchor the whole expression at both ends of the text.
	re, err := regexp.Compile(anchor(out).String())
	if err != nil {
		return nil, fmt.Errorf("invalid RE2: %v", err)
	}
	lit, ok := literalOf(out)
	return &bytesRegexp{pattern: string(pattern), re: re, literal: lit, hasLiteral: ok}, nil
}

// latin1ToUTF8 appends to dst the UTF-8 encoding of b read as Latin-1: each
// byte becomes the rune of the same value.
func latin1ToUTF8(dst, b []byte) []byte {
	for _, c := range b {
		if c < utf8.RuneSelf {
			dst = append(dst, c)
		} else {
			dst = append(dst, 0xC0|c>>6, 0x80|c&0x3F)
		}
	}
	return dst
}

// anchor makes re match only the whole text.
func anchor(re *syntax.Regexp) *syntax.Regexp {
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{
		{Op: syntax.OpBeginText},
		re,
		{Op: syntax.OpEndText},
	}}
}

// replaceAnyByte returns a copy of re with the groups standing for \C
// replaced by "any character" ('\n' included), which on the Latin-1 view is
// any byte, and with every other capture group dropped (groups do not matter
// to a yes/no match, and dropping them keeps user-chosen names from
// colliding with ours).
func replaceAnyByte(re *syntax.Regexp, anyByte string) *syntax.Regexp {
	if re.Op == syntax.OpCapture {
		if anyByte != "" && strings.HasPrefix(re.Name, anyByte) {
			return &syntax.Regexp{Op: syntax.OpAnyChar}
		}
		return replaceAnyByte(re.Sub[0], anyByte)
	}
	out := *re
	if len(re.Sub) > 0 {
		out.Sub = make([]*syntax.Regexp, len(re.Sub))
		for i, s := range re.Sub {
			out.Sub[i] = replaceAnyByte(s, anyByte)
		}
		out.Sub0 = [1]*syntax.Regexp{}
	}
	return &out
}

// literalOf reports whether re (over the Latin-1 view, without captures)
// matches exactly one string under full-match semantics, and returns that
// string as bytes.
func literalOf(re *syntax.Regexp) (string, bool) {
	re = re.Simplify()
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return "", false
		}
		b := make([]byte, len(re.Rune))
		for i, r := range re.Rune {
			if r > 0xFF {
				// Matches no byte string at all; not worth narrowing.
				return "", false
			}
			b[i] = byte(r)
		}
		return string(b), true
	case syntax.OpEmptyMatch:
		return "", true
	}
	return "", false
}

// Match reports whether the whole of b matches.
func (r *bytesRegexp) Match(b []byte) bool {
	if r.hasLiteral {
		return string(b) == r.literal
	}
	if isASCII(b) {
		return r.re.Match(b)
	}
	bp := latin1Bufs.Get().(*[]byte)
	v := latin1ToUTF8((*bp)[:0], b)
	ok := r.re.Match(v)
	if cap(v) <= maxPooledBuf {
		*bp = v
		latin1Bufs.Put(bp)
	}
	return ok
}

// MatchString reports whether the whole of s matches.
func (r *bytesRegexp) MatchString(s string) bool {
	if r.hasLiteral {
		return s == r.literal
	}
	if isASCIIString(s) {
		return r.re.MatchString(s)
	}
	return r.Match([]byte(s))
}

// latin1Bufs holds the buffers of Latin-1 views of non-ASCII inputs, so that
// matching many cells does not allocate one each.
var latin1Bufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// maxPooledBuf keeps huge values' views out of the pool.
const maxPooledBuf = 64 << 10

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isASCIIString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// substituteAnyByte replaces each \C outside character classes and \Q…\E by
// an empty named group whose name is unique to this pattern, so that the Go
// parser (which has no \C) accepts the pattern and the rewrite can find the
// spots again. A \C inside a class is left alone: RE2 rejects it there, and so
// does the Go parser. The returned name prefix is "" when there is no \C.
func substituteAnyByte(pb []byte) (string, string) {
	p := string(pb)
	if !strings.Contains(p, `\C`) {
		return p, ""
	}
	prefix := "tabulaAnyByte"
	for strings.Contains(p, prefix) {
		prefix += "X"
	}
	var b strings.Builder
	n := 0
	inClass, inQuote := false, false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case inQuote:
			if c == '\\' && i+1 < len(p) && p[i+1] == 'E' {
				inQuote = false
				b.WriteString(`\E`)
				i++
				continue
			}
			b.WriteByte(c)
		case c == '\\' && i+1 < len(p):
			next := p[i+1]
			i++
			switch {
			case next == 'Q' && !inClass:
				inQuote = true
				b.WriteString(`\Q`)
			case next == 'C' && !inClass:
				b.WriteString("(?P<" + prefix + strconv.Itoa(n) + ">)")
				n++
			default:
				b.WriteByte('\\')
				b.WriteByte(next)
			}
		case inClass:
			if c == '[' && i+1 < len(p) && p[i+1] == ':' {
				// A POSIX class such as [:alpha:] inside a bracket.
				if end := strings.Index(p[i+2:], ":]"); end >= 0 {
					b.WriteString(p[i : i+2+end+2])
					i += 2 + end + 1
					continue
				}
			}
			if c == ']' {
				inClass = false
			}
			b.WriteByte(c)
		case c == '[':
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal, not the end.
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), prefix
}

// unsubstituteError turns the parser's quote of a substituted group back into
// \C, so that error messages quote what the user wrote.
func unsubstituteError(err error, prefix string) string {
	msg := err.Error()
	if prefix == "" {
		return msg
	}
	re := regexp.MustCompile(`\(\?P<` + regexp.QuoteMeta(prefix) + `[0-9]+>\)`)
	return re.ReplaceAllLiteralString(msg, `\C`)
}
