package beamio

import (
	"slices"
	"testing"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cell"
)

func rowDigest(r Row) string { return devtest.Digest(cell.Row(r)) }

func init() {
	register.Function1x1(rowDigest)
}

// readTableSplits are the split keys of the read tests' table: ten
// tablets.
var readTableSplits = []string{"r00100", "r00200", "r00300", "r00400", "r00500", "r00600", "r00700", "r00800", "r00900"}

// keepGScript keeps the rows with a cell of family g.
const keepGScript = `when (i: some int; input.cells[i].family == "g") emit keep <- true;`

var readTableCreated = map[string]bool{}

// readTable creates (once per name) a table of 1000 test rows over ten
// tablets.
func readTable(t *testing.T, name string) string {
	t.Helper()
	if !readTableCreated[name] {
		dev.CreateTable(t, name, []string{"f", "g"}, readTableSplits...)
		dev.WriteRows(t, name, devtest.Rows(1000))
		readTableCreated[name] = true
	}
	return name
}

func TestReadMatchesOfficialScan(t *testing.T) {
	table := readTable(t, "read")
	tests := []struct {
		name string
		cfg  ReadConfig
		rs   bigtable.RowSet
		opts []bigtable.ReadOption
		keep func(cell.Row) bool // what a script filter keeps of the reference
	}{
		{name: "whole table", rs: bigtable.InfiniteRange("")},
		{name: "ranges and a prefix", cfg: ReadConfig{Ranges: []RowRange{{Start: []byte("r00050"), End: []byte("r00250")}, {Start: []byte("r00990")}}, Prefixes: [][]byte{[]byte("r0070")}},
			rs: bigtable.RowRangeList{bigtable.NewRange("r00050", "r00250"), bigtable.PrefixRange("r0070"), bigtable.InfiniteRange("r00990")}},
		{name: "families and time range", cfg: ReadConfig{Families: []string{"f"}, StartTime: 1_500_000, EndTime: 2_500_000},
			rs: bigtable.InfiniteRange(""), opts: []bigtable.ReadOption{bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("f"), bigtable.TimestampRangeFilterMicros(1_500_000, 2_500_000)))}},
		{name: "RowFilter", cfg: ReadConfig{Filter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("a-new-.*")}}},
			rs: bigtable.InfiniteRange(""), opts: []bigtable.ReadOption{bigtable.RowFilter(bigtable.ValueFilter("a-new-.*"))}},
		{name: "script filter in the servers", cfg: ReadConfig{Script: keepGScript, ScriptName: "keep_g.szl", Ranges: []RowRange{{Start: []byte("r00150"), End: []byte("r00750")}}},
			rs: bigtable.NewRange("r00150", "r00750"),
			keep: func(r cell.Row) bool {
				return slices.ContainsFunc(r.Cells, func(c cell.Cell) bool { return c.Family == "g" })
			}},
		{name: "script filter after families", cfg: ReadConfig{Script: keepGScript, Families: []string{"g"}},
			rs: bigtable.InfiniteRange(""), opts: []bigtable.ReadOption{bigtable.RowFilter(bigtable.FamilyFilter("g"))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := dev.ReadRows(t, table, tc.rs, tc.opts...)
			if tc.keep != nil {
				want = slices.DeleteFunc(want, func(r cell.Row) bool { return !tc.keep(r) })
			}
			if len(want) == 0 {
				t.Fatal("the reference scan found no rows")
			}
			cfg := tc.cfg
			cfg.Table = Table{Addr: dev.Addr, Table: table}
			cfg.BundleBytes = 16 << 10 // several restrictions per tablet
			p, s := beam.NewPipelineWithRoot()
			rows := Read(s, cfg)
			passert.Equals(s, beam.ParDo(s, rowDigest, rows), devtest.Digests(want)...)
			if err := ptest.Run(p); err != nil {
				t.Fatalf("pipeline: %v", err)
			}
		})
	}
}
