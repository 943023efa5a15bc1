package filter

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// bytesRegexp is an RE2 pattern compiled with Cloud Bigtable's semantics for
// row keys, qualifiers and values:
//
//   - the pattern must match the whole input (Cloud Bigtable evaluates every
//     regex filter as a full match);
//   - the pattern is UTF-8 and matches UTF-8 (RE2's default mode): '.' matches
//     one whole character except '\n', and never a byte that is not part of
//     valid UTF-8;
//   - \C matches any single byte, which is what Cloud Bigtable tells users to
//     write when they want a true wildcard over binary data.
//
// Go's regexp package differs from RE2 on the last two points: it has no \C,
// and it decodes an invalid byte as U+FFFD, which '.' and negated classes then
// match. So the pattern is parsed with regexp/syntax and rewritten to work on a
// Latin-1 view of the input (one rune per byte): every character class becomes
// the alternation of the UTF-8 byte sequences of its characters, exactly as
// RE2 compiles classes to byte automata, and \C becomes the class of all 256
// bytes.
type bytesRegexp struct {
	pattern string
	re      *regexp.Regexp
	// ascii is the pattern as Go's regexp reads it, with \C as (?s:.). On
	// input that is all ASCII, where every character is one byte, it
	// matches exactly what re does, and much faster: it has no
	// alternations of byte sequences.
	ascii *regexp.Regexp
	// byteLevel is false when the rewritten pattern only ever matches ASCII
	// bytes. Then the Latin-1 view of any input and Go's UTF-8 view of it
	// agree on every byte the pattern can match, and re can run on the raw
	// bytes directly.
	byteLevel bool
}

// errRegexpTooLong is wrapped by compileBytesRegexp when the pattern exceeds
// the limit given to it.
var errRegexpTooLong = errors.New("regular expression too long")

// compileBytesRegexp compiles an RE2 pattern for full-match, byte-safe
// matching. maxLen bounds the pattern length in bytes (0 = no bound).
func compileBytesRegexp(pattern []byte, maxLen int) (*bytesRegexp, error) {
	if maxLen > 0 && len(pattern) > maxLen {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", errRegexpTooLong, len(pattern), maxLen)
	}
	if !utf8.Valid(pattern) {
		// RE2 rejects such patterns in UTF-8 mode too; a raw byte is
		// spelled \xHH only for code points, so binary data needs \C.
		return nil, errors.New("invalid RE2: pattern is not valid UTF-8 (use \\C to match an arbitrary byte)")
	}
	src, anyByte := substituteAnyByte(string(pattern))
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("invalid RE2: %v", unsubstituteError(err, anyByte))
	}
	t := translator{anyByte: anyByte}
	out := t.rewrite(tree)
	// Full match: anchor the whole expression at both ends of the text.
	re, err := regexp.Compile(anchor(out).String())
	if err != nil {
		// The rewrite only grows classes into alternations; the one way
		// this fails is a pattern whose expansion is too large.
		return nil, fmt.Errorf("invalid RE2: %v", err)
	}
	ascii, err := regexp.Compile(anchor(asciiTree(tree, anyByte)).String())
	if err != nil {
		return nil, fmt.Errorf("invalid RE2: %v", err)
	}
	return &bytesRegexp{pattern: string(pattern), re: re, ascii: ascii, byteLevel: t.byteLevel}, nil
}

// anchor makes re match only the whole text.
func anchor(re *syntax.Regexp) *syntax.Regexp {
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{
		{Op: syntax.OpBeginText},
		re,
		{Op: syntax.OpEndText},
	}}
}

// asciiTree returns a copy of re with the groups standing for \C replaced
// by "any character".
func asciiTree(re *syntax.Regexp, anyByte string) *syntax.Regexp {
	if re.Op == syntax.OpCapture && anyByte != "" && strings.HasPrefix(re.Name, anyByte) {
		return &syntax.Regexp{Op: syntax.OpAnyChar}
	}
	out := *re
	if len(re.Sub) > 0 {
		out.Sub = make([]*syntax.Regexp, len(re.Sub))
		for i, s := range re.Sub {
			out.Sub[i] = asciiTree(s, anyByte)
		}
		out.Sub0 = [1]*syntax.Regexp{}
	}
	return &out
}

// Match reports whether the whole of b matches.
func (r *bytesRegexp) Match(b []byte) bool {
	if isASCII(b) {
		return r.ascii.Match(b)
	}
	if !r.byteLevel {
		return r.re.Match(b)
	}
	return r.re.MatchReader(&latin1Reader{b: b})
}

// MatchString reports whether the whole of s matches.
func (r *bytesRegexp) MatchString(s string) bool {
	if isASCIIString(s) {
		return r.ascii.MatchString(s)
	}
	if !r.byteLevel {
		return r.re.MatchString(s)
	}
	return r.re.MatchReader(&latin1Reader{b: []byte(s)})
}

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

// latin1Reader presents each byte as one rune, the view the rewritten
// pattern is written against.
type latin1Reader struct {
	b []byte
	i int
}

func (r *latin1Reader) ReadRune() (rune, int, error) {
	if r.i >= len(r.b) {
		return 0, 0, errEOF
	}
	c := r.b[r.i]
	r.i++
	return rune(c), 1, nil
}

// errEOF ends a latin1Reader; regexp only checks that an error is non-nil.
var errEOF = errors.New("EOF")

// substituteAnyByte replaces each \C outside character classes and \Q…\E by
// an empty named group whose name is unique to this pattern, so that the Go
// parser (which has no \C) accepts the pattern and the rewrite can find the
// spots again. A \C inside a class is left alone: RE2 rejects it there, and so
// does the Go parser. The returned name prefix is "" when there is no \C.
func substituteAnyByte(p string) (string, string) {
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

// translator rewrites a parsed pattern from runes to the Latin-1 byte view.
type translator struct {
	anyByte   string // name prefix of the groups standing for \C
	byteLevel bool   // set once the output can match a byte >= 0x80
}

func (t *translator) rewrite(re *syntax.Regexp) *syntax.Regexp {
	switch re.Op {
	case syntax.OpLiteral:
		subs := make([]*syntax.Regexp, 0, len(re.Rune))
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				subs = append(subs, t.class(foldOrbit(r)))
			} else {
				subs = append(subs, t.class([]rune{r, r}))
			}
		}
		return concat(subs)
	case syntax.OpCharClass:
		return t.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		return t.class([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune})
	case syntax.OpAnyChar:
		return t.class([]rune{0, unicode.MaxRune})
	case syntax.OpCapture:
		if t.anyByte != "" && strings.HasPrefix(re.Name, t.anyByte) {
			t.byteLevel = true
			return &syntax.Regexp{Op: syntax.OpCharClass, Rune: []rune{0, 0xFF}}
		}
		// Named or numbered groups do not matter for a yes/no match;
		// dropping them keeps the rewritten pattern free of names the
		// user chose (which could collide with our \C groups).
		return t.rewrite(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		out := *re
		out.Sub = []*syntax.Regexp{t.rewrite(re.Sub[0])}
		out.Sub0 = [1]*syntax.Regexp{}
		return &out
	case syntax.OpConcat, syntax.OpAlternate:
		out := *re
		out.Sub = make([]*syntax.Regexp, len(re.Sub))
		for i, s := range re.Sub {
			out.Sub[i] = t.rewrite(s)
		}
		out.Sub0 = [1]*syntax.Regexp{}
		return &out
	default:
		// Empty matches, anchors and word boundaries are the same over
		// bytes and over runes: \b only knows ASCII word characters.
		out := *re
		return &out
	}
}

// class returns an expression matching the UTF-8 encoding of exactly one rune
// of the class given as [lo, hi] pairs, over the Latin-1 byte view.
func (t *translator) class(ranges []rune) *syntax.Regexp {
	var ascii []rune
	var alts []*syntax.Regexp
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < utf8.RuneSelf {
			ascii = append(ascii, lo, min(hi, utf8.RuneSelf-1))
			if hi < utf8.RuneSelf {
				continue
			}
			lo = utf8.RuneSelf
		}
		for _, seq := range utf8Sequences(lo, hi) {
			subs := make([]*syntax.Regexp, len(seq))
			for j, br := range seq {
				subs[j] = &syntax.Regexp{Op: syntax.OpCharClass, Rune: []rune{rune(br[0]), rune(br[1])}}
			}
			alts = append(alts, concat(subs))
			t.byteLevel = true
		}
	}
	if len(ascii) > 0 {
		alts = append([]*syntax.Regexp{{Op: syntax.OpCharClass, Rune: ascii}}, alts...)
	}
	switch len(alts) {
	case 0:
		return &syntax.Regexp{Op: syntax.OpNoMatch}
	case 1:
		return alts[0]
	}
	return &syntax.Regexp{Op: syntax.OpAlternate, Sub: alts}
}

func concat(subs []*syntax.Regexp) *syntax.Regexp {
	switch len(subs) {
	case 0:
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	case 1:
		return subs[0]
	}
	return &syntax.Regexp{Op: syntax.OpConcat, Sub: subs}
}

// foldOrbit returns the case-folding orbit of r as sorted [lo, hi] pairs, the
// set of runes (?i) lets a literal r match.
func foldOrbit(r rune) []rune {
	set := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		set = append(set, f)
	}
	out := make([]rune, 0, 2*len(set))
	for _, x := range sortedRunes(set) {
		out = append(out, x, x)
	}
	return out
}

func sortedRunes(rs []rune) []rune {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j] < rs[j-1]; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	return rs
}

// byteRange is an inclusive range of byte values.
type byteRange [2]byte

// utf8Sequences splits the code points [lo, hi] (lo >= 0x80) into sequences
// of byte ranges such that the UTF-8 encodings of exactly those code points
// are the byte strings matching one of the sequences. Surrogates, which have
// no UTF-8 encoding, are left out. This is the construction RE2 and Rust's
// utf8-ranges use.
func utf8Sequences(lo, hi rune) [][]byteRange {
	var out [][]byteRange
	var split func(lo, hi rune)
	split = func(lo, hi rune) {
		if lo > hi {
			return
		}
		// Cut out the surrogates.
		if lo <= 0xDFFF && hi >= 0xD800 {
			split(lo, 0xD7FF)
			split(0xE000, hi)
			return
		}
		// Cut at the boundaries of encoding lengths.
		for _, max := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= max && hi > max {
				split(lo, max)
				split(max+1, hi)
				return
			}
		}
		if hi < utf8.RuneSelf {
			out = append(out, []byteRange{{byte(lo), byte(hi)}})
			return
		}
		// Split until every continuation byte position spans either
		// one value or the full 0x80-0xBF range.
		for i := 1; i < 4; i++ {
			m := rune(1)<<(6*i) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					split(lo, lo|m)
					split((lo|m)+1, hi)
					return
				}
				if hi&m != m {
					split(lo, (hi&^m)-1)
					split(hi&^m, hi)
					return
				}
			}
		}
		var a, b [utf8.UTFMax]byte
		n := utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(b[:], hi)
		seq := make([]byteRange, n)
		for i := range n {
			seq[i] = byteRange{a[i], b[i]}
		}
		out = append(out, seq)
	}
	split(lo, hi)
	return out
}
