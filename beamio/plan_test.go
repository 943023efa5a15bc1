package beamio

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

func kr(start, end string) keyrange.Restriction {
	return keyrange.Restriction{Start: []byte(start), End: []byte(end)}
}

// checkCover fails unless got is in key order, adjacent-or-gapped only
// where want has gaps, and covers exactly want's keys.
func checkCover(t *testing.T, got []keyrange.Restriction, want []keyrange.Restriction) {
	t.Helper()
	// Merge adjacent restrictions and compare with want.
	var merged []keyrange.Restriction
	for _, r := range got {
		if r.Empty() {
			t.Fatalf("empty restriction %v in %v", r, got)
		}
		if n := len(merged); n > 0 && !merged[n-1].Unbounded() && bytes.Equal(merged[n-1].End, r.Start) {
			merged[n-1].End = r.End
			continue
		}
		if n := len(merged); n > 0 && (merged[n-1].Unbounded() || bytes.Compare(r.Start, merged[n-1].End) < 0) {
			t.Fatalf("restrictions out of order or overlapping: %v", got)
		}
		merged = append(merged, keyrange.Restriction{Start: r.Start, End: r.End})
	}
	if len(merged) != len(want) {
		t.Fatalf("cover %v, want %v (from %v)", merged, want, got)
	}
	for i := range want {
		if !bytes.Equal(merged[i].Start, want[i].Start) || !bytes.Equal(merged[i].End, want[i].End) {
			t.Fatalf("cover %v, want %v (from %v)", merged, want, got)
		}
	}
}

func TestPlanSplitsOnePerTablet(t *testing.T) {
	tablets := []Tablet{{nil, []byte("g")}, {[]byte("g"), []byte("p")}, {[]byte("p"), nil}}
	samples := []Sample{{[]byte("g"), 100}, {[]byte("p"), 300}, {nil, 600}}
	got := PlanSplits([]keyrange.Restriction{{}}, tablets, samples, 0)
	if len(got) != 3 {
		t.Fatalf("%d restrictions, want 3 (one per tablet): %v", len(got), got)
	}
	checkCover(t, got, []keyrange.Restriction{{}})
	for i, want := range []int64{100, 200, 300} {
		if got[i].Bytes != want {
			t.Errorf("restriction %v: %d bytes, want %d", got[i], got[i].Bytes, want)
		}
	}
}

func TestPlanSplitsCutsToTarget(t *testing.T) {
	// One tablet with samples every 10 bytes of keys a..z, and one huge
	// stretch at the end.
	var samples []Sample
	off := int64(0)
	for c := byte('b'); c <= 'y'; c++ {
		off += 10
		samples = append(samples, Sample{Key: []byte{c}, Offset: off})
	}
	samples = append(samples, Sample{Key: nil, Offset: off + 1000})
	got := PlanSplits([]keyrange.Restriction{{}}, []Tablet{{}}, samples, 35)
	checkCover(t, got, []keyrange.Restriction{{}})
	var total int64
	for _, r := range got[:len(got)-1] {
		total += r.Bytes
		if r.Bytes > 35 {
			t.Errorf("restriction %v over the 35-byte target", r)
		}
	}
	if len(got) < 1000/35 {
		t.Errorf("%d restrictions: the 1000-byte stretch was not divided", len(got))
	}
}

func TestPlanSplitsRanges(t *testing.T) {
	tablets := []Tablet{{nil, []byte("g")}, {[]byte("g"), []byte("p")}, {[]byte("p"), nil}}
	samples := []Sample{{[]byte("g"), 100}, {[]byte("p"), 300}, {nil, 600}}
	ranges := []keyrange.Restriction{kr("c", "e"), kr("f", "h"), {Start: []byte("x")}}
	got := PlanSplits(ranges, tablets, samples, 0)
	// f..h crosses the g boundary: two restrictions.
	checkCover(t, got, ranges)
	if len(got) != 4 {
		t.Fatalf("%v, want 4 restrictions", got)
	}
	// A prefix range ends at its successor.
	p := []byte("pre")
	got = PlanSplits([]keyrange.Restriction{{Start: p, End: cell.PrefixSuccessor(p)}}, tablets, samples, 0)
	checkCover(t, got, []keyrange.Restriction{kr("pre", "prf")})
	// No samples (an empty table): one restriction per tablet, size 0.
	got = PlanSplits([]keyrange.Restriction{{}}, tablets, []Sample{{nil, 0}}, 1)
	if len(got) != 3 || got[0].Bytes != 0 {
		t.Fatalf("empty table: %v", got)
	}
}

func TestReadConfigRanges(t *testing.T) {
	cfg := ReadConfig{Ranges: []RowRange{{Start: []byte("m"), End: []byte("q")}, {Start: []byte("a"), End: []byte("c")}, {Start: []byte("b"), End: []byte("d")}},
		Prefixes: [][]byte{[]byte("p")}}
	got, err := cfg.ranges()
	if err != nil {
		t.Fatal(err)
	}
	want := []keyrange.Restriction{kr("a", "d"), kr("m", "q")}
	checkCover(t, got, want)
	if _, err := (ReadConfig{Ranges: []RowRange{{Start: []byte("b"), End: []byte("a")}}}).ranges(); err == nil {
		t.Fatal("an inverted range was accepted")
	}
	if _, err := (ReadConfig{Prefixes: [][]byte{nil}}).ranges(); err == nil {
		t.Fatal("an empty prefix was accepted")
	}
}

func TestCodersRoundTrip(t *testing.T) {
	r := Row{Key: []byte("k\x00"), Cells: []cell.Cell{{Family: "f", Qualifier: []byte{}, Timestamp: -5, Value: []byte("v")}, {Family: "g", Qualifier: []byte("q"), Timestamp: 1 << 60}}}
	got, err := decodeRow(encodeRow(r))
	if err != nil || devtest.Digest(cell.Row(got)) != devtest.Digest(cell.Row(r)) {
		t.Fatalf("row round trip: %v %v", got, err)
	}
	m := RowMutation{Row: []byte("k"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 7, []byte("v")), cell.DeleteColumn("f", []byte("q"), 1, 9), cell.DeleteFamily("g"), cell.DeleteRow()}}
	fm := FailedMutation{Mutation: m, Code: 3, Message: "bad"}
	gotF, err := decodeFailed(encodeFailed(fm))
	if err != nil || gotF.String() != fm.String() || len(gotF.Mutation.Mutations) != 4 || gotF.Mutation.Mutations[1].EndTimestamp != 9 || gotF.Mutation.Mutations[3].Kind != cell.DeleteFromRow {
		t.Fatalf("failed mutation round trip: %+v %v", gotF, err)
	}
	enc := encodeRowMutation(m)
	for cut := range len(enc) {
		if _, err := decodeRowMutation(enc[:cut]); err == nil {
			t.Fatalf("decoding %d of %d bytes succeeded", cut, len(enc))
		}
	}
}

// FuzzDecodeRow: any bytes decode to a row or an error, never a panic
// or an allocation beyond the input's size.
func FuzzDecodeRow(f *testing.F) {
	f.Add(encodeRow(Row{Key: []byte("k"), Cells: []cell.Cell{{Family: "f", Value: []byte("v")}}}))
	f.Add(encodeRowMutation(RowMutation{Row: []byte("k"), Mutations: []cell.Mutation{cell.DeleteRow()}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeRow(b); err == nil {
			again, err := decodeRow(encodeRow(r))
			if err != nil || devtest.Digest(cell.Row(again)) != devtest.Digest(cell.Row(r)) {
				t.Fatalf("decoded %v does not survive a re-encoding: %v %v", r, again, err)
			}
		}
		_, _ = decodeRowMutation(b)
		_, _ = decodeFailed(b)
	})
}

// TestSelectionPlansLikePlan: PlanSplits of the Selection over the
// table's tablets and samples, fetched by the caller, is what Plan
// returns (the export plans that way, with its own connection).
func TestSelectionPlansLikePlan(t *testing.T) {
	table := readTable(t, "read")
	c, err := client.Dial(dev.Addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	tabs, err := c.Tablets(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	var tablets []Tablet
	for _, tb := range tabs {
		tablets = append(tablets, Tablet{Start: tb.Start, End: tb.End})
	}
	smp, err := c.SampleRowKeys(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	var samples []Sample
	for _, s := range smp {
		samples = append(samples, Sample{Key: s.Key, Offset: s.Offset})
	}
	for _, cfg := range []ReadConfig{
		{},
		{Ranges: []RowRange{{Start: []byte("r00150"), End: []byte("r00420")}, {Start: []byte("r00990")}}, Prefixes: [][]byte{[]byte("r007")}},
	} {
		cfg.Table = Table{Addr: dev.Addr, Table: table}
		for _, target := range []int64{0, 4 << 10} {
			want, err := cfg.Plan(ctx, target)
			if err != nil {
				t.Fatal(err)
			}
			sel, err := cfg.Selection()
			if err != nil {
				t.Fatal(err)
			}
			if got := PlanSplits(sel, tablets, samples, target); fmt.Sprint(got) != fmt.Sprint(want) || len(want) < len(tablets) && len(cfg.Ranges) == 0 {
				t.Fatalf("ranges %v, target %d: PlanSplits of the selection %v\n got %v\nwant %v", cfg.Ranges, target, sel, got, want)
			}
		}
	}
	if _, err := (ReadConfig{Table: Table{Addr: dev.Addr, Table: table}, Prefixes: [][]byte{nil}}).Selection(); err == nil {
		t.Fatal("Selection accepted an empty prefix")
	}
}
