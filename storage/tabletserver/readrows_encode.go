package tabletserver

import (
	"bytes"
	"fmt"
	"reflect"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/bufpool"
	"github.com/tabuladb/tabula/storage/filter"
)

// A scan's responses are written here straight into their wire form when
// the stream is gRPC's own and the server's codec sends RawFrames as they
// are (DataOptions.EncodedResponses): no CellChunk messages, wrappers and
// chunk lists built only to be encoded and dropped — a fifth of a scan's
// server CPU, and most of its garbage. The bytes are those encodeReadRows
// writes for the messages chunkWriter builds otherwise
// (TestEncodedResponsesMatchMessages); in-process streams (the gateway's,
// tests') get the messages.

// grpcReadRowsStream is the type of the stream gRPC's generated handler
// passes to ReadRows (unexported in bigtablepb), found once by calling the
// handler with a stand-in.
// nil if the handler does anything the stand-in does not support (scans
// then send messages).
var grpcReadRowsStream = func() (t reflect.Type) {
	defer func() {
		if recover() != nil {
			t = nil
		}
	}()
	p := &streamProbe{}
	for _, sd := range bigtablepb.Bigtable_ServiceDesc.Streams {
		if sd.StreamName == "ReadRows" {
			_ = sd.Handler(p, probeStream{})
		}
	}
	return p.t
}()

type streamProbe struct {
	bigtablepb.UnimplementedBigtableServer
	t reflect.Type
}

func (p *streamProbe) ReadRows(_ *bigtablepb.ReadRowsRequest, s bigtablepb.Bigtable_ReadRowsServer) error {
	p.t = reflect.TypeOf(s)
	return nil
}

type probeStream struct{ grpc.ServerStream }

func (probeStream) RecvMsg(any) error { return nil }

// rawSender returns the function sending an encoded response on stream
// when stream is gRPC's own; nil otherwise.
func rawSender(stream bigtablepb.Bigtable_ReadRowsServer) func(mem.BufferSlice) error {
	if grpcReadRowsStream == nil || reflect.TypeOf(stream) != grpcReadRowsStream {
		return nil
	}
	ss, ok := stream.(grpc.ServerStream)
	if !ok {
		return nil
	}
	return func(b mem.BufferSlice) error {
		var f RawFrame
		f.SetFrame(b)
		err := ss.SendMsg(&f)
		f.Release() // a no-op once sent
		return err
	}
}

// headerPool is the pool of wireResponse's buffers, which gRPC frees
// after sending (a variable for tests, which count its buffers).
var headerPool = func() mem.BufferPool { return responsePool }

// responsePool does not clear the buffers it hands out again (gRPC's
// default pool does, and a scan's header buffer, of DefaultResponseBytes
// and some, is cleared whole for every response: as many bytes cleared
// as the scan sends): a response is encoded by appending to its empty
// buffer, and only what was written is handed to gRPC. Its largest
// tiers hold the buffers of responses of the default size and of
// sizes up to 4 MiB.
var responsePool = bufpool.NewDirty(4<<10, 16<<10, 32<<10, 256<<10, 1<<20, DefaultResponseBytes+responseSlack, 2<<20, 4<<20)

// responseSlack is room beyond respBytes in a response's buffer: the row
// that takes a response past respBytes is still encoded into it.
const responseSlack = 64 << 10

// wireResponse is a ReadRowsResponse being encoded: a buffer of
// everything but the values handed to gRPC as they are (valueAliasBytes or
// more), which sit between its spans.
type wireResponse struct {
	bufp   *[]byte // the pooled buffer buf started in; nil when none
	buf    []byte
	pieces []aliasedValue
}

type aliasedValue struct {
	headerEnd int
	value     []byte
}

// wireChunkFields are a CellChunk's fields: what chunkWriter.cells sets,
// or a CellChunk message's (chunkFieldsOf).
type wireChunkFields struct {
	rowKey    []byte
	hasFamily bool
	family    string
	hasQual   bool
	qualifier []byte
	timestamp int64
	labels    []string
	value     []byte
	valueSize int32
	commit    bool
	// reset is a reset_row field (a CellChunk message's: the server's
	// own chunks never reset); commit and reset are the oneof's two
	// fields, and a message's commit_row or reset_row set to false is
	// still written (resetValue, commitFalse).
	reset, resetValue, commitFalse bool
}

// chunkFieldsOf returns c's fields.
func chunkFieldsOf(c *bigtablepb.ReadRowsResponse_CellChunk) wireChunkFields {
	f := wireChunkFields{rowKey: c.RowKey, hasFamily: c.FamilyName != nil, family: c.FamilyName.GetValue(),
		hasQual: c.Qualifier != nil, qualifier: c.Qualifier.GetValue(), timestamp: c.TimestampMicros,
		labels: c.Labels, value: c.Value, valueSize: c.ValueSize}
	switch s := c.RowStatus.(type) {
	case *bigtablepb.ReadRowsResponse_CellChunk_ResetRow:
		f.reset, f.resetValue = true, s.ResetRow
	case *bigtablepb.ReadRowsResponse_CellChunk_CommitRow:
		f.commit, f.commitFalse = s.CommitRow, !s.CommitRow
	}
	return f
}

// size is the encoded size of c's fields, value included.
func (c *wireChunkFields) size() int {
	n := 0
	if len(c.rowKey) > 0 {
		n += bytesFieldSize(fieldRowKey, len(c.rowKey))
	}
	if c.hasFamily {
		n += bytesFieldSize(fieldFamilyName, wrapperSize(len(c.family)))
	}
	if c.hasQual {
		n += bytesFieldSize(fieldQualifier, wrapperSize(len(c.qualifier)))
	}
	if c.timestamp != 0 {
		n += protowire.SizeTag(fieldTimestampMicros) + protowire.SizeVarint(uint64(c.timestamp))
	}
	for _, l := range c.labels {
		n += bytesFieldSize(fieldLabels, len(l))
	}
	if len(c.value) > 0 {
		n += bytesFieldSize(fieldValue, len(c.value))
	}
	if c.valueSize != 0 {
		n += protowire.SizeTag(fieldValueSize) + protowire.SizeVarint(uint64(int64(c.valueSize)))
	}
	if c.reset {
		n += protowire.SizeTag(fieldResetRow) + 1
	}
	if c.commit || c.commitFalse {
		n += protowire.SizeTag(fieldCommitRow) + 1
	}
	return n
}

// start readies r for a response of about size bytes.
func (r *wireResponse) start(size int) {
	if r.buf != nil {
		return
	}
	if mem.IsBelowBufferPoolingThreshold(size) {
		// gRPC pools no buffer this small (mem.NewBuffer): one from
		// the pool would never go back to it.
		r.buf = make([]byte, 0, size)
		return
	}
	r.bufp = headerPool().Get(size)
	r.buf = (*r.bufp)[:0]
}

// chunk appends c as one element of the chunks field, values of
// valueAliasBytes or more left out of the buffer (r.pieces).
func (r *wireResponse) chunk(c *wireChunkFields) {
	buf := protowire.AppendTag(r.buf, fieldChunks, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(c.size()))
	if len(c.rowKey) > 0 {
		buf = protowire.AppendTag(buf, fieldRowKey, protowire.BytesType)
		buf = protowire.AppendBytes(buf, c.rowKey)
	}
	if c.hasFamily {
		buf = appendWrapped(buf, fieldFamilyName, c.family)
	}
	if c.hasQual {
		buf = appendWrapped(buf, fieldQualifier, c.qualifier)
	}
	if c.timestamp != 0 {
		buf = protowire.AppendTag(buf, fieldTimestampMicros, protowire.VarintType)
		buf = protowire.AppendVarint(buf, uint64(c.timestamp))
	}
	for _, l := range c.labels {
		buf = protowire.AppendTag(buf, fieldLabels, protowire.BytesType)
		buf = protowire.AppendString(buf, l)
	}
	if v := c.value; len(v) > 0 {
		buf = protowire.AppendTag(buf, fieldValue, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(len(v)))
		if len(v) < valueAliasBytes {
			buf = append(buf, v...)
		} else {
			r.pieces = append(r.pieces, aliasedValue{headerEnd: len(buf), value: v})
		}
	}
	if c.valueSize != 0 {
		buf = protowire.AppendTag(buf, fieldValueSize, protowire.VarintType)
		buf = protowire.AppendVarint(buf, uint64(int64(c.valueSize)))
	}
	if c.reset {
		buf = protowire.AppendTag(buf, fieldResetRow, protowire.VarintType)
		buf = protowire.AppendVarint(buf, protowire.EncodeBool(c.resetValue))
	}
	if c.commit || c.commitFalse {
		buf = protowire.AppendTag(buf, fieldCommitRow, protowire.VarintType)
		buf = protowire.AppendVarint(buf, protowire.EncodeBool(c.commit))
	}
	r.buf = buf
}

// appendWrapped appends field as a StringValue or BytesValue wrapper
// holding v (its value field left out when v is empty, as proto.Marshal
// does).
func appendWrapped[T string | []byte](buf []byte, field protowire.Number, v T) []byte {
	buf = protowire.AppendTag(buf, field, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(wrapperSize(len(v))))
	if len(v) > 0 {
		buf = protowire.AppendTag(buf, fieldWrapperValue, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return buf
}

// finish appends the last_scanned_row_key and request_stats fields (when
// set) and returns the response's buffers, r reset. The header's pooled
// buffer goes back to gRPC's pool once gRPC has freed it (every span of it,
// when values were aliased between them).
func (r *wireResponse) finish(lastScanned []byte, stats *bigtablepb.RequestStats) (mem.BufferSlice, error) {
	buf := r.buf
	if len(lastScanned) > 0 {
		buf = protowire.AppendTag(buf, fieldLastScannedRowKey, protowire.BytesType)
		buf = protowire.AppendBytes(buf, lastScanned)
	}
	if stats != nil {
		b, err := proto.Marshal(stats)
		if err != nil {
			return nil, fmt.Errorf("encode request_stats: %w", err)
		}
		buf = protowire.AppendTag(buf, fieldRequestStats, protowire.BytesType)
		buf = protowire.AppendBytes(buf, b)
	}
	bufp, pieces := r.bufp, r.pieces
	*r = wireResponse{pieces: pieces[:0]}
	pool := headerPool()
	pooled := bufp != nil && sameArray(buf, *bufp)
	if len(pieces) == 0 {
		if pooled {
			*bufp = buf
			return mem.BufferSlice{mem.NewBuffer(bufp, pool)}, nil
		}
		if bufp != nil {
			pool.Put(bufp)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	// The spans between the aliased values are views of buf: of one
	// pooled buffer, reference-counted (mem.Buffer.Slice), which goes
	// back to the pool once gRPC has freed every span; or of a buffer
	// buf grew into, which the garbage collector takes (the pooled one
	// it outgrew goes back now).
	var header mem.Buffer = mem.SliceBuffer(buf)
	if pooled {
		*bufp = buf
		header = mem.NewBuffer(bufp, pool)
	} else if bufp != nil {
		pool.Put(bufp)
	}
	out := make(mem.BufferSlice, 0, 2*len(pieces)+1)
	start := 0
	for _, p := range pieces {
		if p.headerEnd > start {
			out = append(out, header.Slice(start, p.headerEnd))
		}
		out = append(out, mem.SliceBuffer(p.value))
		start = p.headerEnd
	}
	if start < len(buf) {
		out = append(out, header.Slice(start, len(buf)))
	}
	header.Free() // the spans hold their own references
	return out, nil
}

// encodeCells is chunkWriter.cells writing wire bytes: the same chunks,
// the same accounting.
func (w *chunkWriter) encodeCells(key []byte, cells []filter.LabeledCell) {
	w.wire.start(w.limit + responseSlack)
	var fam string
	var qual []byte
	for i := range cells {
		c := &cells[i]
		last := i == len(cells)-1
		ch := wireChunkFields{timestamp: c.Timestamp, labels: c.Labels}
		n := len(c.Qualifier)
		switch {
		case i == 0:
			ch.rowKey = key
			ch.hasFamily, ch.family = true, c.Family
			ch.hasQual, ch.qualifier = true, c.Qualifier
			n += len(key) + len(c.Family)
		case c.Family != fam:
			ch.hasFamily, ch.family = true, c.Family
			ch.hasQual, ch.qualifier = true, c.Qualifier
			n += len(c.Family)
		case !bytes.Equal(c.Qualifier, qual):
			ch.hasQual, ch.qualifier = true, c.Qualifier
		}
		fam, qual = c.Family, c.Qualifier
		v := c.Value
		if len(v) <= w.chunkBytes {
			ch.value = v
			ch.commit = last
			w.wire.chunk(&ch)
			w.account(n + len(v))
			continue
		}
		ch.value = v[:w.chunkBytes]
		ch.valueSize = int32(len(v))
		w.wire.chunk(&ch)
		w.account(n + w.chunkBytes)
		for off := w.chunkBytes; off < len(v); off += w.chunkBytes {
			end := min(off+w.chunkBytes, len(v))
			piece := wireChunkFields{value: v[off:end]}
			if end < len(v) {
				piece.valueSize = int32(len(v))
			} else {
				piece.commit = last
			}
			w.wire.chunk(&piece)
			w.account(end - off)
		}
	}
}

// account counts a chunk of n bytes (as add does).
func (w *chunkWriter) account(n int) {
	w.size += n + chunkOverhead
	w.total += int64(n)
	w.pending = true
}
