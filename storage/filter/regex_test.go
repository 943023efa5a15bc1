package filter

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"testing"

	"rsc.io/binaryregexp"
)

func TestBytesRegexp(t *testing.T) {
	tests := []struct {
		pattern string
		input   string
		want    bool
	}{
		// Full match, not substring.
		{"abc", "abc", true},
		{"abc", "xabc", false},
		{"abc", "abcx", false},
		{"b", "abc", false},
		{"a.*", "abc", true},
		{".*b.*", "abc", true},
		{"a|ab", "ab", true}, // full match tries every alternative
		{"^abc$", "abc", true},
		{"", "", true},
		{"", "a", false},
		// '.' never matches '\n'; (?s) makes it; \C always does.
		{"a.c", "a\nc", false},
		{"(?s)a.c", "a\nc", true},
		{`a\Cc`, "a\nc", true},
		// Every byte is one character: '.' and \C match one byte.
		{"a.c", "a\u00e9c", false},
		{"a..c", "a\u00e9c", true},
		{`a\C\Cc`, "a\u00e9c", true},
		{`a\Cc`, "a\u00e9c", false},
		{"a.c", "a\xffc", true},
		{"a[^b]c", "a\xffc", true},
		{`a\Cc`, "a\xffc", true},
		{`\C*`, "\x00\xff\n\xc3", true},
		{`\C{3}`, "\x00\xff\n", true},
		{`\C{3}`, "\x00\xff", false},
		{`(\C)+x`, "\x80\x81x", true},
		{`\C|a`, "\xfe", true},
		{`[^a]`, "\xfe", true},
		{`[^\xfe]`, "\xfe", false},
		{`.`, "\u00e9", false}, // two bytes
		// \xHH is the byte HH (the official suite's "RowKeyFilter escaped").
		{`.*j\xC2\xA7.*`, "j\u00a7adams", true},
		{`.*j\xC2\xA7.*`, "j\xc3\x82\xc2\xa7adams", false}, // not U+00C2 in UTF-8
		{`\x{e9}`, "\xe9", true},
		{`\x{e9}`, "\u00e9", false},
		{`[\x80-\xff]+`, "\u4e16\xff", true},
		{`[\x00-\x7f]+`, "\u4e16", false},
		// The pattern's bytes are characters too: a UTF-8 literal matches
		// its bytes; a class of a UTF-8 character is a class of its bytes;
		// a pattern need not be valid UTF-8.
		{"\u00e9", "\u00e9", true},
		{"\u00e9+", "\u00e9\u00e9", false},
		{"\u00e9+", "\u00e9\xa9\xa9", true},
		{"(\u00e9)+", "\u00e9\u00e9", true},
		{"[\u00e9]", "\xc3", true},
		{"[\u00e9]", "\u00e9", false},
		{"\xff", "\xff", true},
		{"a\xfe*b", "a\xfe\xfe\xfeb", true},
		{"\x00.", "\x00\xff", true},
		// Case folding within Latin-1.
		{"(?i)k", "K", true},
		{"(?i)k", "\u212a", false}, // the Kelvin sign is three bytes
		{"(?i)\xe9", "\xc9", true},
		{`(?i)\xe9`, "\xc9", true},
		// Unicode classes keep their Latin-1 members.
		{`\pL`, "\xe9", true},
		{`\pL`, "\xd7", false}, // × is not a letter
		{`\pL+`, "\u4e16", false},
		// \C is literal inside \Q...\E; user groups are fine.
		{`\Qa\C\E`, `a\C`, true},
		{`(?P<name>a)\C`, "a\x01", true},
		{`\\C`, `\C`, true},
		// Multi-line anchors and ASCII word boundaries.
		{"(?m)a$\n^b", "a\nb", true},
		{`\bfoo\b`, "foo", true},
	}
	for _, tt := range tests {
		re, err := compileBytesRegexp([]byte(tt.pattern), 0)
		if err != nil {
			t.Errorf("compile %q: %v", tt.pattern, err)
			continue
		}
		if got := re.Match([]byte(tt.input)); got != tt.want {
			t.Errorf("%q full-matching %q = %v, want %v", tt.pattern, tt.input, got, tt.want)
		}
		if got := re.MatchString(tt.input); got != tt.want {
			t.Errorf("%q MatchString %q = %v, want %v", tt.pattern, tt.input, got, tt.want)
		}
	}
}

func TestBytesRegexpErrors(t *testing.T) {
	for _, p := range []string{"(", "a**", `[\C]`, `\8`, "a{1001}", `\C**`} {
		if _, err := compileBytesRegexp([]byte(p), 0); err == nil {
			t.Errorf("compile %q: no error", p)
		}
	}
	if _, err := compileBytesRegexp([]byte("abcd"), 3); err == nil {
		t.Error("pattern over the length limit compiled")
	}
}

func TestBytesRegexpLiteral(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		lit     string
		ok      bool
	}{
		{"abc", "abc", true},
		{"(abc)", "abc", true},
		{"", "", true},
		{"\u00e9", "\u00e9", true},
		{`\xff`, "\xff", true},
		{"a.", "", false},
		{"(?i)a", "", false},
		{"a|b", "", false},
	} {
		re, err := compileBytesRegexp([]byte(tt.pattern), 0)
		if err != nil {
			t.Fatal(err)
		}
		if re.literal != tt.lit || re.hasLiteral != tt.ok {
			t.Errorf("%q: literal (%q, %v), want (%q, %v)", tt.pattern, re.literal, re.hasLiteral, tt.lit, tt.ok)
		}
		if tt.ok && !re.MatchString(tt.lit) {
			t.Errorf("%q does not match its own literal %q", tt.pattern, tt.lit)
		}
	}
}

// On ASCII patterns and inputs, Latin-1 mode and Go's regexp agree.
func TestBytesRegexpAgreesWithRegexpOnASCII(t *testing.T) {
	patterns := []string{"a.b", "[^x]*", "(?i)strasse", `\w+e?`, "[[:alpha:]]+", `\pL+`, "x{2,3}y?", "(a|b)*", "(?U)a+?"}
	inputs := []string{"", "ab", "aeb", "aXb", "STRASSE", "hello", "bab", "xxy", "xxxx", "aaa"}
	for _, p := range patterns {
		ours, err := compileBytesRegexp([]byte(p), 0)
		if err != nil {
			t.Fatalf("compile %q: %v", p, err)
		}
		std := regexp.MustCompile(`^(?:` + p + `)$`)
		for _, in := range inputs {
			if got, want := ours.Match([]byte(in)), std.MatchString(in); got != want {
				t.Errorf("%q on %q: got %v, regexp says %v", p, in, got, want)
			}
		}
	}
}

// Against the byte-wise fork of Go's regexp that the official emulator uses
// for the same Latin-1 semantics (patterns with their non-ASCII bytes
// escaped, as the emulator does), on random binary inputs.
func TestBytesRegexpAgreesWithBinaryRegexp(t *testing.T) {
	patterns := []string{
		".", "..", ".*", "a.c", "[^a]", "[^a]+", `[\x80-\xff]`, `\xc2\xa7`, "(?s).", "[a-c\xe9]*",
		"\xe9", "\xe9+", "(?i)\xe9", "(?i)[a-z\xe0-\xfe]+", `\pL*`, `[[:^alpha:]]`, `\W+`, "a|\xff|.\xfe",
		"[^\n]{2}", "x{1,3}.?",
		// Literals, matched by comparison.
		"a", "abc", "(ab)c", "", `\xc2\xa7`, "\xe9b", "a\nb", `\x00`,
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{'a', 'b', 'c', 'x', '\n', 0, 0x7f, 0x80, 0xa7, 0xc2, 0xc9, 0xd7, 0xe9, 0xfe, 0xff}
	for _, p := range patterns {
		ours, err := compileBytesRegexp([]byte(p), 0)
		if err != nil {
			t.Fatalf("compile %q: %v", p, err)
		}
		ref := binaryregexp.MustCompile(`^(?:` + string(escapeNonASCII([]byte(p))) + `)$`)
		for range 400 {
			in := make([]byte, r.IntN(5))
			for i := range in {
				in[i] = alphabet[r.IntN(len(alphabet))]
			}
			if got, want := ours.Match(in), ref.Match(in); got != want {
				t.Errorf("%q on %q: got %v, binaryregexp says %v", p, in, got, want)
			}
		}
	}
}

// escapeNonASCII spells each byte >= 0x80 as \xHH, how the emulator hands a
// pattern to binaryregexp (whose parser reads UTF-8).
func escapeNonASCII(p []byte) []byte {
	var out bytes.Buffer
	for _, c := range p {
		if c >= 0x80 {
			out.WriteString(`\x`)
			out.WriteString("0123456789ABCDEF"[c>>4 : c>>4+1])
			out.WriteString("0123456789ABCDEF"[c&15 : c&15+1])
		} else {
			out.WriteByte(c)
		}
	}
	return out.Bytes()
}

// BenchmarkBytesRegexpMatch: a family name against a literal pattern (as
// the official clients' FamilyFilter sends one), matched by comparison,
// and against a pattern that needs the regexp machine.
func BenchmarkBytesRegexpMatch(b *testing.B) {
	for _, p := range []string{"family", "fam.*"} {
		re, err := compileBytesRegexp([]byte(p), 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			for b.Loop() {
				if !re.MatchString("family") {
					b.Fatal("no match")
				}
			}
		})
	}
}
