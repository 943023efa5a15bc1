package tabletserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
)

func TestApplyEveryMutationKind(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"a", "b"}})
	ctx := e.ctx

	m := bigtable.NewMutation()
	m.Set("a", "x", ts(1), []byte("x1"))
	m.Set("a", "x", ts(2), []byte("x2"))
	m.Set("a", "x", ts(3), []byte("x3"))
	m.Set("a", "y", ts(1), []byte("y1"))
	m.Set("b", "z", ts(1), []byte("z1"))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	m = bigtable.NewMutation()
	m.Set("a", "w", ts(5), []byte("w5"))
	if err := tbl.Apply(ctx, "q", m); err != nil {
		t.Fatal(err)
	}
	check := func(step, want string) {
		t.Helper()
		if got := readAll(t, ctx, tbl, bigtable.InfiniteRange("")); got != want {
			t.Fatalf("%s:\n got %s\nwant %s", step, got, want)
		}
	}
	check("sets", "q{a:w@5000=w5} r{a:x@3000=x3 a:x@2000=x2 a:x@1000=x1 a:y@1000=y1 b:z@1000=z1}")

	m = bigtable.NewMutation()
	m.DeleteTimestampRange("a", "x", ts(2), ts(3)) // [2, 3) ms
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	check("delete timestamp range", "q{a:w@5000=w5} r{a:x@3000=x3 a:x@1000=x1 a:y@1000=y1 b:z@1000=z1}")

	m = bigtable.NewMutation()
	m.DeleteCellsInColumn("a", "x")
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	check("delete column", "q{a:w@5000=w5} r{a:y@1000=y1 b:z@1000=z1}")

	m = bigtable.NewMutation()
	m.DeleteCellsInFamily("b")
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	check("delete family", "q{a:w@5000=w5} r{a:y@1000=y1}")

	m = bigtable.NewMutation()
	m.DeleteRow()
	m.Set("b", "after", ts(1), []byte("new")) // a row mutation applies in order
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	check("delete row then set", "q{a:w@5000=w5} r{b:after@1000=new}")

	// Server-assigned timestamps in a MILLIS table are whole milliseconds.
	m = bigtable.NewMutation()
	m.Set("a", "srv", bigtable.ServerTime, []byte("s"))
	if err := tbl.Apply(ctx, "s", m); err != nil {
		t.Fatal(err)
	}
	row, err := tbl.ReadRow(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(row["a"]) != 1 || row["a"][0].Timestamp <= 0 || row["a"][0].Timestamp%1000 != 0 {
		t.Fatalf("server timestamp: %v", row)
	}
	// ReadRow of a missing row is an empty row, not an error.
	row, err = tbl.ReadRow(ctx, "missing")
	if err != nil || len(row) != 0 {
		t.Fatalf("missing row: %v %v", row, err)
	}
}

func TestApplyBulkPerEntryErrors(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	ctx := e.ctx
	set := func(fam string, ts bigtable.Timestamp, v string) *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set(fam, "c", ts, []byte(v))
		return m
	}
	longQual := bigtable.NewMutation()
	longQual.Set("f", strings.Repeat("q", 17<<10), 1000, nil)
	keys := []string{"a", "b", "c", strings.Repeat("k", 70<<10), "d", "a"}
	muts := []*bigtable.Mutation{
		set("f", 1000, "a1"),
		set("nope", 1000, "b1"),   // missing family
		longQual,                  // qualifier over 16 KiB
		set("f", 1000, "toolong"), // row key over 64 KiB
		set("f", 1000, "d1"),
		set("f", 2000, "a2"), // same row as entry 0, applied after it
	}
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		t.Fatalf("ApplyBulk: %v", err)
	}
	if len(errs) != len(keys) {
		t.Fatalf("got %d per-entry errors, want %d", len(errs), len(keys))
	}
	for i, want := range []codes.Code{codes.OK, codes.NotFound, codes.InvalidArgument, codes.InvalidArgument, codes.OK, codes.OK} {
		if want == codes.OK {
			if errs[i] != nil {
				t.Fatalf("entry %d: %v", i, errs[i])
			}
			continue
		}
		wantCode(t, errs[i], want, "entries["+string(rune('0'+i))+"]")
	}
	got := readAll(t, ctx, tbl, bigtable.InfiniteRange(""))
	if want := "a{f:c@2000=a2 f:c@1000=a1} d{f:c@1000=d1}"; got != want {
		t.Fatalf("after bulk: got %s want %s", got, want)
	}
	// An entry without mutations is invalid; a request without entries too.
	noEntries, err := e.stub.MutateRows(ctx, &bigtablepb.MutateRowsRequest{TableName: tableName("t")})
	if err == nil {
		_, err = noEntries.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "entries")
	stream, err := e.stub.MutateRows(ctx, &bigtablepb.MutateRowsRequest{TableName: tableName("t"),
		Entries: []*bigtablepb.MutateRowsRequest_Entry{{RowKey: []byte("e")}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if c := codes.Code(resp.Entries[0].Status.Code); c != codes.InvalidArgument || !strings.Contains(resp.Entries[0].Status.Message, "mutations") {
		t.Fatalf("empty entry: %v", resp.Entries[0].Status)
	}
}

// rowSetData writes rows a, b, ba, bb, c, d with one cell each.
func rowSetData(t *testing.T, e *testEnv, tbl *bigtable.Table) {
	keys := []string{"a", "b", "ba", "bb", "c", "d"}
	var muts []*bigtable.Mutation
	for _, k := range keys {
		m := bigtable.NewMutation()
		m.Set("f", "q", ts(1), []byte(k))
		muts = append(muts, m)
	}
	errs, err := tbl.ApplyBulk(e.ctx, keys, muts)
	if err != nil || errs != nil {
		t.Fatal(err, errs)
	}
}

func keysOf(t *testing.T, e *testEnv, tbl *bigtable.Table, rs bigtable.RowSet, opts ...bigtable.ReadOption) string {
	t.Helper()
	var out []string
	if err := tbl.ReadRows(e.ctx, rs, func(r bigtable.Row) bool { out = append(out, r.Key()); return true }, opts...); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ",")
}

func TestReadRowSets(t *testing.T) {
	// Two tablets, split inside the b rows, so sets cross tablets.
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}, splits: []string{"ba"}})
	rowSetData(t, e, tbl)
	cases := []struct {
		name string
		rs   bigtable.RowSet
		opts []bigtable.ReadOption
		want string
	}{
		{"all", bigtable.InfiniteRange(""), nil, "a,b,ba,bb,c,d"},
		{"list unsorted with duplicates", bigtable.RowList{"c", "a", "zz", "c", "ba"}, nil, "a,ba,c"},
		{"range", bigtable.NewRange("b", "c"), nil, "b,ba,bb"},
		{"closed range", bigtable.NewClosedRange("b", "c"), nil, "b,ba,bb,c"},
		{"open range", bigtable.NewOpenRange("b", "c"), nil, "ba,bb"},
		{"open-closed", bigtable.NewOpenClosedRange("a", "ba"), nil, "b,ba"},
		{"prefix", bigtable.PrefixRange("b"), nil, "b,ba,bb"},
		{"infinite from", bigtable.InfiniteRange("bb"), nil, "bb,c,d"},
		{"infinite reverse range", bigtable.InfiniteReverseRange("b"), nil, "a,b"},
		{"overlapping ranges", bigtable.RowRangeList{bigtable.NewRange("b", "bb"), bigtable.NewRange("a", "ba"), bigtable.NewRange("c", "e")}, nil, "a,b,ba,c,d"},
		{"limit", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(3)}, "a,b,ba"},
		{"reverse", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.ReverseScan()}, "d,c,bb,ba,b,a"},
		{"reverse range limit", bigtable.NewRange("a", "c"), []bigtable.ReadOption{bigtable.ReverseScan(), bigtable.LimitRows(2)}, "bb,ba"},
		{"reverse list", bigtable.RowList{"a", "d", "bb"}, []bigtable.ReadOption{bigtable.ReverseScan()}, "d,bb,a"},
		{"reverse ranges", bigtable.RowRangeList{bigtable.NewRange("a", "b"), bigtable.NewRange("c", "")}, []bigtable.ReadOption{bigtable.ReverseScan()}, "d,c,a"},
		{"limit with filter counts returned rows", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.RowKeyFilter("b.*")), bigtable.LimitRows(2)}, "b,ba"},
	}
	for _, c := range cases {
		if got := keysOf(t, e, tbl, c.rs, c.opts...); got != c.want {
			t.Errorf("%s: got %s want %s", c.name, got, c.want)
		}
	}
	// The wire's open and closed bounds, which the client's helpers do not
	// all produce, through the generated stub.
	read := func(rs *bigtablepb.RowSet, reversed bool) string {
		stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t"), Rows: rs, Reversed: reversed})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			for _, ch := range resp.Chunks {
				if ch.RowKey != nil {
					keys = append(keys, string(ch.RowKey))
				}
			}
		}
		return strings.Join(keys, ",")
	}
	rr := func(r *bigtablepb.RowRange) *bigtablepb.RowSet {
		return &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{r}}
	}
	if got := read(rr(&bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyOpen{StartKeyOpen: []byte("b")}, EndKey: &bigtablepb.RowRange_EndKeyClosed{EndKeyClosed: []byte("c")}}), false); got != "ba,bb,c" {
		t.Errorf("(b, c]: %s", got)
	}
	if got := read(rr(&bigtablepb.RowRange{EndKey: &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: []byte("b")}}), true); got != "a" {
		t.Errorf("reversed [, b): %s", got)
	}
	if got := read(nil, true); got != "d,c,bb,ba,b,a" {
		t.Errorf("reversed nil set: %s", got)
	}
	// An inverted range is the client's error.
	stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t"),
		Rows: rr(&bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: []byte("c")}, EndKey: &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: []byte("b")}})})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "rows.row_ranges[0]")
}

// filterData is the data set of the filter tests:
//
//	r1: a:x@3=v3 a:x@2=v2 a:y@1=y1 b:z@1=z1
//	r2: a:x@2=w2 b:z@3=z3
//	s1: b:q@1=q1
func filterData(t *testing.T, e *testEnv) *bigtable.Table {
	tbl := e.createTable(tableDef{name: "filters", families: []string{"a", "b"}})
	put := func(row string, cells ...string) {
		m := bigtable.NewMutation()
		for _, c := range cells {
			// "fam:qual@ms=value"
			fq, rest, _ := strings.Cut(c, "@")
			fam, qual, _ := strings.Cut(fq, ":")
			msStr, val, _ := strings.Cut(rest, "=")
			ms := int64(msStr[0] - '0')
			m.Set(fam, qual, ts(ms), []byte(val))
		}
		if err := tbl.Apply(e.ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	put("r1", "a:x@3=v3", "a:x@2=v2", "a:y@1=y1", "b:z@1=z1")
	put("r2", "a:x@2=w2", "b:z@3=z3")
	put("s1", "b:q@1=q1")
	return tbl
}

func TestEveryFilter(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := filterData(t, e)
	all := "r1{a:x@3000=v3 a:x@2000=v2 a:y@1000=y1 b:z@1000=z1} r2{a:x@2000=w2 b:z@3000=z3} s1{b:q@1000=q1}"
	cases := []struct {
		name string
		f    bigtable.Filter
		want string
	}{
		{"pass all", bigtable.PassAllFilter(), all},
		{"block all", bigtable.BlockAllFilter(), ""},
		{"row key", bigtable.RowKeyFilter("r."), "r1{a:x@3000=v3 a:x@2000=v2 a:y@1000=y1 b:z@1000=z1} r2{a:x@2000=w2 b:z@3000=z3}"},
		{"family", bigtable.FamilyFilter("b"), "r1{b:z@1000=z1} r2{b:z@3000=z3} s1{b:q@1000=q1}"},
		{"column", bigtable.ColumnFilter("x"), "r1{a:x@3000=v3 a:x@2000=v2} r2{a:x@2000=w2}"},
		{"value", bigtable.ValueFilter("v."), "r1{a:x@3000=v3 a:x@2000=v2}"},
		{"column range", bigtable.ColumnRangeFilter("a", "x", "y"), "r1{a:x@3000=v3 a:x@2000=v2} r2{a:x@2000=w2}"},
		{"value range", bigtable.ValueRangeFilter([]byte("w"), []byte("z2")), "r1{a:y@1000=y1 b:z@1000=z1} r2{a:x@2000=w2}"},
		{"timestamp range", bigtable.TimestampRangeFilterMicros(2000, 3000), "r1{a:x@2000=v2} r2{a:x@2000=w2}"},
		{"latest n", bigtable.LatestNFilter(1), "r1{a:x@3000=v3 a:y@1000=y1 b:z@1000=z1} r2{a:x@2000=w2 b:z@3000=z3} s1{b:q@1000=q1}"},
		{"cells per row limit", bigtable.CellsPerRowLimitFilter(2), "r1{a:x@3000=v3 a:x@2000=v2} r2{a:x@2000=w2 b:z@3000=z3} s1{b:q@1000=q1}"},
		{"cells per row offset", bigtable.CellsPerRowOffsetFilter(2), "r1{a:y@1000=y1 b:z@1000=z1}"},
		{"row sample almost all", bigtable.RowSampleFilter(0.999999999), all},
		{"row sample almost none", bigtable.RowSampleFilter(0.000000001), ""},
		{"strip value", bigtable.ChainFilters(bigtable.RowKeyFilter("s1"), bigtable.StripValueFilter()), "s1{b:q@1000=}"},
		{"label", bigtable.ChainFilters(bigtable.RowKeyFilter("r2"), bigtable.LabelFilter("lbl")), "r2{a:x@2000=w2[lbl] b:z@3000=z3[lbl]}"},
		{"chain", bigtable.ChainFilters(bigtable.FamilyFilter("a"), bigtable.LatestNFilter(1)), "r1{a:x@3000=v3 a:y@1000=y1} r2{a:x@2000=w2}"},
		{"interleave", bigtable.InterleaveFilters(bigtable.ColumnFilter("y"), bigtable.FamilyFilter("b")), "r1{a:y@1000=y1 b:z@1000=z1} r2{b:z@3000=z3} s1{b:q@1000=q1}"},
		{"interleave duplicates with labels", bigtable.ChainFilters(bigtable.RowKeyFilter("s1"),
			bigtable.InterleaveFilters(bigtable.LabelFilter("one"), bigtable.LabelFilter("two"))), "s1{b:q@1000=q1[one] b:q@1000=q1[two]}"},
		{"condition true branch", bigtable.ConditionFilter(bigtable.ValueFilter("z3"), bigtable.StripValueFilter(), bigtable.BlockAllFilter()), "r2{a:x@2000= b:z@3000=}"},
		{"condition false branch", bigtable.ConditionFilter(bigtable.ValueFilter("z3"), bigtable.BlockAllFilter(), bigtable.FamilyFilter("b")), "r1{b:z@1000=z1} s1{b:q@1000=q1}"},
		{"pushdown: family then versions", bigtable.ChainFilters(bigtable.FamilyFilter("a"), bigtable.TimestampRangeFilterMicros(0, 3000), bigtable.LatestNFilter(1)), "r1{a:x@2000=v2 a:y@1000=y1} r2{a:x@2000=w2}"},
	}
	for _, c := range cases {
		got := readAll(t, e.ctx, tbl, bigtable.InfiniteRange(""), bigtable.RowFilter(c.f))
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	// Sink, which the Go client does not expose, through the stub: a
	// label applied before the sink reaches the output next to the rest.
	stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("filters"),
		Rows: &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("s1")}},
		Filter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
			{Filter: &bigtablepb.RowFilter_ApplyLabelTransformer{ApplyLabelTransformer: "sunk"}},
			{Filter: &bigtablepb.RowFilter_Sink{Sink: true}},
			{Filter: &bigtablepb.RowFilter_BlockAllFilter{BlockAllFilter: true}},
		}}}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Chunks) != 1 || len(resp.Chunks[0].Labels) != 1 || resp.Chunks[0].Labels[0] != "sunk" {
		t.Fatalf("sink: %v", resp.Chunks)
	}
}

func TestCheckAndMutate(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := filterData(t, e)
	onTrue := bigtable.NewMutation()
	onTrue.Set("a", "t", ts(9), []byte("T"))
	onFalse := bigtable.NewMutation()
	onFalse.Set("a", "f", ts(9), []byte("F"))
	var matched bool
	for _, c := range []struct {
		row  string
		pred bigtable.Filter
		want bool
	}{
		{"r1", bigtable.ValueFilter("v3"), true},
		{"r2", bigtable.ValueFilter("v3"), false},
		{"s1", nil, true},   // no predicate: the row has cells
		{"new", nil, false}, // no predicate, no row
		{"new2", bigtable.PassAllFilter(), false},
	} {
		cm := bigtable.NewCondMutation(c.pred, onTrue, onFalse)
		if err := tbl.Apply(e.ctx, c.row, cm, bigtable.GetCondMutationResult(&matched)); err != nil {
			t.Fatal(err)
		}
		if matched != c.want {
			t.Errorf("row %s: matched %v want %v", c.row, matched, c.want)
		}
		row, err := tbl.ReadRow(e.ctx, c.row, bigtable.RowFilter(bigtable.ColumnFilter("t|f")))
		if err != nil {
			t.Fatal(err)
		}
		want := "a:f"
		if c.want {
			want = "a:t"
		}
		if len(row["a"]) != 1 || row["a"][0].Column != want {
			t.Errorf("row %s after check-and-mutate: %v", c.row, row)
		}
	}
	// A bad branch is an error whichever branch would run, and changes
	// nothing.
	bad := bigtable.NewMutation()
	bad.Set("nope", "q", ts(1), []byte("x"))
	err := tbl.Apply(e.ctx, "r1", bigtable.NewCondMutation(bigtable.ValueFilter("v3"), onTrue, bad))
	wantCode(t, err, codes.NotFound, "false_mutations[0]", "nope")
	err = tbl.Apply(e.ctx, "r1", bigtable.NewCondMutation(bigtable.ValueFilter("["), onTrue, nil))
	wantCode(t, err, codes.InvalidArgument, "predicate_filter")
}

func TestReadModifyWrite(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	ctx := e.ctx
	m := bigtable.NewMutation()
	m.Set("f", "s", ts(1), []byte("ab"))
	m.Set("f", "bad", ts(1), []byte("xyz"))
	future := bigtable.Now() + 3600_000_000 // an hour ahead
	m.Set("f", "fut", future, binary.BigEndian.AppendUint64(nil, 40))
	if err := tbl.Apply(ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	rmw := bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "s", []byte("cd"))
	rmw.AppendValue("f", "new", []byte("n"))
	rmw.Increment("f", "cnt", 5)
	rmw.Increment("f", "cnt", -2) // applies to the previous rule's result
	rmw.Increment("f", "fut", 2)
	row, err := tbl.ApplyReadModifyWrite(ctx, "r", rmw)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bigtable.ReadItem{}
	for _, it := range row["f"] {
		got[it.Column] = it
	}
	if len(got) != 4 || string(got["f:s"].Value) != "abcd" || string(got["f:new"].Value) != "n" ||
		!bytes.Equal(got["f:cnt"].Value, binary.BigEndian.AppendUint64(nil, 3)) ||
		!bytes.Equal(got["f:fut"].Value, binary.BigEndian.AppendUint64(nil, 42)) {
		t.Fatalf("result row: %v", row)
	}
	// The new cell takes max(now, latest): a future cell is replaced in place.
	if got["f:fut"].Timestamp != future.TruncateToMilliseconds() {
		t.Fatalf("increment of a future cell got timestamp %d, want %d", got["f:fut"].Timestamp, future.TruncateToMilliseconds())
	}
	if ts := got["f:s"].Timestamp; ts <= 1000 || ts%1000 != 0 {
		t.Fatalf("append got timestamp %d", ts)
	}
	stored, err := tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ColumnFilter("fut|s")))
	if err != nil {
		t.Fatal(err)
	}
	if s := formatRow(stored); !strings.Contains(s, "f:fut@") || strings.Count(s, "f:fut@") != 1 || !strings.Contains(s, "=abcd") {
		t.Fatalf("stored after read-modify-write: %s", s)
	}
	// Increment of a value that is not 8 bytes fails and changes nothing.
	rmw = bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "s", []byte("zz"))
	rmw.Increment("f", "bad", 1)
	_, err = tbl.ApplyReadModifyWrite(ctx, "r", rmw)
	wantCode(t, err, codes.FailedPrecondition, "rules[1].increment_amount", "8 bytes")
	stored, err = tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.ChainFilters(bigtable.ColumnFilter("s"), bigtable.LatestNFilter(1))))
	if err != nil || string(stored["f"][0].Value) != "abcd" {
		t.Fatalf("failed read-modify-write changed the row: %v %v", stored, err)
	}
	rmw = bigtable.NewReadModifyWrite()
	rmw.Increment("nope", "c", 1)
	_, err = tbl.ApplyReadModifyWrite(ctx, "r", rmw)
	wantCode(t, err, codes.NotFound, "rules[0].family_name")
}

func TestErrors(t *testing.T) {
	lim := cell.DefaultLimits()
	lim.MaxValueBytes = 1 << 20
	lim.MaxMutations = 5
	e := newTestEnv(t, HostOptions{Limits: lim}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	e.createTable(tableDef{name: "micros", families: []string{"f"}, granularity: meta.GranularityMicros})
	ctx := e.ctx
	set := func(fam, qual string, ts bigtable.Timestamp, v []byte) *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set(fam, qual, ts, v)
		return m
	}
	// Malformed regex: the field is named.
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { return true },
		bigtable.RowFilter(bigtable.ChainFilters(bigtable.PassAllFilter(), bigtable.ValueFilter("a("))))
	wantCode(t, err, codes.InvalidArgument, "filter.chain.filters[1].value_regex_filter")
	_, err = tbl.ReadRow(ctx, "r", bigtable.RowFilter(bigtable.FamilyFilter("[")))
	wantCode(t, err, codes.InvalidArgument, "family_name_regex_filter")

	err = tbl.Apply(ctx, strings.Repeat("k", 64<<10+1), set("f", "q", 0, nil))
	wantCode(t, err, codes.InvalidArgument, "row_key", "65536")
	err = tbl.Apply(ctx, "r", set("f", "q", 0, make([]byte, 1<<20+1)))
	wantCode(t, err, codes.InvalidArgument, "mutations[0].set_cell.value", "1048576")
	err = tbl.Apply(ctx, "r", set("f", strings.Repeat("q", 16<<10+1), 0, nil))
	wantCode(t, err, codes.InvalidArgument, "column_qualifier")
	err = tbl.Apply(ctx, "r", set("nope", "q", 0, nil))
	wantCode(t, err, codes.NotFound, "mutations[0].set_cell.family_name", "nope")
	// The Go client truncates its timestamps to milliseconds; other
	// clients need not, so the granularity is checked through the stub.
	setAt := func(table string, ts int64) error {
		_, err := e.stub.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tableName(table), RowKey: []byte("r"),
			Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: ts, Value: []byte("v")}}}}})
		return err
	}
	wantCode(t, setAt("t", 1234), codes.InvalidArgument, "mutations[0].set_cell.timestamp_micros", "MILLIS")
	// The same timestamp is fine in a MICROS table.
	if err := setAt("micros", 1234); err != nil {
		t.Fatal(err)
	}
	err = e.client.Open("missing").Apply(ctx, "r", set("f", "q", 0, nil))
	wantCode(t, err, codes.NotFound, "missing")
	_, err = e.client.Open("missing").ReadRow(ctx, "r")
	wantCode(t, err, codes.NotFound)
	_, err = e.stub.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: "projects/p/tables/t", RowKey: []byte("r"),
		Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_DeleteFromRow_{DeleteFromRow: &bigtablepb.Mutation_DeleteFromRow{}}}}})
	wantCode(t, err, codes.InvalidArgument, "table_name")
	_, err = e.stub.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tableName("t"), RowKey: []byte("r")})
	wantCode(t, err, codes.InvalidArgument, "mutations")
	del := bigtable.NewMutation()
	del.DeleteTimestampRange("f", "q", 5000, 5000)
	wantCode(t, tbl.Apply(ctx, "r", del), codes.InvalidArgument, "mutations[0].delete_from_column.time_range")
	// Too many mutations: in one row, and in one MutateRows request.
	many := bigtable.NewMutation()
	for i := range 6 {
		many.Set("f", string(rune('a'+i)), 0, nil)
	}
	wantCode(t, tbl.Apply(ctx, "r", many), codes.InvalidArgument, "mutations", "limit is 5")
	three := bigtable.NewMutation()
	for i := range 3 {
		three.Set("f", string(rune('a'+i)), 0, nil)
	}
	_, err = tbl.ApplyBulk(ctx, []string{"r1", "r2"}, []*bigtable.Mutation{three, three})
	wantCode(t, err, codes.InvalidArgument, "entries", "6 mutations", "limit is 5")
	// A mutation list with one bad mutation applies nothing.
	m := set("f", "good", 0, []byte("g"))
	m.Set("nope", "q", 0, nil)
	wantCode(t, tbl.Apply(ctx, "atomic", m), codes.NotFound)
	// Nothing above changed the table.
	if got := readAll(t, ctx, tbl, bigtable.InfiniteRange("")); got != "" {
		t.Fatalf("bad input changed the table: %s", got)
	}
	_, err = e.stub.PingAndWarm(ctx, &bigtablepb.PingAndWarmRequest{Name: "projects/p/instances/i"})
	if err != nil {
		t.Fatalf("PingAndWarm: %v", err)
	}
}

func TestLargeValueChunking(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	big := make([]byte, 20<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	m := bigtable.NewMutation()
	m.Set("f", "big", ts(1), big)
	m.Set("f", "small", ts(1), []byte("s"))
	if err := tbl.Apply(e.ctx, "r", m); err != nil {
		t.Fatal(err)
	}
	m = bigtable.NewMutation()
	m.Set("f", "after", ts(1), []byte("a"))
	if err := tbl.Apply(e.ctx, "s", m); err != nil {
		t.Fatal(err)
	}
	row, err := tbl.ReadRow(e.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(row["f"]) != 2 || !bytes.Equal(row["f"][0].Value, big) || string(row["f"][1].Value) != "s" {
		t.Fatalf("20 MiB cell did not round-trip (got %d cells)", len(row["f"]))
	}
	// On the wire: the cell went in 1 MiB pieces, responses stayed small.
	stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t")})
	if err != nil {
		t.Fatal(err)
	}
	chunks, responses, commits := 0, 0, 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		responses++
		for _, ch := range resp.Chunks {
			chunks++
			if len(ch.Value) > DefaultChunkBytes {
				t.Fatalf("chunk of %d bytes", len(ch.Value))
			}
			if ch.GetCommitRow() {
				commits++
			}
		}
	}
	if chunks != 22 || commits != 2 || responses != 2 {
		t.Fatalf("got %d chunks in %d responses, %d commits; want 22 chunks (20 + 2) in 2 responses (one per row), 2 commits", chunks, responses, commits)
	}
}

// TestLastScannedRowKey reads a table through a filter that drops every
// row: the server reports its progress with last_scanned_row_key, in scan
// order, and the client gets no row and no error.
func TestLastScannedRowKey(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}, splits: []string{"k01000"}})
	var keys []string
	var muts []*bigtable.Mutation
	for i := range 2500 {
		m := bigtable.NewMutation()
		m.Set("f", "q", 0, []byte("v"))
		keys = append(keys, fmt.Sprintf("k%05d", i))
		muts = append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange(""), bigtable.RowFilter(bigtable.ValueFilter("nothing"))); got != "" {
		t.Fatalf("rows through a filter that drops all: %s", got)
	}
	for _, reversed := range []bool{false, true} {
		stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t"), Reversed: reversed,
			Filter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("nothing")}}})
		if err != nil {
			t.Fatal(err)
		}
		var scanned []string
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			if len(resp.Chunks) != 0 {
				t.Fatalf("chunks through a filter that drops all: %v", resp.Chunks)
			}
			scanned = append(scanned, string(resp.LastScannedRowKey))
		}
		want := "k00999,k01999"
		if reversed {
			want = "k01500,k00500"
		}
		if got := strings.Join(scanned, ","); got != want {
			t.Errorf("reversed=%v: last scanned row keys %s, want %s", reversed, got, want)
		}
	}
}

// TestFailedLogIsUnavailable closes the commit log under the server: writes
// can no longer be made durable, and the client is told to go elsewhere
// (UNAVAILABLE), not that its request was wrong.
func TestFailedLogIsUnavailable(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	e.createTable(tableDef{name: "t", families: []string{"f"}})
	if err := e.log.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := e.stub.MutateRow(e.ctx, &bigtablepb.MutateRowRequest{TableName: tableName("t"), RowKey: []byte("r"),
		Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 1000, Value: []byte("v")}}}}})
	wantCode(t, err, codes.Unavailable)
	// Reads still work: the tablet's data is intact, only new writes fail.
	stream, err := e.stub.ReadRows(e.ctx, &bigtablepb.ReadRowsRequest{TableName: tableName("t")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("read after the log failed: %v", err)
	}
}
