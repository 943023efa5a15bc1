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
