package tabletserver

import (
	"bytes"
	"errors"
	"slices"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/filter"
	"github.com/tabuladb/tabula/storage/tablet"
)

// readOptions turns a filter's pushdown hints into the restrictions the
// tablets apply while they assemble rows (see filter.Hints for the rules).
func readOptions(h filter.Hints) tablet.ReadOptions {
	ro := tablet.ReadOptions{StartTimestamp: h.TimestampStart, EndTimestamp: h.TimestampEnd}
	familiesApplied := h.Family == nil
	if h.Families != nil {
		ro.Families = append([]string{}, h.Families...) // non-nil even when empty: no family
		familiesApplied = true
	}
	// A version limit may be pushed only with the family restriction
	// applied exactly (the timestamp range always is).
	if h.CellsPerColumn > 0 && familiesApplied {
		ro.MaxVersions = h.CellsPerColumn
	}
	return ro
}

// ReadRows streams the rows of the request's row set, in key order
// (descending when reversed), through the filter, up to rows_limit rows.
// Rows go out as CellChunks the client libraries reassemble: large values
// are split over several chunks, and responses are sent once they hold
// about DataOptions.ResponseBytes (the first ones smaller:
// firstResponseBytes), each through the stream, which blocks while the
// client does not read (flow control).
func (s *DataService) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	start := time.Now()
	ctx := stream.Context()
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return err
	}
	if req.GetRowsLimit() < 0 {
		return invalidf("rows_limit", "must not be negative, got %d", req.GetRowsLimit())
	}
	f, err := s.compileFilter(req.GetFilter(), "filter")
	if err != nil {
		return err
	}
	ranges, err := RowRanges(req.GetRows())
	if err != nil {
		return err
	}
	reverse := req.GetReversed()
	if reverse {
		slices.Reverse(ranges)
	}
	ro := readOptions(f.PushDown())
	w := newChunkWriter(s.opts.ChunkBytes, s.opts.ResponseBytes)
	w.send = stream.Send
	if s.opts.EncodedResponses && !(len(ranges) == 1 && ranges[0].SingleRow()) {
		// Scans are written in wire form (readrows_encode.go); a point
		// read's one small response gains nothing from it (measured:
		// no change within the noise, and a scan-sized buffer per call
		// cost it 30 µs).
		w.raw = rawSender(stream)
	}
	limit := req.GetRowsLimit()
	take := rowTakerOf(ctx)
	if take != nil && req.GetRequestStatsView() == bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL {
		return invalidf("request_stats_view", "a ReadRows whose rows are taken whole cannot return request stats")
	}
	var stats bigtablepb.ReadIterationStats
	// The filtered cells of the row at hand: one buffer for the request
	// (the chunks keep the cells' bytes, not the slice).
	var filtered []filter.LabeledCell
	for _, r := range ranges {
		emit := func(row cell.Row) error {
			stats.RowsSeenCount++
			stats.CellsSeenCount += int64(len(row.Cells))
			filtered = f.ApplyAppend(filtered[:0], row)
			cells := filtered
			if len(cells) == 0 {
				if take != nil {
					return nil // nothing to send: no response carries the row
				}
				return w.skip(row.Key)
			}
			stats.RowsReturnedCount++
			stats.CellsReturnedCount += int64(len(cells))
			if take != nil {
				w.total += takenBytes(row.Key, cells)
				if err := take(row.Key, cells); err != nil {
					return err
				}
			} else if err := w.row(row.Key, cells); err != nil {
				return err
			}
			if limit > 0 && stats.RowsReturnedCount >= limit {
				return errStopScan
			}
			return nil
		}
		if r.SingleRow() {
			// A single row: ReadRow consults the bloom filters and the
			// scan cache, which a one-row scan would not.
			var row cell.Row
			var ok bool
			if row, ok, err = s.host.readRow(ctx, t.ID, r.Start, ro); err == nil && ok {
				err = emit(row)
			}
		} else {
			err = s.host.scan(ctx, t.ID, r.Start, r.End, reverse, ro, emit)
		}
		if errors.Is(err, errStopScan) {
			err = nil
			break
		}
		if err != nil {
			return s.fail("ReadRows", err)
		}
	}
	if req.GetRequestStatsView() == bigtablepb.ReadRowsRequest_REQUEST_STATS_FULL {
		w.stats = &bigtablepb.RequestStats{StatsView: &bigtablepb.RequestStats_FullReadStatsView{
			FullReadStatsView: &bigtablepb.FullReadStatsView{
				ReadIterationStats:  &stats,
				RequestLatencyStats: &bigtablepb.RequestLatencyStats{FrontendServerLatency: durationpb.New(time.Since(start))},
			}}}
	}
	if err := w.flush(); err != nil {
		return err
	}
	s.host.metrics.rowsRead.Add(float64(stats.RowsReturnedCount))
	s.host.metrics.bytesRead.Add(float64(w.total))
	return nil
}

// newChunkWriter returns a chunkWriter of values in pieces of chunkBytes
// and responses growing from firstResponseBytes to respBytes; the caller
// sets send (or raw).
func newChunkWriter(chunkBytes, respBytes int) *chunkWriter {
	return &chunkWriter{chunkBytes: chunkBytes, respBytes: respBytes, limit: min(firstResponseBytes, respBytes)}
}

// chunkWriter turns rows into CellChunks and batches them into responses.
type chunkWriter struct {
	send       func(*bigtablepb.ReadRowsResponse) error
	chunkBytes int
	respBytes  int
	// limit is the size at which the response at hand goes out: from
	// firstResponseBytes, doubling with each response, up to respBytes.
	limit int

	resp  *bigtablepb.ReadRowsResponse
	size  int
	total int64
	stats *bigtablepb.RequestStats // sent with the last response

	// skipped counts the rows read but filtered out since the last
	// response, lastSkipped is the last of them.
	skipped     int
	lastSkipped []byte

	// Slabs the chunks and their wrappers are carved from: one
	// allocation for many cells instead of three per cell. Only ever
	// resliced within their capacity, so the pointers handed out stay
	// put (protobuf messages must not move once used).
	chunks []bigtablepb.ReadRowsResponse_CellChunk
	strs   []wrapperspb.StringValue
	bytes  []wrapperspb.BytesValue

	// raw, when set, sends responses written in their wire form (wire)
	// instead of as messages; pending says wire holds chunks.
	raw     func(mem.BufferSlice) error
	wire    wireResponse
	pending bool
}

// slabCells bounds how many chunks (and wrappers) one slab holds. The
// first slab of a request holds firstSlabCells and each next one twice
// its predecessor's: a point read allocates little, a scan few slabs.
const (
	firstSlabCells = 4
	slabCells      = 256
)

// slabCap is the capacity of the slab that follows one of capacity prev.
func slabCap(prev int) int { return max(firstSlabCells, min(2*prev, slabCells)) }

// commitRow ends a row. Shared by every row's last chunk: messages only
// read it.
var commitRow = &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}

// newChunk returns a zero chunk from the slab.
func (w *chunkWriter) newChunk() *bigtablepb.ReadRowsResponse_CellChunk {
	if len(w.chunks) == cap(w.chunks) {
		w.chunks = make([]bigtablepb.ReadRowsResponse_CellChunk, 0, slabCap(cap(w.chunks)))
	}
	w.chunks = w.chunks[:len(w.chunks)+1]
	return &w.chunks[len(w.chunks)-1]
}

func (w *chunkWriter) family(name string) *wrapperspb.StringValue {
	if len(w.strs) == cap(w.strs) {
		w.strs = make([]wrapperspb.StringValue, 0, slabCap(cap(w.strs)))
	}
	w.strs = w.strs[:len(w.strs)+1]
	v := &w.strs[len(w.strs)-1]
	v.Value = name
	return v
}

func (w *chunkWriter) qualifier(q []byte) *wrapperspb.BytesValue {
	if len(w.bytes) == cap(w.bytes) {
		w.bytes = make([]wrapperspb.BytesValue, 0, slabCap(cap(w.bytes)))
	}
	w.bytes = w.bytes[:len(w.bytes)+1]
	v := &w.bytes[len(w.bytes)-1]
	v.Value = q
	return v
}

// lastScannedEvery is how many filtered-out rows a scan reads before it
// tells the client how far it got (last_scanned_row_key), so that a
// client retrying a long, sparse scan resumes there, not at its last row.
const lastScannedEvery = 1000

// skip notes a row the filter dropped.
func (w *chunkWriter) skip(key []byte) error {
	w.skipped++
	w.lastSkipped = key
	if w.skipped < lastScannedEvery {
		return nil
	}
	if w.raw != nil {
		return w.sendWire(key, nil)
	}
	if w.resp == nil {
		w.resp = &bigtablepb.ReadRowsResponse{}
	}
	// The skipped row comes after every row in the response, in scan
	// order, so the client may take it as its resumption point.
	w.resp.LastScannedRowKey = key
	return w.sendResp()
}

// chunkOverhead approximates the encoded size of a chunk's fixed fields.
const chunkOverhead = 32

// add appends a chunk to the pending response.
func (w *chunkWriter) add(ch *bigtablepb.ReadRowsResponse_CellChunk, n int) error {
	if w.resp == nil {
		w.resp = &bigtablepb.ReadRowsResponse{Chunks: make([]*bigtablepb.ReadRowsResponse_CellChunk, 0, slabCap(len(w.chunks)))}
	}
	w.resp.Chunks = append(w.resp.Chunks, ch)
	w.size += n + chunkOverhead
	w.total += int64(n)
	return nil
}

func (w *chunkWriter) sendResp() error {
	if w.raw != nil {
		return w.sendWire(nil, nil)
	}
	resp := w.resp
	w.resp, w.size, w.skipped = nil, 0, 0
	return w.send(resp)
}

// sendWire sends the response in wire, with lastScanned and stats.
func (w *chunkWriter) sendWire(lastScanned []byte, stats *bigtablepb.RequestStats) error {
	b, err := w.wire.finish(lastScanned, stats)
	w.size, w.skipped, w.pending = 0, 0, false
	if err != nil {
		return err
	}
	return w.raw(b)
}

// flush sends what is pending (and the request stats, if any).
func (w *chunkWriter) flush() error {
	if w.raw != nil {
		if !w.pending && w.stats == nil {
			return nil
		}
		return w.sendWire(nil, w.stats)
	}
	if w.stats != nil {
		if w.resp == nil {
			w.resp = &bigtablepb.ReadRowsResponse{}
		}
		w.resp.RequestStats = w.stats
	}
	if w.resp == nil {
		return nil
	}
	return w.sendResp()
}

// row writes one row's cells (in row order, labels attached). The first
// chunk carries the row key; family and qualifier are sent when they
// change (the qualifier with every family change, as the protocol
// requires); a value above chunkBytes goes in pieces, every piece but the
// last carrying the whole value's size; the row's last chunk commits it.
//
// A response is sent only at a row boundary, once it holds limit: the
// Go client (v1.58) checks after every response that no row is left
// half-read, so a row, however large, must not span responses.
func (w *chunkWriter) row(key []byte, cells []filter.LabeledCell) error {
	if err := w.cells(key, cells); err != nil {
		return err
	}
	if w.size >= w.limit {
		w.limit = min(2*w.limit, w.respBytes)
		return w.sendResp()
	}
	return nil
}

func (w *chunkWriter) cells(key []byte, cells []filter.LabeledCell) error {
	if w.raw != nil {
		w.encodeCells(key, cells)
		return nil
	}
	var fam string
	var qual []byte
	for i := range cells {
		c := &cells[i]
		last := i == len(cells)-1
		ch := w.newChunk()
		ch.TimestampMicros, ch.Labels = c.Timestamp, c.Labels
		n := len(c.Qualifier)
		switch {
		case i == 0:
			ch.RowKey = key
			ch.FamilyName = w.family(c.Family)
			ch.Qualifier = w.qualifier(c.Qualifier)
			n += len(key) + len(c.Family)
		case c.Family != fam:
			ch.FamilyName = w.family(c.Family)
			ch.Qualifier = w.qualifier(c.Qualifier)
			n += len(c.Family)
		case !bytes.Equal(c.Qualifier, qual):
			ch.Qualifier = w.qualifier(c.Qualifier)
		}
		fam, qual = c.Family, c.Qualifier
		v := c.Value
		if len(v) <= w.chunkBytes {
			ch.Value = v
			if last {
				ch.RowStatus = commitRow
			}
			if err := w.add(ch, n+len(v)); err != nil {
				return err
			}
			continue
		}
		ch.Value = v[:w.chunkBytes]
		ch.ValueSize = int32(len(v))
		if err := w.add(ch, n+w.chunkBytes); err != nil {
			return err
		}
		for off := w.chunkBytes; off < len(v); off += w.chunkBytes {
			end := min(off+w.chunkBytes, len(v))
			piece := w.newChunk()
			piece.Value = v[off:end]
			if end < len(v) {
				piece.ValueSize = int32(len(v))
			} else if last {
				piece.RowStatus = commitRow
			}
			if err := w.add(piece, end-off); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortCells orders cells as a row presents them: family, qualifier
// ascending, timestamp descending.
func sortCells(cs []cell.Cell) { slices.SortStableFunc(cs, cell.CompareCells) }
