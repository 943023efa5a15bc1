package tabletserver

import (
	"context"
	"fmt"

	"github.com/tabuladb/tabula/storage/meta"
)

// CompactTable runs a compaction now on every tablet of table this Host
// serves: a major one (memtable flushed, every SSTable of each locality
// group rewritten into one, deletions and versions the GC policies drop
// gone) when major, else a merging one. It returns the number of tablets
// compacted; the first error stops it (ErrTableNotFound when the table is
// not open here). Operators (and the fault campaign) force compactions
// through it; the tablets' own maintenance runs merging compactions by
// themselves.
func (h *Host) CompactTable(ctx context.Context, id meta.TableID, major bool) (int, error) {
	st, err := h.table(id)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, tb := range st.list() {
		if err := tb.Compact(ctx, major); err != nil {
			return n, fmt.Errorf("compacting tablet %s of %s: %w", tb.ID(), id, err)
		}
		n++
	}
	return n, nil
}
