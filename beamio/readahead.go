package beamio

import (
	"context"

	"github.com/tabuladb/tabula/storage/cell"
)

// Read-ahead: a read's rows are received and decoded in a goroutine of
// their own and handed over in batches, so that reading the next rows
// overlaps with what the pipeline does with the previous ones (emitting
// them into the fused stages after the read), on another core when there
// is one.
//
// A read's first batch is small, so that its first rows reach the
// pipeline soon after they arrive (a Read starts one such stream per
// restriction); the batches then double up to aheadRows, so that a long
// read hands over (and wakes the other goroutine) once per aheadRows rows.
// A batch also goes once it holds aheadBatchBytes of cells, which bounds
// the memory ahead (about aheadBatches+1 batches) whatever the rows' size.
const (
	aheadFirstRows  = 32      // rows in a read's first batch
	aheadRows       = 1024    // rows per batch at most
	aheadBatchBytes = 1 << 20 // bytes of keys and cells per batch at most (but one row)
	aheadBatches    = 4       // batches buffered
)

// rowSize is the bytes of r's key and cells' qualifiers and values.
func rowSize(r cell.Row) int {
	n := len(r.Key)
	for i := range r.Cells {
		n += len(r.Cells[i].Qualifier) + len(r.Cells[i].Value)
	}
	return n
}

// scanFunc reads rows and hands each to fn until fn returns false; ended
// reports that the read reached its end instead.
type scanFunc func(ctx context.Context, fn func(cell.Row) bool) (ended bool, err error)

// readAhead runs scan in a goroutine and calls fn with each of its rows,
// in order, here. fn returning false stops the read (ended false, nil
// error: the goroutine is cancelled and waited for); otherwise readAhead
// returns what scan returned, once fn has had every row scan delivered
// before it ended. A cancelled ctx is an error, never a silent stop.
func readAhead(ctx context.Context, scan scanFunc, fn func(cell.Row) bool) (ended bool, err error) {
	return readAheadBatches(ctx, scan, func(rows []cell.Row) bool {
		for _, r := range rows {
			if !fn(r) {
				return false
			}
		}
		return true
	})
}

// readAheadBatches is readAhead handing fn the rows in the batches they
// were read ahead in (the slice is reused once fn returns): fn returning
// false stops the read, as fn of readAhead does for a row.
func readAheadBatches(ctx context.Context, scan scanFunc, fn func([]cell.Row) bool) (ended bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []cell.Row, aheadBatches)
	// Consumed batches come back to be filled again: a read allocates
	// about aheadBatches+2 batches, not one per aheadRows rows.
	free := make(chan []cell.Row, aheadBatches+2)
	done := make(chan struct{})
	var scanEnded bool
	var scanErr error
	go func() {
		defer close(done)
		defer close(batches)
		cur := make([]cell.Row, 0, aheadRows)
		limit, curBytes := aheadFirstRows, 0
		send := func() bool {
			select {
			case batches <- cur:
				select {
				case cur = <-free:
				default:
					cur = make([]cell.Row, 0, aheadRows)
				}
				limit, curBytes = min(2*limit, aheadRows), 0
				return true
			case <-ctx.Done():
				return false
			}
		}
		scanEnded, scanErr = scan(ctx, func(r cell.Row) bool {
			cur = append(cur, r)
			curBytes += rowSize(r)
			return len(cur) < limit && curBytes < aheadBatchBytes || send()
		})
		if len(cur) > 0 && !send() {
			scanEnded = false
		}
	}()
	stopped := false
	for rows := range batches {
		if stopped {
			continue // draining: the goroutine stops at its next send
		}
		if !fn(rows) {
			stopped = true
			cancel()
		}
		// fn has had the rows; the batch keeps no reference to them.
		clear(rows)
		select {
		case free <- rows[:0]:
		default:
		}
	}
	<-done
	if stopped {
		return false, nil
	}
	if scanErr == nil && !scanEnded {
		// The scan stopped without fn asking: only a cancelled ctx
		// (a send that could not complete) does that.
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
	return scanEnded, scanErr
}
