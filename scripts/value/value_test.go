package value

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

var nested = TupleOf(
	Field{"n", IntType}, Field{"f", FloatType}, Field{"b", BoolType}, Field{"s", StringType},
	Field{"y", BytesType}, Field{"t", TimeType},
	Field{"a", ArrayOf(MapOf(StringType, ArrayOf(IntType)))},
)

func sampleNested() Value {
	m := NewMap()
	m.Set(MakeString("k"), Value{R: &ArrayVal{Elems: []Value{MakeInt(-1), MakeInt(1 << 40)}}})
	m.Set(MakeString(""), Value{R: &ArrayVal{}})
	return Value{R: &TupleVal{Fields: []Value{
		MakeInt(math.MinInt64), MakeFloat(-2.5), MakeBool(true), MakeString("héllo"),
		MakeString("\x00\xff"), MakeInt(1_700_000_000_000_000),
		{R: &ArrayVal{Elems: []Value{{R: m}, {R: NewMap()}}}},
	}}}
}

// TestRoundTrip checks that Decode inverts Append, leaving nothing behind.
func TestRoundTrip(t *testing.T) {
	v := sampleNested()
	b := Append([]byte("prefix"), nested, v)
	got, rest, err := Decode(b[len("prefix"):], nested)
	if err != nil || len(rest) != 0 {
		t.Fatalf("Decode: %v, %d bytes left", err, len(rest))
	}
	if !Equal(nested, got, v) {
		t.Fatalf("got %s, want %s", Format(nested, got), Format(nested, v))
	}
	if c := Clone(nested, v); !Equal(nested, c, v) || c.R == v.R {
		t.Fatal("Clone is not a deep, equal copy")
	}
}

// TestDecodeTruncated checks that every truncation is an error.
func TestDecodeTruncated(t *testing.T) {
	b := Append(nil, nested, sampleNested())
	for i := range b {
		if _, _, err := Decode(b[:i], nested); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated at %d of %d: %v", i, len(b), err)
		}
	}
}

// TestDecodeHugeCount checks that a length prefix cannot make Decode
// allocate more than the input justifies.
func TestDecodeHugeCount(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	for _, typ := range []*Type{StringType, ArrayOf(IntType), MapOf(IntType, IntType)} {
		if _, _, err := Decode(huge, typ); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%v: %v", typ, err)
		}
	}
	if _, _, err := Decode([]byte{2}, BoolType); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bool 2: %v", err)
	}
}

// TestCompare checks the orders Compare defines.
func TestCompare(t *testing.T) {
	arr := func(ns ...int64) Value {
		e := make([]Value, len(ns))
		for i, n := range ns {
			e[i] = MakeInt(n)
		}
		return Value{R: &ArrayVal{Elems: e}}
	}
	cases := []struct {
		t    *Type
		a, b Value
		want int
	}{
		{IntType, MakeInt(-1), MakeInt(1), -1},
		{FloatType, MakeFloat(math.NaN()), MakeFloat(-1), -1},
		{FloatType, MakeFloat(2), MakeFloat(1), 1},
		{StringType, MakeString("a"), MakeString("ab"), -1},
		{BoolType, MakeBool(false), MakeBool(true), -1},
		{ArrayOf(IntType), arr(1, 2), arr(1, 2, 0), -1},
		{ArrayOf(IntType), arr(1, 3), arr(1, 2, 0), 1},
		{ArrayOf(IntType), arr(1, 2), arr(1, 2), 0},
	}
	for _, c := range cases {
		if got := Compare(c.t, c.a, c.b); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", Format(c.t, c.a), Format(c.t, c.b), got, c.want)
		}
	}
}

// TestRender checks the JSON and text renderings.
func TestRender(t *testing.T) {
	b, err := json.Marshal(ToJSON(nested, sampleNested()))
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"a":[[{"key":"k","value":[-1,1099511627776]},{"key":"","value":[]}],[]],"b":true,"f":-2.5,"n":-9223372036854775808,"s":"héllo","t":"2023-11-14T22:13:20Z","y":"AP8="}`
	if string(b) != wantJSON {
		t.Errorf("JSON\ngot  %s\nwant %s", b, wantJSON)
	}
	wantText := `{n: -9223372036854775808, f: -2.5, b: true, s: "héllo", y: B"\x00\xff", t: T"2023-11-14T22:13:20Z", a: {{"k": {-1, 1099511627776}, "": {}}, {:}}}`
	if got := Format(nested, sampleNested()); got != wantText {
		t.Errorf("text\ngot  %s\nwant %s", got, wantText)
	}
	if got := ToJSON(FloatType, MakeFloat(math.Inf(1))); got != "+Inf" {
		t.Errorf("+Inf renders as %v", got)
	}
	if got := CellType.String(); got != "Cell" {
		t.Errorf("CellType.String() = %q", got)
	}
	if got := MapOf(StringType, ArrayOf(CellType)).Signature(); got != "map[string] of array of {string, bytes, int, bytes}" {
		t.Errorf("Signature = %q", got)
	}
}
