package jobs

import (
	"context"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

// CounterRows is rowcounter's count (HBase's RowCounter names it ROWS).
const CounterRows = "ROWS"

// RowCounterConf configures rowcounter.
type RowCounterConf struct {
	Input TableSpec `json:"input"`
}

// RowCounter counts the rows of a table's range that pass its filters,
// map-only, in the counter ROWS. Only the first cell of each row, without
// its value, crosses the network (HBase's FirstKeyOnlyFilter).
func RowCounter(c RowCounterConf) (*mapreduce.Job, error) {
	in, err := c.Input.Input()
	if err != nil {
		return nil, err
	}
	keysOnly := []*bigtablepb.RowFilter{
		{Filter: &bigtablepb.RowFilter_CellsPerRowLimitFilter{CellsPerRowLimitFilter: 1}},
		{Filter: &bigtablepb.RowFilter_StripValueTransformer{StripValueTransformer: true}},
	}
	if in.Filter != nil {
		keysOnly = append([]*bigtablepb.RowFilter{in.Filter}, keysOnly...)
	}
	in.Filter = &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: keysOnly}}}
	return &mapreduce.Job{
		Input: in,
		Map: func(_ context.Context, _ cell.Row, out mapreduce.MapContext) error {
			out.Count(CounterRows, 1)
			return nil
		},
	}, nil
}

func init() {
	mapreduce.Register("rowcounter", "TABLE: count the rows of a range (counter ROWS), with --prefix/--start/--end, --families, --filter, --where", func(conf []byte) (*mapreduce.Job, error) {
		var c RowCounterConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return RowCounter(c)
	})
}
