package tabletserver

import (
	"context"

	"github.com/tabuladb/tabula/storage/filter"
)

// RowTaker takes the rows of a ReadRows whole, instead of as the
// CellChunks of its responses: a caller that wants the row itself (a
// session's ReadRow, storage/datasession) would otherwise have every
// row's cells encoded as chunks only to merge them back into a row.
//
// ReadRows calls it once per row it returns, in order, with the row's
// cells after the filter (never none). The cells' bytes are the row's to
// keep (they alias immutable storage: see tablet.Scan); the slice itself
// is reused for the next row, so it must not be kept. An error ends the
// ReadRows, which reports it as it reports any failure (a status error
// is returned as it is).
type RowTaker func(key []byte, cells []filter.LabeledCell) error

type rowTakerKey struct{}

// WithRowTaker returns ctx carrying take: the DataService's ReadRows
// under a stream whose context is ctx hands take the rows and sends no
// response (its interceptors, checks and errors are the same). The
// request must not ask for request stats, which travel in a response.
// A ReadRows forwarded to another server (storage/gateway) does not see
// the taker: its rows come back as responses. A nil take removes the
// taker ctx carries (the gateway's relay of a local part does).
func WithRowTaker(ctx context.Context, take RowTaker) context.Context {
	return context.WithValue(ctx, rowTakerKey{}, take)
}

// rowTakerOf returns the RowTaker ctx carries, if any.
func rowTakerOf(ctx context.Context) RowTaker {
	take, _ := ctx.Value(rowTakerKey{}).(RowTaker)
	return take
}

// takenBytes is what the chunks of cells would have counted toward
// ReadRows' bytes-read metric (chunkWriter.cells): the key and the
// family names and qualifiers they would carry, and the values.
func takenBytes(key []byte, cells []filter.LabeledCell) int64 {
	n := len(key)
	for i := range cells {
		c := &cells[i]
		n += len(c.Qualifier) + len(c.Value)
		if i == 0 || c.Family != cells[i-1].Family {
			n += len(c.Family)
		}
	}
	return int64(n)
}
