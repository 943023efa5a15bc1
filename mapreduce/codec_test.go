package mapreduce

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/storage/client"
)

// TestCodecsPreserveOrder: the key codecs' encodings sort as their values
// and decode back.
func TestCodecsPreserveOrder(t *testing.T) {
	ints := []int64{math.MinInt64, -1 << 40, -2, -1, 0, 1, 2, 1 << 40, math.MaxInt64}
	floats := []float64{math.Inf(-1), -1e300, -1.5, -0.0, 0, 1e-300, 1.5, 1e300, math.Inf(1)}
	strs := []string{"", "a", "a\x00", "ab", "b", "\xff"}
	check := func(name string, enc [][]byte) {
		if !slices.IsSortedFunc(enc, bytes.Compare) {
			t.Errorf("%s encodings out of order: %x", name, enc)
		}
	}
	var e [][]byte
	for _, v := range ints {
		b := Int64.Append(nil, v)
		if d, err := Int64.Decode(b); err != nil || d != v {
			t.Errorf("Int64 %d → %x → %d, %v", v, b, d, err)
		}
		e = append(e, b)
	}
	check("Int64", e)
	e = nil
	for _, v := range floats {
		b := Float64.Append(nil, v)
		if d, err := Float64.Decode(b); err != nil || d != v {
			t.Errorf("Float64 %g → %x → %g, %v", v, b, d, err)
		}
		e = append(e, b)
	}
	check("Float64", e)
	e = nil
	for _, v := range strs {
		e = append(e, String.Append(nil, v))
	}
	check("String", e)
	if _, err := Int64.Decode([]byte{1}); err == nil {
		t.Error("Int64 decoded 1 byte")
	}
}

// TestPartitioners: hash spreads keys over every partition; total order
// from sampled bounds keeps partitions in key order.
func TestPartitioners(t *testing.T) {
	seen := map[int]int{}
	for i := range 1000 {
		p := HashPartitioner{}.Partition(fmt.Appendf(nil, "key%d", i), 7)
		if p < 0 || p >= 7 {
			t.Fatalf("partition %d", p)
		}
		seen[p]++
	}
	if len(seen) != 7 {
		t.Errorf("hash used %d of 7 partitions", len(seen))
	}
	var sample [][]byte
	for i := range 1000 {
		sample = append(sample, fmt.Appendf(nil, "k%04d", (i*7919)%1000))
	}
	bounds := SampleBounds(sample, 4)
	want := []string{"k0250", "k0500", "k0750"}
	if fmt.Sprintf("%s", bounds) != fmt.Sprint(want) {
		t.Errorf("bounds %s, want %v", bounds, want)
	}
	p := TotalOrderPartitioner{Bounds: bounds}
	last := 0
	for i := range 1000 {
		got := p.Partition(fmt.Appendf(nil, "k%04d", i), 4)
		if got < last {
			t.Fatalf("key %d in partition %d after %d", i, got, last)
		}
		last = got
	}
	if last != 3 || p.Partition([]byte("a"), 4) != 0 || p.Partition([]byte("z"), 4) != 3 {
		t.Errorf("total order edges wrong")
	}
	if b := SampleBounds([][]byte{[]byte("x"), []byte("x")}, 4); len(b) != 1 {
		t.Errorf("duplicate sample gave bounds %s", b)
	}
}

// TestPlanSplits: one split per tablet clipped to the range, a tablet
// larger than the budget cut at sampled keys, each with its server's host
// as the locality hint.
func TestPlanSplits(t *testing.T) {
	tablets := []client.TabletInfo{
		{Start: nil, End: []byte("g"), Server: "10.0.0.1:8086"},
		{Start: []byte("g"), End: []byte("p"), Server: "10.0.0.2:8086"},
		{Start: []byte("p"), End: nil, Server: "10.0.0.3:8086"},
	}
	// 100 bytes before each sampled key step; "g" region holds 400 bytes.
	samples := []client.RowSample{
		{Key: []byte("c"), Offset: 100}, {Key: []byte("g"), Offset: 200},
		{Key: []byte("i"), Offset: 300}, {Key: []byte("k"), Offset: 400}, {Key: []byte("m"), Offset: 500}, {Key: []byte("p"), Offset: 600},
		{Key: nil, Offset: 700},
	}
	type sp struct{ start, end, host string }
	got := func(ss []Split) []sp {
		var out []sp
		for _, s := range ss {
			out = append(out, sp{string(s.Start), string(s.End), s.Host})
		}
		return out
	}
	all := PlanSplits("t", tablets, samples, nil, nil, 1<<30)
	if want := []sp{{"", "g", "10.0.0.1"}, {"g", "p", "10.0.0.2"}, {"p", "", "10.0.0.3"}}; !slices.Equal(got(all), want) {
		t.Errorf("whole table: %v, want %v", got(all), want)
	}
	if all[1].EstimatedBytes != 400 || all[2].EstimatedBytes != 100 {
		t.Errorf("estimates %d %d, want 400 100", all[1].EstimatedBytes, all[2].EstimatedBytes)
	}
	cut := PlanSplits("t", tablets, samples, nil, nil, 200)
	if want := []sp{{"", "g", "10.0.0.1"}, {"g", "k", "10.0.0.2"}, {"k", "p", "10.0.0.2"}, {"p", "", "10.0.0.3"}}; !slices.Equal(got(cut), want) {
		t.Errorf("budget 200: %v, want %v", got(cut), want)
	}
	clipped := PlanSplits("t", tablets, samples, []byte("h"), []byte("q"), 1<<30)
	if want := []sp{{"h", "p", "10.0.0.2"}, {"p", "q", "10.0.0.3"}}; !slices.Equal(got(clipped), want) {
		t.Errorf("[h, q): %v, want %v", got(clipped), want)
	}
}
