package keyrange

import (
	"bytes"
	"math"
	"testing"
)

func TestInterpolate(t *testing.T) {
	tests := []struct {
		name     string
		from     string
		end      string
		f        float64
		want     string
		wantOK   bool
		strictly bool // want unspecified: only check from < s < end
	}{
		{name: "half of a to b", from: "a", end: "b", f: 0.5, want: "a\x80", wantOK: true},
		{name: "zero is from", from: "a", end: "b", f: 0, want: "a", wantOK: true},
		{name: "negative is from", from: "a", end: "b", f: -3, want: "a", wantOK: true},
		{name: "NaN is from", from: "a", end: "b", f: math.NaN(), want: "a", wantOK: true},
		{name: "one rounds to end", from: "a", end: "b", f: 1, wantOK: false},
		{name: "above one is clamped", from: "a", end: "b", f: 7, wantOK: false},
		{name: "unbounded end, half", from: "", end: "", f: 0.5, want: "\x80", wantOK: true},
		{name: "unbounded end from a key", from: "\x80", end: "", f: 0.5, want: "\xc0", wantOK: true},
		{name: "unbounded end near the top", from: "\xff", end: "", f: 0.999, strictly: true, wantOK: true},
		{name: "unbounded end, one is the end", from: "\xff", end: "", f: 1, wantOK: false},
		{name: "common prefix", from: "com.cnn.www/a", end: "com.cnn.www/c", f: 0.5, want: "com.cnn.www/b", wantOK: true},
		{name: "from is a prefix of end", from: "ab", end: "abc", f: 0.5, strictly: true, wantOK: true},
		{name: "from ends in zero", from: "ab\x00", end: "ab\x01", f: 0.5, strictly: true, wantOK: true},
		{name: "tiny fraction still moves off from", from: "a", end: "b", f: 1e-12, strictly: true, wantOK: true},
		{name: "no key strictly between: end is from+zero", from: "ab", end: "ab\x00", f: 0.5, wantOK: false},
		{name: "no key strictly between: end is from+zeros", from: "ab", end: "ab\x00\x00\x00", f: 0.5, wantOK: false},
		{name: "empty range", from: "b", end: "b", f: 0.5, wantOK: false},
		{name: "inverted range", from: "c", end: "b", f: 0.5, wantOK: false},
		{name: "empty range at zero", from: "b", end: "b", f: 0, wantOK: false},
		{name: "adjacent bytes", from: "a\xff", end: "b", f: 0.5, want: "a\xff\x80", wantOK: true},
		{name: "long keys", from: string(bytes.Repeat([]byte("k"), 1000)) + "a", end: string(bytes.Repeat([]byte("k"), 1000)) + "b", f: 0.25, want: string(bytes.Repeat([]byte("k"), 1000)) + "a\x40", wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := Interpolate([]byte(tc.from), []byte(tc.end), tc.f)
			if ok != tc.wantOK {
				t.Fatalf("Interpolate(%q, %q, %v) ok = %v (s %q), want %v", tc.from, tc.end, tc.f, ok, s, tc.wantOK)
			}
			if !ok {
				return
			}
			if bytes.Compare(s, []byte(tc.from)) < 0 || tc.end != "" && bytes.Compare(s, []byte(tc.end)) >= 0 {
				t.Fatalf("Interpolate(%q, %q, %v) = %q, outside [from, end)", tc.from, tc.end, tc.f, s)
			}
			if tc.strictly {
				if tc.f > 0 && bytes.Equal(s, []byte(tc.from)) {
					t.Fatalf("Interpolate(%q, %q, %v) = from, want a key after it", tc.from, tc.end, tc.f)
				}
				return
			}
			if string(s) != tc.want {
				t.Fatalf("Interpolate(%q, %q, %v) = %q, want %q", tc.from, tc.end, tc.f, s, tc.want)
			}
		})
	}
}

func TestPosition(t *testing.T) {
	tests := []struct {
		start, end, key string
		want            float64
	}{
		{"a", "b", "a", 0},
		{"a", "b", "a\x80", 0.5},
		{"a", "b", "b", 1},
		{"a", "b", "c", 1},
		{"a", "b", "0", 0},
		{"", "", "\x80", 0.5},
		{"", "", "\x40", 0.25},
		{"com.a", "com.c", "com.b", 0.5},
		{"ab", "ab\x00", "ab", 0}, // bounds with the same fraction
	}
	for _, tc := range tests {
		got := Position([]byte(tc.start), []byte(tc.end), []byte(tc.key))
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Position(%q, %q, %q) = %v, want %v", tc.start, tc.end, tc.key, got, tc.want)
		}
	}
}

func TestRestriction(t *testing.T) {
	r := Restriction{Start: []byte("b"), End: []byte("d")}
	for key, want := range map[string]bool{"a": false, "b": true, "c\xff": true, "d": false, "e": false} {
		if got := r.Contains([]byte(key)); got != want {
			t.Errorf("%v.Contains(%q) = %v, want %v", r, key, got, want)
		}
	}
	if r.Empty() || r.Unbounded() {
		t.Errorf("%v: Empty %v Unbounded %v, want false false", r, r.Empty(), r.Unbounded())
	}
	u := Restriction{Start: []byte("b")}
	if !u.Unbounded() || u.Empty() || !u.Contains([]byte("\xff\xff")) {
		t.Errorf("%v: want unbounded, non-empty, containing \\xff\\xff", u)
	}
	if e := (Restriction{Start: []byte("b"), End: []byte("b")}); !e.Empty() {
		t.Errorf("%v.Empty() = false", e)
	}
}

func TestCoderRoundTrip(t *testing.T) {
	for _, r := range []Restriction{
		{},
		{Start: []byte("a"), End: []byte("b"), Bytes: 12345},
		{Start: []byte("a\x00"), Bytes: -1},
		{Start: bytes.Repeat([]byte{0xff}, 300), End: bytes.Repeat([]byte{0xff}, 301), Bytes: math.MaxInt64},
	} {
		enc, err := EncodeRestriction(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRestriction(enc)
		if err != nil {
			t.Fatalf("DecodeRestriction(EncodeRestriction(%v)): %v", r, err)
		}
		if !bytes.Equal(got.Start, r.Start) || !bytes.Equal(got.End, r.End) || got.Bytes != r.Bytes {
			t.Fatalf("round trip of %v = %v", r, got)
		}
		for cut := 0; cut < len(enc); cut++ {
			if _, err := DecodeRestriction(enc[:cut]); err == nil {
				t.Fatalf("DecodeRestriction of %d of %d bytes of %v succeeded", cut, len(enc), r)
			}
		}
		if _, err := DecodeRestriction(append(enc, 0)); err == nil {
			t.Fatalf("DecodeRestriction with a trailing byte succeeded")
		}
	}
}
