package filter

import (
	"regexp"
	"testing"
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
		// '.' never matches '\n'; (?s) makes it.
		{"a.c", "a\nc", false},
		{"(?s)a.c", "a\nc", true},
		{`a\Cc`, "a\nc", true},
		// '.' matches one whole UTF-8 character, not a byte.
		{"a.c", "a\u00e9c", true},
		{"a..c", "a\u00e9c", false},
		{`a\C\Cc`, "a\u00e9c", true},
		{`a\Cc`, "a\u00e9c", false},
		// '.' and negated classes never match bytes outside valid UTF-8.
		{"a.c", "a\xffc", false},
		{"a[^b]c", "a\xffc", false},
		{`a\Cc`, "a\xffc", true},
		{`\C*`, "\x00\xff\n\xc3", true},
		{`\C{3}`, "\x00\xff\n", true},
		{`\C{3}`, "\x00\xff", false},
		{`(\C)+x`, "\x80\x81x", true},
		{`\C|a`, "\xfe", true},
		{`[^a]`, "\xfe", false},
		// Literals and classes of non-ASCII characters match their UTF-8 bytes.
		{"\u00e9+", "\u00e9\u00e9", true},
		{"[\u00e9\u4e16]", "\u4e16", true},
		{"[\u00e9\u4e16]", "\xc3", false},
		{`\x{e9}`, "\u00e9", true},
		{`\x{e9}`, "\xe9", false},
		{"[\u0080-\U0010FFFF]", "\U0001F600", true},
		{"[\u0080-\U0010FFFF]", "\xed\xa0\x80", false}, // an encoded surrogate is not UTF-8
		// Case folding, including the Kelvin sign in k's orbit.
		{"(?i)k", "K", true},
		{"(?i)k", "\u212a", true},
		{"(?i)\u00e9", "\u00c9", true},
		// \C is literal inside \Q...\E; user groups are fine.
		{`\Qa\C\E`, `a\C`, true},
		{`(?P<name>a)\C`, "a\x01", true},
		{`\\C`, `\C`, true},
		// Multi-line anchors.
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
		// The byte-level program must agree with the ASCII fast path.
		if got := re.re.MatchReader(&latin1Reader{b: []byte(tt.input)}); got != tt.want {
			t.Errorf("%q byte-level program on %q = %v, want %v", tt.pattern, tt.input, got, tt.want)
		}
	}
}

func TestBytesRegexpErrors(t *testing.T) {
	for _, p := range []string{"(", "a**", `[\C]`, "\xff", `\8`, "a{1001}"} {
		if _, err := compileBytesRegexp([]byte(p), 0); err == nil {
			t.Errorf("compile %q: no error", p)
		}
	}
	if _, err := compileBytesRegexp([]byte("abcd"), 3); err == nil {
		t.Error("pattern over the length limit compiled")
	}
}

// On valid UTF-8 input, the rewritten pattern must agree with Go's own regexp
// (which implements RE2 syntax over UTF-8) anchored at both ends.
func TestBytesRegexpAgreesWithRegexpOnUTF8(t *testing.T) {
	patterns := []string{"a.b", "[^x]*", "(?i)straße", "\\w+\u00e9?", "[[:alpha:]]+", "\\pL+", "x{2,3}y?", "(a|\u4e16)*", "(?U)a+?"}
	inputs := []string{"", "ab", "a\u00e9b", "aXb", "STRASSE", "stra\u00dfe", "hello\u00e9", "\u4e16a\u4e16", "xxy", "xxxx", "aaa"}
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
