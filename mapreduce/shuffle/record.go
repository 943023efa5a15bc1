// Package shuffle is the sort-and-merge half of MapReduce, pure but for a
// temporary directory: the map side buffers records under a memory budget,
// sorts them by (partition, key), combines and spills them to disk in
// sorted runs, and merges the runs into one sorted file per partition; the
// reduce side merges the sorted files of every map and groups records by
// key. Memory stays bounded whatever the data size: the buffer, plus one
// read buffer per merged input (at most MergeFactor at once).
//
// The record format, on disk and on the wire (Worker.FetchPartition), is a
// sequence of uvarint(len(key)) key uvarint(len(value)) value.
package shuffle

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxRecordPart bounds a key's or value's length when reading: longer is
// corruption (cell values are at most 100 MiB).
const MaxRecordPart = 256 << 20

// ErrCorrupt is matched (errors.Is) by read errors on malformed records.
var ErrCorrupt = errors.New("shuffle: corrupt record stream")

// AppendRecord appends one record in the shuffle format.
func AppendRecord(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// RecordSize is the encoded size of a record.
func RecordSize(key, value []byte) int {
	return uvarintLen(uint64(len(key))) + len(key) + uvarintLen(uint64(len(value))) + len(value)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// Writer writes records to an io.Writer, buffered, counting them.
type Writer struct {
	w       *bufio.Writer
	buf     []byte
	Records int64
	Bytes   int64
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 64<<10)} }

// Write writes one record.
func (w *Writer) Write(key, value []byte) error {
	w.buf = AppendRecord(w.buf[:0], key, value)
	w.Records++
	w.Bytes += int64(len(w.buf))
	_, err := w.w.Write(w.buf)
	return err
}

// Flush flushes the buffer.
func (w *Writer) Flush() error { return w.w.Flush() }

// Reader reads records from an io.Reader.
type Reader struct {
	r          *bufio.Reader
	key, value []byte
	err        error
}

// NewReader returns a Reader on r with a 64 KiB buffer.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next reads the next record; false at the end or on error (Err).
// Key and Value are valid until the next call.
func (r *Reader) Next() bool {
	if r.err != nil {
		return false
	}
	kl, err := binary.ReadUvarint(r.r)
	if err == io.EOF {
		r.err = io.EOF
		return false
	}
	if err != nil {
		r.err = fmt.Errorf("%w: key length: %v", ErrCorrupt, err)
		return false
	}
	if r.key, err = r.readPart(r.key, kl); err != nil {
		r.err = err
		return false
	}
	vl, err := binary.ReadUvarint(r.r)
	if err != nil {
		r.err = fmt.Errorf("%w: value length: %v", ErrCorrupt, err)
		return false
	}
	if r.value, err = r.readPart(r.value, vl); err != nil {
		r.err = err
		return false
	}
	return true
}

func (r *Reader) readPart(buf []byte, n uint64) ([]byte, error) {
	if n > MaxRecordPart {
		return nil, fmt.Errorf("%w: part of %d bytes", ErrCorrupt, n)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r.r, buf); err != nil {
		return nil, fmt.Errorf("%w: truncated record: %v", ErrCorrupt, err)
	}
	return buf, nil
}

// Key is the current record's key.
func (r *Reader) Key() []byte { return r.key }

// Value is the current record's value.
func (r *Reader) Value() []byte { return r.value }

// Err is the error that stopped Next, nil at a clean end.
func (r *Reader) Err() error {
	if r.err == io.EOF {
		return nil
	}
	return r.err
}
