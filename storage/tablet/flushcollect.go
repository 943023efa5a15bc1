package tablet

import (
	"bytes"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Collecting at flush time (HBase's flushes apply VERSIONS and TTL the
// same way): a flush writes the frozen memtable as SSTables, and it
// leaves out the versions no read can return, as a collecting merge
// leaves them out of its files (rewriteFiles, resolveKeep) — the older
// writes of a version (the newest write of a timestamp hides them) and
// the versions the GC policies collect counting only the memtable's
// versions. A table whose rows are rewritten (Webtable's crawls, a
// counter's last value, the bench's random writes) would otherwise write
// every old version into an SSTable, and every merge would copy it again
// until a merge took all the files.
//
// Counting only the memtable's versions is enough: the older files can
// only add versions, each older in write order, and a policy that collects
// the i-th newest version collects it at any greater rank. Markers are
// the exception: a delete of the versions above one makes it the newest
// left. A marker shadows only older writes and sorts before what it
// shadows (row markers first in their row, a family's before its
// columns, a column's before its versions), so the collector stops
// collecting in a row from its first marker on; rows with a marker in the
// newer, active memtable are not collected at all (rowsWithMarkers, as a
// collecting merge does). A marker written after the flush has listed
// those finds the version collected, as it would after any earlier GC.
// Aggregate families fold the writes of a timestamp and families dropped
// and created again hide their older entries: neither is collected here.
// Leaving an entry in is always correct; the merges collect it later.

// flushCollector decides, entry by entry in key order, which entries of a
// frozen memtable a flush leaves out. Not safe for concurrent use.
type flushCollector struct {
	families map[string]tabletdesc.Family
	drops    map[string]uint64
	// marked: rows with a marker in a newer memtable.
	marked map[string]bool
	now    int64 // microseconds, for MaxAge policies

	row       []byte // the current row
	rowMarked bool   // a marker seen in the row, or the row in marked
	// The current column (of a KindSet entry) and how many distinct
	// timestamps of it came before the last one (its rank), newest first.
	family    string
	qualifier []byte
	rank      int
	lastTS    int64
	collected int
}

// skip reports whether the flush leaves out the entry whose decoded key is
// k (k.Family and k.Qualifier set for every kind but a row marker).
// Entries must come in internal key order.
func (c *flushCollector) skip(k cell.Key) bool {
	if !bytes.Equal(k.Row, c.row) {
		c.row = append(c.row[:0], k.Row...)
		c.rowMarked = c.marked[string(k.Row)]
		c.family, c.qualifier = "", c.qualifier[:0]
		c.rank = -1
	}
	if k.Kind != cell.KindSet {
		c.rowMarked = true
		return false
	}
	if c.rowMarked {
		return false
	}
	fam, ok := c.families[k.Family]
	if !ok || fam.Aggregate != cell.NoAggregator {
		return false
	}
	if _, dropped := c.drops[k.Family]; dropped {
		return false
	}
	if c.rank < 0 || k.Family != c.family || !bytes.Equal(k.Qualifier, c.qualifier) {
		c.family, c.qualifier = k.Family, append(c.qualifier[:0], k.Qualifier...)
		c.rank, c.lastTS = 0, k.Timestamp
	} else if k.Timestamp == c.lastTS {
		// An older write of the version above: the newest hides it.
		c.collected++
		return true
	} else {
		c.rank++
		c.lastTS = k.Timestamp
	}
	if fam.GC.Collects(c.rank, k.Timestamp, c.now) {
		c.collected++
		return true
	}
	return false
}
