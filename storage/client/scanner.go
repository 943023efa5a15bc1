package client

import (
	"bytes"
	"context"
	"errors"
	"io"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// ScanOptions select the rows and cells of a Scan (the paper's Scanner).
// Zero values select everything.
type ScanOptions struct {
	// Start and End bound the rows to [Start, End) (nil End: the end of
	// the table); Prefix, instead, selects the rows starting with it.
	Start, End, Prefix []byte
	// Families keeps only cells of these column families.
	Families []string
	// ColumnRegex keeps only cells whose qualifier matches this RE2
	// expression as a whole (Bigtable's column_qualifier_regex_filter).
	ColumnRegex string
	// StartTime and EndTime keep only cells with timestamps in
	// [StartTime, EndTime), microseconds; EndTime 0 is unbounded.
	StartTime, EndTime int64
	// MaxVersions keeps only the newest MaxVersions cells of each column;
	// 0 keeps all.
	MaxVersions int
	// Filter, when set, is a Bigtable RowFilter applied after the
	// selections above (chained: a cell must pass them and it).
	Filter *bigtablepb.RowFilter
	// Limit stops the scan after this many rows; 0 is unlimited.
	Limit int64
	// Reverse returns rows in descending key order.
	Reverse bool
}

// Scanner streams the rows of a Scan, tablet by tablet in key order (or
// reverse key order), each read from the tablet's server. Rows with no
// cell left after the filters are not returned. On a "not serving" answer
// the scanner refreshes the tablet's location, and on UNAVAILABLE it backs
// off, then resumes after the last row it returned, so no row is returned
// twice or skipped. A Scanner is not safe for concurrent use; Close it (or
// read it to the end) to release its stream.
type Scanner struct {
	c      *Client
	p      *dataPlane
	id     meta.TableID
	name   string
	opts   ScanOptions
	filter *bigtablepb.RowFilter
	lo, hi []byte // the rows still to scan: [lo, hi), nil hi unbounded
	// after, when set, is the last row returned: lo is past it (kept
	// as the key and settled into lo only when a stream opens or ends,
	// not once per row).
	after    []byte
	returned int64

	ctx       context.Context    // the caller's
	cancel    context.CancelFunc // the open stream's
	exhausted bool
	stream    grpc.ClientStream // ReadRows, its responses read raw (openReadRows)
	loc       meta.Location     // the tablet the stream reads
	retry     retrier
	merger    chunkMerger
	queue     []cell.Row // rows received; those from next on not returned yet
	next      int
	spare     []byte // Options.ReuseScanBuffers: the last response's buffer, to receive the next into
	row       cell.Row
	err       error
	done      bool
}

// Scan starts a scan of table; see ScanOptions and Scanner.
//
//	s := c.Scan(ctx, "t", client.ScanOptions{Prefix: []byte("com.")})
//	defer s.Close()
//	for s.Next() { use(s.Row()) }
//	if err := s.Err(); err != nil { … }
func (c *Client) Scan(ctx context.Context, table string, opts ScanOptions) *Scanner {
	s := &Scanner{c: c, p: c.data(), opts: opts, filter: FilterOf(opts), retry: retrier{idempotent: true}}
	s.ctx, s.cancel = ctx, func() {}
	var err error
	if s.id, s.name, err = c.tableID(table); err != nil {
		s.fail(err)
		return s
	}
	s.lo, s.hi = opts.Start, opts.End
	if len(opts.Prefix) > 0 {
		if opts.Start != nil || opts.End != nil {
			s.fail(status.Error(codes.InvalidArgument, "client: Prefix cannot be combined with Start or End"))
			return s
		}
		s.lo, s.hi = opts.Prefix, cell.PrefixSuccessor(opts.Prefix)
	}
	if len(s.hi) == 0 {
		s.hi = nil
	}
	return s
}

// ReadRow reads one row with the cells opts selects (its row-range and
// Limit fields are ignored); ok is false when the row has no such cell.
func (c *Client) ReadRow(ctx context.Context, table string, row []byte, opts ScanOptions) (r cell.Row, ok bool, err error) {
	opts.Start, opts.End, opts.Prefix, opts.Limit, opts.Reverse = row, append(bytes.Clone(row), 0), nil, 1, false
	s := c.Scan(ctx, table, opts)
	defer s.Close()
	if s.Next() {
		return s.Row(), true, nil
	}
	return cell.Row{}, false, s.Err()
}

func (s *Scanner) fail(err error) {
	s.err, s.done = err, true
	s.closeStream()
}

func (s *Scanner) closeStream() {
	s.cancel()
	s.stream = nil
}

// Row returns the row Next moved to; it stays valid after the next call.
func (s *Scanner) Row() cell.Row { return s.row }

// Err returns the error that ended the scan, nil if it ran to its end or
// was closed.
func (s *Scanner) Err() error { return s.err }

// Close ends the scan and releases its stream; Next then returns false.
func (s *Scanner) Close() {
	s.done = true
	s.cancel()
	s.stream = nil
}

// finished reports whether no rows remain in [lo, hi).
func (s *Scanner) finished() bool {
	s.settleLo()
	return s.exhausted || (tabletdesc.KeyRange{Start: s.lo, End: s.hi}).Empty() || s.opts.Limit > 0 && s.returned >= s.opts.Limit
}

// settleLo moves lo past the last row returned.
func (s *Scanner) settleLo() {
	if s.after != nil {
		s.lo = append(bytes.Clone(s.after), 0)
		s.after = nil
	}
}

// Next moves to the next row, reporting false at the end of the scan or
// on an error (see Err).
func (s *Scanner) Next() bool {
	for !s.done {
		if s.next < len(s.queue) {
			s.row = s.queue[s.next]
			s.queue[s.next] = cell.Row{} // the queue is reused; its rows are the caller's
			s.next++
			// Resume after this row if the stream breaks.
			if s.opts.Reverse {
				s.hi = s.row.Key
			} else {
				s.after = s.row.Key
			}
			s.returned++
			s.retry = retrier{idempotent: true}
			return true
		}
		s.queue, s.next = s.queue[:0], 0
		if s.finished() {
			s.Close()
			return false
		}
		if s.stream == nil {
			if err := s.open(); err != nil {
				if rerr := s.retry.retry(s.ctx, s.p, s.loc, err); rerr != nil {
					s.fail(rerr)
				}
				continue
			}
		}
		resp := rawReadRows{reusing: s.c.opts.ReuseScanBuffers}
		if resp.reusing && s.merger.betweenRows() {
			// Every row of the last response was returned, and none is
			// being assembled from it: its buffer and its cells' slab
			// are free (the rows returned were valid until this Next).
			// The resume point must not alias it: finished() settled lo
			// above; a reversed scan's hi is the last row's key.
			if s.opts.Reverse && s.hi != nil {
				s.hi = bytes.Clone(s.hi)
			}
			resp.reuse = s.spare
			s.merger.reuseSlab()
		}
		err := s.stream.RecvMsg(&resp)
		if errors.Is(err, io.EOF) {
			// The tablet is done: continue past its end (or before its start).
			s.closeStream()
			if err := s.merger.end(); err != nil {
				s.fail(err)
				continue
			}
			if s.opts.Reverse {
				if len(s.loc.Start) == 0 || bytes.Compare(s.loc.Start, s.lo) <= 0 {
					s.exhausted = true
				} else {
					s.hi = s.loc.Start
				}
			} else {
				if tabletdesc.CompareEnds(s.loc.End, s.hi) >= 0 {
					s.exhausted = true
				} else {
					s.lo = s.loc.End
				}
			}
			continue
		}
		if err != nil {
			loc := s.loc
			s.closeStream()
			s.merger.reset()
			s.queue = s.queue[:0] // empty here (drained before each Recv); resume from the last row returned
			if rerr := s.retry.retry(s.ctx, s.p, loc, err); rerr != nil {
				s.fail(rerr)
			}
			continue
		}
		if s.c.opts.ReuseScanBuffers {
			s.spare = resp.buf
		}
		if s.queue, err = s.merger.addEncoded(resp.buf, s.queue); err != nil {
			s.fail(err)
			continue
		}
	}
	return false
}

// open starts the stream over the part of [lo, hi) in the first (last,
// when reversed) tablet it overlaps.
func (s *Scanner) open() error {
	s.settleLo()
	var locs []meta.Location
	var err error
	if s.opts.Reverse {
		locs, err = s.p.tabletsIn(s.ctx, s.id, s.name, s.lo, s.hi)
	} else {
		// Only the first tablet: a scan of many tablets looks each up
		// when it gets there (the cache prefetches its neighbours).
		var l meta.Location
		l, err = s.p.locate(s.ctx, s.id, s.name, s.lo)
		locs = []meta.Location{l}
	}
	if err != nil {
		s.loc = meta.Location{}
		return err
	}
	lo, hi := s.lo, s.hi
	if s.opts.Reverse {
		s.loc = locs[len(locs)-1]
		if bytes.Compare(s.loc.Start, lo) > 0 {
			lo = s.loc.Start
		}
	} else {
		s.loc = locs[0]
		if tabletdesc.CompareEnds(s.loc.End, hi) < 0 {
			hi = s.loc.End
		}
	}
	cc, err := s.p.conn(s.loc.Server)
	if err != nil {
		return err
	}
	rr := &bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: lo}}
	if hi != nil {
		rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: hi}
	}
	req := &bigtablepb.ReadRowsRequest{TableName: s.name, Rows: &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{rr}},
		Filter: s.filter, Reversed: s.opts.Reverse}
	if s.opts.Limit > 0 {
		req.RowsLimit = s.opts.Limit - s.returned
	}
	sctx, cancel := context.WithCancel(s.ctx)
	st, err := openReadRows(sctx, cc, req)
	if err != nil {
		cancel()
		return err
	}
	s.cancel = cancel
	s.stream = st
	s.merger.reset()
	return nil
}

// chunkMerger assembles ReadRows chunks into rows.
//
// The cells of the rows it assembles are carved out of slabs (each row's
// clipped to its length), and a family name that repeats from row to row
// is the same string: a scan allocates per response, not per row or cell.
type chunkMerger struct {
	cur        cell.Row // its Cells are slab[rowStart:] until it commits
	inRow      bool
	partial    cell.Cell // a cell whose value is still arriving, when hasPartial
	hasPartial bool
	family     string
	qual       []byte

	// Kept across rows and resets:
	slab     []cell.Cell // the cells of the current row and free room after them
	rowStart int         // where the current row's cells start in slab
	lastFam  string      // the last family name seen, reused when it repeats
	// growSlabs: a full slab is replaced by one twice its size, so that
	// one comes to hold a response's cells (reuseSlab keeps it).
	growSlabs bool
}

// slabCells is the number of cells a fresh slab holds (at least).
const slabCells = 512

// reset drops the row being assembled (its cells' room in the slab is
// reused).
func (m *chunkMerger) reset() {
	m.slab = m.slab[:m.rowStart]
	m.cur, m.inRow, m.partial, m.hasPartial, m.family, m.qual = cell.Row{}, false, cell.Cell{}, false, "", nil
}

// betweenRows reports that no row is being assembled: nothing merged so
// far is still needed by the merger (a row may span responses, its key
// and cells aliasing each).
func (m *chunkMerger) betweenRows() bool { return !m.inRow }

// reuseSlab lets the next rows' cells overwrite those of the rows
// committed before (Options.ReuseScanBuffers); only between rows.
func (m *chunkMerger) reuseSlab() {
	clear(m.slab)
	m.slab, m.rowStart, m.growSlabs = m.slab[:0], 0, true
}

// appendCell adds c to the current row's cells in the slab, moving the
// row's cells to a fresh slab when this one is full (rows committed
// before keep the old one).
func (m *chunkMerger) appendCell(c cell.Cell) {
	if len(m.slab) == cap(m.slab) {
		row := m.slab[m.rowStart:]
		size := max(slabCells, 2*len(row)+1)
		if m.growSlabs {
			size = max(size, 2*cap(m.slab))
		}
		fresh := make([]cell.Cell, len(row), size)
		copy(fresh, row)
		m.slab, m.rowStart = fresh, 0
	}
	m.slab = append(m.slab, c)
}

// end checks that the stream did not stop inside a row.
func (m *chunkMerger) end() error {
	if m.inRow {
		return status.Error(codes.Internal, "client: ReadRows ended inside a row")
	}
	return nil
}

// add merges the chunks of a decoded response (METADATA reads use it).
func (m *chunkMerger) add(chunks []*bigtablepb.ReadRowsResponse_CellChunk) ([]cell.Row, error) {
	var out []cell.Row
	for _, ch := range chunks {
		c := wireChunk{rowKey: ch.GetRowKey(), timestamp: ch.GetTimestampMicros(), value: ch.GetValue(),
			valueSize: ch.GetValueSize(), resetRow: ch.GetResetRow(), commit: ch.GetCommitRow()}
		if f := ch.GetFamilyName(); f != nil {
			c.family, c.hasFamily = []byte(f.GetValue()), true
		}
		if q := ch.GetQualifier(); q != nil {
			c.qualifier, c.hasQualifier = q.GetValue(), true
		}
		var err error
		if out, err = m.addChunk(&c, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// addChunk merges one chunk, appending to out the row it commits. The
// row's key, qualifiers and values alias the chunk's bytes, clipped to
// their length (appending to one copies it).
func (m *chunkMerger) addChunk(c *wireChunk, out []cell.Row) ([]cell.Row, error) {
	if c.resetRow {
		m.reset()
		return out, nil
	}
	if len(c.rowKey) > 0 {
		if !m.inRow {
			m.cur = cell.Row{Key: clip(c.rowKey)}
			m.inRow = true
		}
	} else if !m.inRow {
		return nil, status.Error(codes.Internal, "client: ReadRows chunk without a row key")
	}
	if c.hasFamily && string(c.family) != m.family {
		if string(c.family) != m.lastFam {
			m.lastFam = string(c.family)
		}
		m.family = m.lastFam
	}
	if c.hasQualifier {
		m.qual = clip(c.qualifier)
	}
	if !m.hasPartial && c.valueSize == 0 {
		// The whole value in one chunk (the common case): straight into
		// the slab, aliasing the chunk — no copy, and no pass through
		// partial (each store of a cell there cost write barriers while
		// the collector runs, which during a scan it mostly does).
		v := clip(c.value)
		if v == nil {
			v = []byte{}
		}
		m.appendCell(cell.Cell{Family: m.family, Qualifier: m.qual, Timestamp: c.timestamp, Value: v})
	} else if !m.hasPartial {
		m.partial = cell.Cell{Family: m.family, Qualifier: m.qual, Timestamp: c.timestamp}
		m.hasPartial = true
		m.partial.Value = append(make([]byte, 0, max(int(c.valueSize), len(c.value))), c.value...)
	} else {
		m.partial.Value = append(m.partial.Value, c.value...)
	}
	if c.valueSize == 0 && m.hasPartial {
		if m.partial.Value == nil {
			m.partial.Value = []byte{}
		}
		m.appendCell(m.partial)
		m.partial, m.hasPartial = cell.Cell{}, false
	}
	if c.commit {
		if n := len(m.slab); n > m.rowStart {
			m.cur.Cells = m.slab[m.rowStart:n:n]
		}
		out = append(out, m.cur)
		m.rowStart = len(m.slab)
		m.reset()
	}
	return out, nil
}

// clip returns b with its capacity cut to its length.
func clip(b []byte) []byte { return b[:len(b):len(b)] }
