package beamio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// rowsScan is a scanFunc over n rows that fails with err after them (nil:
// ends), noting whether it saw its context cancelled.
func rowsScan(n int, err error, cancelled *bool) scanFunc {
	return func(ctx context.Context, fn func(cell.Row) bool) (bool, error) {
		for i := range n {
			if !fn(cell.Row{Key: []byte(fmt.Sprintf("r%06d", i))}) {
				if cancelled != nil {
					*cancelled = ctx.Err() != nil
				}
				return false, nil
			}
		}
		if err != nil {
			return false, err
		}
		return true, nil
	}
}

func TestReadAhead(t *testing.T) {
	for _, n := range []int{0, 1, aheadFirstRows, aheadFirstRows + 1, 3 * aheadFirstRows, aheadRows - 1, aheadRows, aheadRows + 1, 10*aheadRows + 7} {
		var got int
		ended, err := readAhead(context.Background(), rowsScan(n, nil, nil), func(r cell.Row) bool {
			if want := fmt.Sprintf("r%06d", got); string(r.Key) != want {
				t.Fatalf("%d rows: row %d is %s, want %s", n, got, r.Key, want)
			}
			got++
			return true
		})
		if err != nil || !ended || got != n {
			t.Fatalf("%d rows: got %d, ended %v, err %v", n, got, ended, err)
		}
	}
}

// TestReadAheadStops: fn returning false stops the read there, and the
// scan goroutine is cancelled and done by the time readAhead returns.
func TestReadAheadStops(t *testing.T) {
	var cancelled bool
	got := 0
	ended, err := readAhead(context.Background(), rowsScan(100*aheadRows, nil, &cancelled), func(cell.Row) bool {
		got++
		return got < 3*aheadRows/2
	})
	if ended || err != nil || got != 3*aheadRows/2 {
		t.Fatalf("stopped after %d rows (want %d), ended %v, err %v", got, 3*aheadRows/2, ended, err)
	}
	if !cancelled {
		t.Fatal("the scan was not cancelled when fn stopped")
	}
}

// TestReadAheadError: a scan's error comes after every row it delivered.
func TestReadAheadError(t *testing.T) {
	boom := errors.New("boom")
	got := 0
	ended, err := readAhead(context.Background(), rowsScan(aheadRows+5, boom, nil), func(cell.Row) bool { got++; return true })
	if !errors.Is(err, boom) || ended || got != aheadRows+5 {
		t.Fatalf("got %d rows, ended %v, err %v; want %d rows and boom", got, ended, err, aheadRows+5)
	}
}

// TestReadAheadCancelled: a cancelled context is an error, not a read
// that stopped quietly.
func TestReadAheadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	got := 0
	ended, err := readAhead(ctx, rowsScan(100*aheadRows, nil, nil), func(cell.Row) bool {
		got++
		if got == aheadRows {
			cancel()
		}
		return true
	})
	if !errors.Is(err, context.Canceled) || ended {
		t.Fatalf("after cancelling: ended %v, err %v (%d rows)", ended, err, got)
	}
}

// TestReadAheadReusesBatches: the batches handed over come back to be
// filled again, so a long read allocates a bounded number of them, not
// one per aheadRows rows.
func TestReadAheadReusesBatches(t *testing.T) {
	rows := make([]cell.Row, 64*aheadRows)
	for i := range rows {
		rows[i] = cell.Row{Key: []byte(fmt.Sprintf("r%06d", i))}
	}
	scanN := func(n int) scanFunc {
		return func(ctx context.Context, fn func(cell.Row) bool) (bool, error) {
			for _, r := range rows[:n] {
				if !fn(r) {
					return false, nil
				}
			}
			return true, nil
		}
	}
	allocs := func(n int) float64 {
		return testing.AllocsPerRun(20, func() {
			seen := 0
			if _, err := readAhead(context.Background(), scanN(n), func(cell.Row) bool { seen++; return true }); err != nil || seen != n {
				t.Fatalf("read %d of %d rows: %v", seen, n, err)
			}
		})
	}
	// Without reuse the long read allocates about 60 more batches. The
	// counts are the process's (testing.AllocsPerRun): goroutines other
	// tests of the package left behind (prism's, gRPC's) allocate beside
	// the read — a CI run counted 7 more with reuse working — so the
	// least of three tries is taken, against half of that.
	var short, long, extra float64
	for try := range 3 {
		s, l := allocs(4*aheadRows), allocs(64*aheadRows)
		if try == 0 || l-s < extra {
			short, long, extra = s, l, l-s
		}
	}
	if extra > 30 {
		t.Fatalf("reading 60 more batches of rows allocated %.1f more times (%.1f against %.1f): batches are not reused", extra, long, short)
	}
}

// TestReadAheadBoundsBytes: rows of large values go over in batches of
// about aheadBatchBytes, not aheadRows rows, so that the rows read ahead
// of the pipeline stay within a few batches' bytes.
func TestReadAheadBoundsBytes(t *testing.T) {
	const rowBytes = aheadBatchBytes / 4
	value := make([]byte, rowBytes)
	const n = 64
	delivered := 0 // rows the scan has handed to read-ahead
	maxAhead := 0
	scan := func(ctx context.Context, fn func(cell.Row) bool) (bool, error) {
		for i := range n {
			delivered = i + 1
			if !fn(cell.Row{Key: []byte(fmt.Sprintf("r%03d", i)), Cells: []cell.Cell{{Family: "f", Value: value}}}) {
				return false, nil
			}
		}
		return true, nil
	}
	var mu sync.Mutex
	got := 0
	_, err := readAhead(context.Background(), func(ctx context.Context, fn func(cell.Row) bool) (bool, error) {
		return scan(ctx, func(r cell.Row) bool {
			ok := fn(r)
			mu.Lock()
			maxAhead = max(maxAhead, delivered-got)
			mu.Unlock()
			return ok
		})
	}, func(cell.Row) bool {
		mu.Lock()
		got++
		mu.Unlock()
		return true
	})
	if err != nil || got != n {
		t.Fatalf("read %d of %d rows: %v", got, n, err)
	}
	// Ahead at most: the batches buffered, the one being filled and the
	// one handed over, each of about aheadBatchBytes.
	if limit := (aheadBatches + 2) * (aheadBatchBytes/rowBytes + 1); maxAhead > limit {
		t.Fatalf("up to %d rows of %d bytes were read ahead, want at most %d", maxAhead, rowBytes, limit)
	}
}
