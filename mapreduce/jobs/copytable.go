package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

// CopyTableConf configures copytable.
type CopyTableConf struct {
	Input TableSpec `json:"input"`
	// Dst is the destination table, on DstAddr (default: the job's
	// cluster).
	Dst     string `json:"dst"`
	DstAddr string `json:"dst_addr,omitempty"`
	// Rename maps source families to destination families (HBase's
	// --families=old:new); when set, only its families are copied.
	Rename map[string]string `json:"rename,omitempty"`
}

// CopyTable copies the cells of a range of a table (every version the
// input keeps, each with its own timestamp) into another table, possibly
// on another cluster, renaming families. Map-only: each map writes its
// split's rows as batched mutations; a re-run writes the same cells.
func CopyTable(c CopyTableConf) (*mapreduce.Job, error) {
	if c.Dst == "" {
		return nil, fmt.Errorf("dst: required")
	}
	in, err := c.Input.Input()
	if err != nil {
		return nil, err
	}
	if len(c.Rename) > 0 {
		in.Families = nil
		for old, nw := range c.Rename {
			if !cell.ValidFamilyName(old) || !cell.ValidFamilyName(nw) {
				return nil, fmt.Errorf("families: %q:%q is not a valid family rename", old, nw)
			}
			in.Families = append(in.Families, old)
		}
		slices.Sort(in.Families)
	}
	rename := c.Rename
	return &mapreduce.Job{
		Input: in,
		Map: func(_ context.Context, row cell.Row, out mapreduce.MapContext) error {
			if len(rename) > 0 {
				for i := range row.Cells {
					if nw, ok := rename[row.Cells[i].Family]; ok {
						row.Cells[i].Family = nw
					}
				}
			}
			return out.Write(row)
		},
		Output: &mapreduce.TableOutput{Addr: c.DstAddr, Table: c.Dst},
	}, nil
}

func init() {
	mapreduce.Register("copytable", "SRC DST: copy a table's cells (all versions, own timestamps) with --families old:new, --start/--end, --starttime/--endtime, --versions, --dst-addr", func(conf []byte) (*mapreduce.Job, error) {
		var c CopyTableConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return CopyTable(c)
	})
}
