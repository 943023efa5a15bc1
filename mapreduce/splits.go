package mapreduce

import (
	"bytes"
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// DefaultSplitBytes is the split-size budget of a table input: a tablet
// larger than this (by SampleRowKeys) is sub-split at sampled keys.
const DefaultSplitBytes = 256 << 20

// rowRange returns the input's rows as [start, end) (nil end: the end of
// the table).
func (in *TableInput) rowRange() ([]byte, []byte, error) {
	if len(in.Prefix) > 0 {
		if len(in.Start) > 0 || len(in.End) > 0 {
			return nil, nil, fmt.Errorf("input %s: Prefix cannot be combined with Start or End", in.Table)
		}
		return in.Prefix, cell.PrefixSuccessor(in.Prefix), nil
	}
	end := in.End
	if len(end) == 0 {
		end = nil
	}
	if (tabletdesc.KeyRange{Start: in.Start, End: end}).Empty() {
		return nil, nil, fmt.Errorf("input %s: start %q is not before end %q", in.Table, in.Start, end)
	}
	return in.Start, end, nil
}

// checkTableInput checks, before any task, that the table exists and the
// filter and the script filter are valid: a scan with the input's filter
// (the server validates it) over an empty range, and a compile of the
// script.
func checkTableInput(ctx context.Context, c *client.Client, in *TableInput, readTime int64) error {
	if in.Table == "" {
		return fmt.Errorf("input: no table")
	}
	if _, _, err := in.rowRange(); err != nil {
		return err
	}
	if in.Script != "" {
		prog, err := scripts.Compile("filter", in.Script)
		if err != nil {
			return fmt.Errorf("input %s: script filter: %w", in.Table, err)
		}
		if !prog.IsFilter() {
			return fmt.Errorf("input %s: the script is not a filter (it never emits to keep)", in.Table)
		}
	}
	// A scan of one row that cannot exist ("\x00" to "\x00\x00"): the
	// server checks the table and the filter without reading the table,
	// where a scan of the input's first row could read far under a
	// selective filter.
	opts := scanOptions(in, readTime)
	opts.Start, opts.End, opts.Limit = []byte{0}, []byte{0, 0}, 1
	s := c.Scan(ctx, in.Table, opts)
	defer s.Close()
	s.Next()
	if err := s.Err(); err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("input table %q not found: %w", in.Table, err)
		}
		return fmt.Errorf("input %s: %w", in.Table, err)
	}
	return nil
}

// tableSplits returns one split per tablet of the input's range, tablets
// larger than splitBytes sub-split at the table's sampled keys; each split
// carries its tablet's server as the locality hint.
func tableSplits(ctx context.Context, c *client.Client, in *TableInput) ([]Split, error) {
	start, end, err := in.rowRange()
	if err != nil {
		return nil, err
	}
	tablets, err := c.Tablets(ctx, in.Table)
	if err != nil {
		return nil, fmt.Errorf("input %s: tablets: %w", in.Table, err)
	}
	samples, err := c.SampleRowKeys(ctx, in.Table)
	if err != nil {
		return nil, fmt.Errorf("input %s: sample row keys: %w", in.Table, err)
	}
	budget := in.SplitBytes
	if budget <= 0 {
		budget = DefaultSplitBytes
	}
	return PlanSplits(in.Table, tablets, samples, start, end, budget), nil
}

// PlanSplits is the splitting of a table input as a plain function: the
// tablets (in row order) clipped to [start, end) (nil end: unbounded),
// each cut at the sampled keys inside it into pieces of about budget bytes.
// Samples are SampleRowKeys's: rows before Key hold about Offset bytes,
// the last key empty (the end of the table).
func PlanSplits(table string, tablets []client.TabletInfo, samples []client.RowSample, start, end []byte, budget int64) []Split {
	// bytesBefore estimates the table's bytes before key (nil: the end).
	var total int64
	if len(samples) > 0 {
		total = samples[len(samples)-1].Offset
	}
	bytesBefore := func(key []byte) int64 {
		if key == nil {
			return total
		}
		var off int64
		for _, s := range samples {
			if len(s.Key) == 0 || bytes.Compare(s.Key, key) > 0 {
				break
			}
			off = s.Offset
		}
		return off
	}
	var splits []Split
	for _, t := range tablets {
		part := tabletdesc.KeyRange{Start: t.Start, End: t.End}.Intersect(tabletdesc.KeyRange{Start: start, End: end})
		if part.Empty() {
			continue
		}
		lo, hi := part.Start, part.End
		if len(hi) == 0 {
			hi = nil
		}
		host := t.Server
		if h, _, err := net.SplitHostPort(t.Server); err == nil {
			host = h
		}
		// Cut points: sampled keys strictly inside (lo, hi).
		pieceStart := lo
		for _, s := range samples {
			if len(s.Key) == 0 || bytes.Compare(s.Key, lo) <= 0 {
				continue
			}
			if hi != nil && bytes.Compare(s.Key, hi) >= 0 {
				break
			}
			if bytesBefore(s.Key)-bytesBefore(pieceStart) >= budget {
				splits = append(splits, Split{Table: table, Start: pieceStart, End: s.Key, Server: t.Server, Host: host,
					EstimatedBytes: bytesBefore(s.Key) - bytesBefore(pieceStart)})
				pieceStart = s.Key
			}
		}
		splits = append(splits, Split{Table: table, Start: pieceStart, End: hi, Server: t.Server, Host: host,
			EstimatedBytes: max(0, bytesBefore(hi)-bytesBefore(pieceStart))})
	}
	return splits
}
