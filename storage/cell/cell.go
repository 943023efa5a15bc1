package cell

import (
	"bytes"
	"math"
)

// ServerTimestamp in a SetCell mutation asks the server to assign the current
// time (Cloud Bigtable's timestamp_micros = -1).
const ServerTimestamp int64 = -1

// MaxTimestamp is the largest timestamp a cell may carry. The values above it
// are reserved for delete markers, which must sort before every cell of their
// column.
const MaxTimestamp int64 = math.MaxInt64 - 1

// Cell is one version of one column of a row.
type Cell struct {
	Family    string
	Qualifier []byte
	Timestamp int64 // microseconds since the Unix epoch
	Value     []byte
}

// Row is a row key and the cells a read returned for it, ordered by family,
// qualifier, then timestamp descending (newest first).
type Row struct {
	Key   []byte
	Cells []Cell
}

// Clone returns a deep copy of c.
func (c Cell) Clone() Cell {
	return Cell{
		Family:    c.Family,
		Qualifier: bytes.Clone(c.Qualifier),
		Timestamp: c.Timestamp,
		Value:     bytes.Clone(c.Value),
	}
}

// CompareColumns orders two columns as the internal key order does: by family,
// then qualifier.
func CompareColumns(famA string, qualA []byte, famB string, qualB []byte) int {
	if famA != famB {
		if famA < famB {
			return -1
		}
		return 1
	}
	return bytes.Compare(qualA, qualB)
}

// CompareCells orders two cells of one row as a read presents them: family
// and qualifier ascending, then timestamp descending (newest first).
func CompareCells(a, b Cell) int {
	if c := CompareColumns(a.Family, a.Qualifier, b.Family, b.Qualifier); c != 0 {
		return c
	}
	switch {
	case a.Timestamp > b.Timestamp:
		return -1
	case a.Timestamp < b.Timestamp:
		return 1
	}
	return 0
}

// PrefixSuccessor returns the smallest row key above every key that starts
// with prefix — the exclusive end of a prefix scan — or nil when there is
// none (the prefix is empty or all 0xFF bytes).
func PrefixSuccessor(prefix []byte) []byte {
	p := bytes.Clone(prefix)
	for len(p) > 0 {
		if p[len(p)-1] != 0xFF {
			p[len(p)-1]++
			return p
		}
		p = p[:len(p)-1]
	}
	return nil
}
