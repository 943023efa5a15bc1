package cell

import (
	"bytes"
	"testing"
)

func TestPrefixSuccessor(t *testing.T) {
	for _, c := range []struct{ in, want []byte }{
		{[]byte("abc"), []byte("abd")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
		{nil, nil},
	} {
		if got := PrefixSuccessor(c.in); !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("PrefixSuccessor(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCompareCells(t *testing.T) {
	a := Cell{Family: "f", Qualifier: []byte("q"), Timestamp: 5}
	cases := []struct {
		b    Cell
		want int
	}{
		{Cell{Family: "g", Qualifier: []byte("a"), Timestamp: 9}, -1},
		{Cell{Family: "f", Qualifier: []byte("r"), Timestamp: 9}, -1},
		{Cell{Family: "f", Qualifier: []byte("q"), Timestamp: 4}, -1}, // newer first
		{Cell{Family: "f", Qualifier: []byte("q"), Timestamp: 6}, 1},
		{Cell{Family: "f", Qualifier: []byte("q"), Timestamp: 5}, 0},
	}
	for _, c := range cases {
		if got := CompareCells(a, c.b); got != c.want {
			t.Errorf("CompareCells(%+v, %+v) = %d, want %d", a, c.b, got, c.want)
		}
	}
}

func TestComponentRoundTrip(t *testing.T) {
	var b []byte
	vals := [][]byte{[]byte("a\x00b"), {}, []byte("\x00\x00"), []byte("plain")}
	for _, v := range vals {
		b = AppendComponent(b, v)
	}
	i := 0
	for _, want := range vals {
		got, next, ok := ReadComponent(b, i)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("component at %d: %q %v, want %q", i, got, ok, want)
		}
		i = next
	}
	if i != len(b) {
		t.Fatalf("consumed %d of %d bytes", i, len(b))
	}
	if _, _, ok := ReadComponent([]byte("ab\x00"), 0); ok {
		t.Fatal("unterminated component decoded")
	}
}
