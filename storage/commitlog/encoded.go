package commitlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/tabuladb/tabula/storage/cell"
)

// Encoded is a record encoded ahead of its append, all but its sequence
// number: the costly part of appending — copying the row, qualifiers and
// values into log bytes — done before the caller takes the lock that
// orders its appends (a tablet's write lock), so that under it only a copy
// of the encoded bytes and their checksum remain. Release returns its
// buffer; an Encoded must not be used after.
type Encoded struct {
	tablet string
	body   *[]byte // row and mutations, as appendRecord writes them after FirstSeq
}

// encodedPool holds the buffers of Encoded records.
var encodedPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Encode encodes rec for AppendEncoded; rec.FirstSeq is ignored (the
// append gives it). The caller may reuse rec's buffers once Encode returns.
func Encode(tablet string, m cell.RowMutation) *Encoded {
	bp := encodedPool.Get().(*[]byte)
	*bp = appendRecordBody((*bp)[:0], &m)
	return &Encoded{tablet: tablet, body: bp}
}

// Release returns e's buffer for reuse.
func (e *Encoded) Release() {
	if cap(*e.body) <= maxPooledFrame {
		encodedPool.Put(e.body)
	}
	e.body = nil
}

// payloadLen is the length of e's payload with sequence number seq.
func (e *Encoded) payloadLen(seq uint64) int {
	var tmp [binary.MaxVarintLen64]byte
	return 1 + binary.PutUvarint(tmp[:], uint64(len(e.tablet))) + len(e.tablet) +
		binary.PutUvarint(tmp[:], seq) + len(*e.body)
}

// appendFrame appends e's frame with sequence number seq to dst: the same
// bytes as appendRecordFrame of the record.
func (e *Encoded) appendFrame(dst []byte, seq uint64) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = append(dst, typeRecord)
	dst = appendString(dst, e.tablet)
	dst = binary.AppendUvarint(dst, seq)
	dst = append(dst, *e.body...)
	payload := dst[start+frameHeaderLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], maskCRC(crc32.Checksum(payload, castagnoli)))
	return dst
}

// AppendEncoded is Append of e's record with FirstSeq firstSeq: the same
// record, position, group commit and acknowledgement. e stays the caller's
// (to Release).
func (l *Log) AppendEncoded(e *Encoded, firstSeq uint64) *Commit {
	if n := e.payloadLen(firstSeq); n > MaxRecordBytes {
		return failedCommit(fmt.Errorf("%w: %d bytes encoded, limit %d", ErrRecordTooLarge, n, MaxRecordBytes))
	}
	frameLen := frameHeaderLen + e.payloadLen(firstSeq)
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := l.batchFor(frameLen)
	if err != nil {
		return failedCommit(err)
	}
	pos := l.tailLocked()
	b.buf = e.appendFrame(b.buf, firstSeq)
	l.appendedLocked(b, frameLen)
	return &Commit{Pos: pos, b: b}
}
