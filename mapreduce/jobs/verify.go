package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// verify's counters (HBase's VerifyReplication counts GOODROWS, BADROWS and
// the same three kinds of difference).
const (
	CounterGood             = "GOOD"
	CounterOnlyInA          = "ONLY_IN_A"
	CounterOnlyInB          = "ONLY_IN_B"
	CounterContentDifferent = "CONTENT_DIFFERENT"
)

// VerifyConf configures verify.
type VerifyConf struct {
	// A is the first table and the rows, cells and time range compared;
	// B is the second table (on BAddr, default A's cluster), read with
	// the same selection.
	A     TableSpec `json:"a"`
	B     string    `json:"b"`
	BAddr string    `json:"b_addr,omitempty"`
	// MaxDiffs is how many differing rows each map reports (default 10).
	MaxDiffs int `json:"max_diffs,omitempty"`
}

// VerifyDiff is one differing row.
type VerifyDiff struct {
	Row  []byte `json:"row"`
	Kind string `json:"kind"` // ONLY_IN_A, ONLY_IN_B or CONTENT_DIFFERENT
}

// Verify compares two tables row by row over A's range: each map scans
// its split of A and the same range of B side by side (a merge join in key
// order) and counts rows that are equal in every cell, version and
// timestamp (GOOD), only in A, only in B, or different; it reports its
// first differing rows.
func Verify(c VerifyConf) (*mapreduce.Job, error) {
	in, err := c.A.Input()
	if err != nil {
		return nil, err
	}
	if c.B == "" {
		return nil, fmt.Errorf("b: required")
	}
	if in.Script != "" {
		return nil, fmt.Errorf("where: verify compares what both tables hold; a filter script is not supported")
	}
	maxDiffs := c.MaxDiffs
	if maxDiffs <= 0 {
		maxDiffs = 10
	}
	bAddr := c.BAddr
	if bAddr == "" {
		bAddr = c.A.Addr
	}
	return &mapreduce.Job{
		Input: in,
		Check: func(ctx context.Context, clients func(string) (*client.Client, error)) error {
			cl, err := clients(bAddr)
			if err != nil {
				return err
			}
			if _, err := cl.Tablets(ctx, c.B); err != nil {
				return fmt.Errorf("table B %q: %w", c.B, err)
			}
			return nil
		},
		MapSplit: func(ctx context.Context, split mapreduce.Split, out mapreduce.MapContext) error {
			ca, err := out.Client(c.A.Addr)
			if err != nil {
				return err
			}
			cb, err := out.Client(bAddr)
			if err != nil {
				return err
			}
			opts := in.ScanOptions(out.Task())
			spec := out.Task().Job
			sa, sb := ca.Scan(ctx, spec.TableName(c.A.Table), opts), cb.Scan(ctx, spec.TableName(c.B), opts)
			defer sa.Close()
			defer sb.Close()
			var diffs []VerifyDiff
			diff := func(row []byte, kind string) {
				out.Count(kind, 1)
				if len(diffs) < maxDiffs {
					diffs = append(diffs, VerifyDiff{Row: bytes.Clone(row), Kind: kind})
				}
			}
			okA, okB := sa.Next(), sb.Next()
			for okA || okB {
				switch {
				case okA && (!okB || bytes.Compare(sa.Row().Key, sb.Row().Key) < 0):
					out.Count(mapreduce.CounterInputRows, 1)
					diff(sa.Row().Key, CounterOnlyInA)
					okA = sa.Next()
				case okB && (!okA || bytes.Compare(sb.Row().Key, sa.Row().Key) < 0):
					diff(sb.Row().Key, CounterOnlyInB)
					okB = sb.Next()
				default:
					out.Count(mapreduce.CounterInputRows, 1)
					if sameCells(sa.Row().Cells, sb.Row().Cells) {
						out.Count(CounterGood, 1)
					} else {
						diff(sa.Row().Key, CounterContentDifferent)
					}
					okA, okB = sa.Next(), sb.Next()
				}
			}
			if err := sa.Err(); err != nil {
				return fmt.Errorf("table A %s: %w", c.A.Table, err)
			}
			if err := sb.Err(); err != nil {
				return fmt.Errorf("table B %s: %w", c.B, err)
			}
			if len(diffs) > 0 {
				b, err := json.Marshal(diffs)
				if err != nil {
					return err
				}
				out.Report(b)
			}
			return nil
		},
	}, nil
}

func sameCells(a, b []cell.Cell) bool {
	return slices.EqualFunc(a, b, func(x, y cell.Cell) bool {
		return x.Family == y.Family && x.Timestamp == y.Timestamp && bytes.Equal(x.Qualifier, y.Qualifier) && bytes.Equal(x.Value, y.Value)
	})
}

// VerifyDiffs collects the differing rows verify's maps reported, in key
// order, at most n (0: all).
func VerifyDiffs(res *mapreduce.Result, n int) ([]VerifyDiff, error) {
	var all []VerifyDiff
	for _, r := range res.Reports {
		var d []VerifyDiff
		if err := json.Unmarshal(r.Data, &d); err != nil {
			return nil, fmt.Errorf("report of map %d: %w", r.Task, err)
		}
		all = append(all, d...)
	}
	slices.SortFunc(all, func(a, b VerifyDiff) int { return bytes.Compare(a.Row, b.Row) })
	if n > 0 && len(all) > n {
		all = all[:n]
	}
	return all, nil
}

func init() {
	mapreduce.Register("verify", "A B: compare two tables row by row (counters GOOD, ONLY_IN_A, ONLY_IN_B, CONTENT_DIFFERENT; the first differing rows)", func(conf []byte) (*mapreduce.Job, error) {
		var c VerifyConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return Verify(c)
	})
}
