package tabletserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/ctxtime"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// The routing of requests to a table's tablets: each served table keeps
// its tablets sorted by range (routing); a request finds its tablet
// (withTablet, looked up again across splits), and reads go through readRow
// and scan — the hop between the gRPC services (dataservice.go,
// readrows.go) and a tablet's merged read (storage/tablet/read.go).

// servedTable is one open table: its catalog entry and its tablets.
type servedTable struct {
	// mu serialises changes of the tablet list and the schema; readers
	// use the atomic pointers and never wait for a split.
	mu      sync.Mutex
	meta    atomic.Pointer[meta.Table]
	routes  atomic.Pointer[routing]
	dropped bool // under mu
	// gone is set (under mu) when UnloadTablet removed the table's last
	// tablet: the entry is being removed from Host.tables, and a tablet
	// loaded meanwhile goes into a fresh entry.
	gone atomic.Bool
}

// routing is an immutable list of a table's tablets, ordered by range and
// covering all rows (in Partial mode: not overlapping, with gaps), with
// their ranges copied once so that lookups do not allocate. A split,
// load or unload replaces the whole routing.
type routing struct {
	tabs   []*tablet.Tablet
	ranges []tabletdesc.KeyRange // ranges[i] is tabs[i].Range()
}

func newRouting(tabs []*tablet.Tablet) *routing {
	r := &routing{tabs: tabs, ranges: make([]tabletdesc.KeyRange, len(tabs))}
	for i, tb := range tabs {
		r.ranges[i] = tb.Range()
	}
	return r
}

func (st *servedTable) list() []*tablet.Tablet { return st.routes.Load().tabs }

func (st *servedTable) set(tabs []*tablet.Tablet) { st.routes.Store(newRouting(tabs)) }

// find returns the tablet that holds row, nil if none does.
func (r *routing) find(row []byte) *tablet.Tablet {
	// The first tablet whose end is above row.
	i := sort.Search(len(r.tabs), func(i int) bool { return r.ranges[i].EndsAfter(row) })
	if i == len(r.tabs) || bytes.Compare(row, r.ranges[i].Start) < 0 {
		return nil // past the last tablet, or in a gap (Partial mode)
	}
	return r.tabs[i]
}

// checkCoverage verifies that tabs are ordered, adjacent and cover every row.
func checkCoverage(tabs []*tablet.Tablet) error {
	if len(tabs) == 0 {
		return errors.New("table has no tablets")
	}
	var prevEnd []byte
	for i, tb := range tabs {
		r := tb.Range()
		if !bytes.Equal(r.Start, prevEnd) {
			return fmt.Errorf("tablet %s starts at %q, want %q", tb.ID(), r.Start, prevEnd)
		}
		if r.Unbounded() && i != len(tabs)-1 {
			return fmt.Errorf("tablet %s ends the table but is not the last", tb.ID())
		}
		prevEnd = r.End
	}
	if len(prevEnd) > 0 {
		return fmt.Errorf("the last tablet ends at %q, not at the end of the table", prevEnd)
	}
	return nil
}

// Retries of a request that met a tablet that stopped serving (split,
// closed): the new tablets appear within the time a split takes to open
// its children, which is short because a split copies no data.
const (
	notServingRetries    = 30
	notServingBackoff    = 2 * time.Millisecond
	notServingMaxBackoff = 100 * time.Millisecond
)

// withTablet calls fn with the tablet holding row, looking it up again
// when fn fails with tabletdesc.ErrNotServing (a split or close raced the
// request), so that clients never see a split.
func (h *Host) withTablet(ctx context.Context, id meta.TableID, row []byte, fn func(*tablet.Tablet) error) error {
	backoff := notServingBackoff
	var err error
	for attempt := 0; attempt < notServingRetries; attempt++ {
		var st *servedTable
		if st, err = h.servedTable(id, row); err != nil {
			return err
		}
		tb := st.routes.Load().find(row)
		if tb == nil {
			if h.opts.Partial {
				// Served elsewhere (or nowhere yet): waiting would
				// not help, the client must look the row up again.
				return notHere(id, row)
			}
			err = &tabletdesc.NotServingError{Tablet: id.String(), Row: row, Reason: "no tablet holds the row"}
		} else if err = fn(tb); !errors.Is(err, tabletdesc.ErrNotServing) {
			return err
		}
		if err := ctxtime.Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, notServingMaxBackoff)
	}
	return withRow(err, row)
}

// readRow reads one row through the routing, as withTablet does.
func (h *Host) readRow(ctx context.Context, id meta.TableID, key []byte, ro tablet.ReadOptions) (cell.Row, bool, error) {
	var row cell.Row
	var ok bool
	err := h.withTablet(ctx, id, key, func(tb *tablet.Tablet) error {
		var err error
		row, ok, err = tb.ReadRow(ctx, key, ro)
		return err
	})
	return row, ok, err
}

// servedTable returns table id for a request about row (a scan's first
// row still to read): the open table, or ErrTableNotFound — except in
// Partial mode, where a table none of whose tablets is open here is a gap
// like any other, answered as notHere: its tablets are served elsewhere,
// or are moving or merging (a merge unloads the last tablet a server held
// of the table before the merged one is loaded), and the client must look
// the row up again rather than be told the table does not exist.
func (h *Host) servedTable(id meta.TableID, row []byte) (*servedTable, error) {
	st, err := h.table(id)
	if err != nil && h.opts.Partial {
		return nil, notHere(id, row)
	}
	return st, err
}

// notHere is the not-serving answer, in Partial mode, for a row no tablet
// of this server holds.
func notHere(id meta.TableID, row []byte) error {
	return &tabletdesc.NotServingError{Tablet: id.String(), Row: row, Reason: "no tablet of this server holds the row"}
}

// errStopScan ends a scan early without error.
var errStopScan = errors.New("stop scan")

// scan calls fn for every row of table id in [start, end) (nil bounds are
// unbounded) in key order, descending with reverse, stitching the tablets
// together. A tablet that stops serving mid-scan (split) is looked up again
// and the scan resumes after the last row returned, so fn sees each row
// once. fn's errors stop the scan and are returned. In Partial mode, a
// part of the range no local tablet covers ends the scan, once the rows
// before it were passed to fn, with a *tabletdesc.NotServingError naming the
// first row of that part (see scanTablets).
func (h *Host) scan(ctx context.Context, id meta.TableID, start, end []byte, reverse bool, ro tablet.ReadOptions, fn func(cell.Row) error) error {
	var last []byte // last row passed to fn
	backoff := notServingBackoff
	retries := 0
	for {
		lo, hi := start, end
		if last != nil {
			if reverse {
				hi = last
			} else {
				lo = append(bytes.Clone(last), 0)
			}
		}
		// The row a gap names is lo, in either direction, as
		// scanTablets names it for a table with no tablet here.
		st, err := h.servedTable(id, lo)
		if err != nil {
			return err
		}
		err = scanTablets(ctx, st.routes.Load(), lo, hi, reverse, h.opts.Partial, ro, func(r cell.Row) error {
			last = r.Key
			retries = 0
			return fn(r)
		})
		var gap *gapError
		if errors.As(err, &gap) {
			gap.err.Tablet = id.String()
			return gap.err // served elsewhere: retrying would not help
		}
		if !errors.Is(err, tabletdesc.ErrNotServing) {
			return err
		}
		retries++
		if retries > notServingRetries {
			return err
		}
		if err := ctxtime.Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, notServingMaxBackoff)
	}
}

// gapError is scanTablets' error for a part of the range no tablet of the
// routing covers (Partial mode); scan answers err without retrying.
type gapError struct{ err *tabletdesc.NotServingError }

func (e *gapError) Error() string { return e.err.Error() }

func (e *gapError) Unwrap() error { return e.err }

// scanTablets scans the tablets of rt that overlap [lo, hi) in order. With
// partial, the routing may have gaps: reaching one in [lo, hi) ends the
// scan with a *gapError naming the gap's first row (also in a reverse
// scan, where it is the last row of the gap the scan reached that can be
// named: the gap's start).
func scanTablets(ctx context.Context, rt *routing, lo, hi []byte, reverse, partial bool, ro tablet.ReadOptions, fn func(cell.Row) error) error {
	want := tabletdesc.KeyRange{Start: lo, End: hi}
	if want.Empty() {
		return nil
	}
	var sel []int
	for i, r := range rt.ranges {
		if r.Overlaps(want) {
			sel = append(sel, i)
		}
	}
	if reverse {
		slices.Reverse(sel)
	}
	gap := func(row []byte) error {
		return &gapError{&tabletdesc.NotServingError{Row: append([]byte{}, row...),
			Reason: "no tablet of this server holds the row (the scan's range continues elsewhere)"}}
	}
	// The rows scanned so far, as a range: forward [lo, next), next nil
	// (atEnd) once the end of the table was reached; in reverse [prev,
	// hi), prev nil (atTop) until a tablet was scanned if hi is nil.
	next, atEnd := lo, false
	prev, atTop := hi, hi == nil
	for _, i := range sel {
		tb, r := rt.tabs[i], rt.ranges[i]
		if partial {
			if !reverse && bytes.Compare(r.Start, next) > 0 {
				return gap(next)
			}
			if reverse && !r.Unbounded() && (atTop || bytes.Compare(r.End, prev) < 0) {
				return gap(r.End)
			}
		}
		err := tb.Scan(ctx, tablet.ScanOptions{Start: lo, End: hi, Reverse: reverse, ReadOptions: ro}, fn)
		if err != nil {
			return err
		}
		next, atEnd = r.End, r.Unbounded()
		prev, atTop = r.Start, false
	}
	if partial {
		if !reverse && !atEnd && want.EndsAfter(next) {
			return gap(next)
		}
		if reverse && (atTop || bytes.Compare(prev, lo) > 0) {
			return gap(lo)
		}
	}
	return nil
}
