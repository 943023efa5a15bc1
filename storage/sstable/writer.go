package sstable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/tabuladb/tabula/storage/cell"
)

// WriterOptions configure a Writer. Zero values take the defaults.
type WriterOptions struct {
	BlockSize       int         // target uncompressed data block size; default 64 KiB
	RestartInterval int         // entries between restart points; default 16 (fewer for large entries: see restartBytes)
	Compression     Compression // default SnappyCompression
	BloomBitsPerKey int         // default 10; negative: no bloom filters
	LocalityGroup   string      // recorded in the properties block
	// RetainBytes keeps a copy of each data block written whose bytes,
	// with those of the copies kept before it, stay within this many
	// (see RetainedBlocks), for the caller to put in the block cache
	// once the file is open (Reader.Prime): reads of what was just
	// written then find it there instead of reading the file back.
	// Zero keeps none.
	RetainBytes int64
}

// RetainedBlock is a data block a Writer wrote: its place in the file, its
// last key and its bytes before compression.
type RetainedBlock struct {
	Offset, Length uint64 // the stored block, its trailer included
	LastKey        []byte
	Data           []byte
}

// Defaults and limits of WriterOptions.
const (
	DefaultBlockSize       = 64 << 10
	DefaultRestartInterval = 16
	DefaultBloomBitsPerKey = 10
	// MaxBlockSize caps WriterOptions.BlockSize.
	MaxBlockSize = 64 << 20
	// MaxEntrySize caps len(key)+len(value) of one entry. It is far above
	// the cell value limit and keeps every block within what readers
	// accept.
	MaxEntrySize = 512 << 20
)

// minKeyLen is the length of the shortest internal key: an empty row (two
// terminator bytes), its tag and the 17-byte suffix.
const minKeyLen = 2 + 1 + 17

func (o WriterOptions) withDefaults() WriterOptions {
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	o.BlockSize = min(o.BlockSize, MaxBlockSize)
	if o.RestartInterval <= 0 {
		o.RestartInterval = DefaultRestartInterval
	}
	if o.BloomBitsPerKey == 0 {
		o.BloomBitsPerKey = DefaultBloomBitsPerKey
	}
	o.BloomBitsPerKey = min(o.BloomBitsPerKey, 64)
	return o
}

// ErrWriterClosed is returned by Add and Finish after Finish.
var ErrWriterClosed = errors.New("sstable: writer already finished")

// Writer builds one SSTable onto an io.Writer (typically a blob.Writer). It
// is used by one goroutine at a time. Once an error is returned, the Writer
// is failed: every later call returns the same error.
type Writer struct {
	w    io.Writer
	opts WriterOptions

	offset  uint64 // bytes written so far
	data    blockBuilder
	index   blockBuilder
	nIndex  int
	scratch []byte // stored block and trailer being written

	retained      []RetainedBlock // up to opts.RetainBytes of them
	retainedBytes int64

	rowFilter, colFilter filterBuilder
	props                Properties
	prevKey              []byte
	haveTimestamp        bool
	err                  error
	finished             bool
}

// NewWriter returns a Writer that writes to w. An unknown compression in
// opts makes the first Add or Finish fail.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	opts = opts.withDefaults()
	wr := &Writer{w: w, opts: opts}
	wr.data.restartInterval = opts.RestartInterval
	// Index keys share little beyond a row; restarting every entry makes
	// the index cheap to binary-search while it is decoded once at open.
	wr.index.restartInterval = 1
	wr.props.LocalityGroup = opts.LocalityGroup
	if opts.Compression > ZstdCompression {
		wr.err = fmt.Errorf("sstable: unknown compression %d", uint8(opts.Compression))
	}
	return wr
}

// Add appends an entry. Keys must be valid internal keys (cell.EncodeKey)
// in strictly increasing order; Add copies what it keeps. It returns an
// error, and writes nothing, for a key out of order, a key that is not an
// internal key, or an entry larger than MaxEntrySize.
func (w *Writer) Add(key, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return ErrWriterClosed
	}
	kind, rowLen, err := checkKey(key)
	if err != nil {
		return err
	}
	if w.props.NumEntries > 0 && bytes.Compare(key, w.prevKey) <= 0 {
		return fmt.Errorf("sstable: key %q added after %q: keys must be strictly increasing", key, w.prevKey)
	}
	if len(key)+len(value) > MaxEntrySize {
		return fmt.Errorf("sstable: entry of %d bytes exceeds the %d-byte limit", len(key)+len(value), MaxEntrySize)
	}

	// Close the block before an entry that would take it past the target,
	// so blocks exceed BlockSize only when a single entry does.
	if w.data.nEntries > 0 && w.data.size()+len(key)+len(value)+3*binary.MaxVarintLen32 > w.opts.BlockSize {
		if err := w.flushBlock(); err != nil {
			return err
		}
	}
	w.data.add(key, value)
	w.prevKey = append(w.prevKey[:0], key...)
	w.account(key, value, kind, rowLen)
	return nil
}

// checkKey checks the shape of an internal key cheaply (without decoding
// its components) and returns its kind and row prefix length.
func checkKey(key []byte) (cell.Kind, int, error) {
	rowLen := cell.RowPrefixLen(key)
	if rowLen < 0 || len(key) < rowLen+1+17 {
		return 0, 0, fmt.Errorf("sstable: %w: %q", cell.ErrMalformedKey, key)
	}
	kind := cell.KindOf(key)
	if kind < cell.KindRowDelete || kind > cell.KindSet {
		return 0, 0, fmt.Errorf("sstable: %w: kind %d in %q", cell.ErrMalformedKey, kind, key)
	}
	return kind, rowLen, nil
}

// account updates the properties and filters for an added entry.
func (w *Writer) account(key, value []byte, kind cell.Kind, rowLen int) {
	p := &w.props
	if p.NumEntries == 0 {
		p.SmallestKey = bytes.Clone(key)
	}
	p.NumEntries++
	p.RawKeyBytes += uint64(len(key))
	p.RawValueBytes += uint64(len(value))
	p.MaxSeq = max(p.MaxSeq, cell.Seq(key))
	if kind == cell.KindSet {
		ts := int64(^binary.BigEndian.Uint64(key[len(key)-17:]))
		if !w.haveTimestamp {
			p.MinTimestamp, p.MaxTimestamp, w.haveTimestamp = ts, ts, true
		}
		p.MinTimestamp = min(p.MinTimestamp, ts)
		p.MaxTimestamp = max(p.MaxTimestamp, ts)
	} else {
		p.NumDeletions++
	}
	if w.opts.BloomBitsPerKey < 0 {
		return
	}
	w.rowFilter.add(key[:rowLen])
	// The column filter key is the entry's key without its suffix (and,
	// for a family or row marker, without the marker tag): the column,
	// family or row prefix whose reads the entry matters to.
	switch kind {
	case cell.KindSet, cell.KindColumnDelete:
		w.colFilter.add(key[:len(key)-17])
	default:
		w.colFilter.add(key[:len(key)-18])
	}
}

// flushBlock compresses and writes the pending data block and indexes it.
func (w *Writer) flushBlock() error {
	raw := w.data.finish()
	h, err := w.writeBlock(raw, w.opts.Compression)
	if err != nil {
		return err
	}
	if w.retainedBytes+int64(len(raw)) <= w.opts.RetainBytes {
		w.retainedBytes += int64(len(raw))
		w.retained = append(w.retained, RetainedBlock{Offset: h.offset, Length: h.length, LastKey: bytes.Clone(w.data.lastKey), Data: bytes.Clone(raw)})
	}
	var v [2 * binary.MaxVarintLen64]byte
	w.index.add(w.data.lastKey, binary.AppendUvarint(binary.AppendUvarint(v[:0], h.offset), h.length))
	w.nIndex++
	w.data.reset()
	return nil
}

// writeBlock writes raw as one block with its trailer and returns its handle.
func (w *Writer) writeBlock(raw []byte, c Compression) (handle, error) {
	w.scratch = compressBlock(w.scratch[:0], raw, c)
	if _, err := w.w.Write(w.scratch); err != nil {
		w.err = fmt.Errorf("sstable: write block at offset %d: %w", w.offset, err)
		return handle{}, w.err
	}
	h := handle{offset: w.offset, length: uint64(len(w.scratch))}
	w.offset += h.length
	return h, nil
}

// RetainedBlocks returns the data blocks written so far, in file order,
// that WriterOptions.RetainBytes let it keep (nil without it), and lets go of
// them.
func (w *Writer) RetainedBlocks() []RetainedBlock {
	b := w.retained
	w.retained = nil
	return b
}

// EstimatedSize is the number of bytes the file would have if finished now
// (approximately: the pending block is counted uncompressed).
func (w *Writer) EstimatedSize() int64 {
	n := int64(w.offset) + footerLen + 3*trailerLen
	if w.data.nEntries > 0 {
		n += int64(w.data.size())
	}
	n += int64(w.index.size()) + int64(len(w.prevKey)) + 2*binary.MaxVarintLen64
	if b := w.opts.BloomBitsPerKey; b > 0 {
		n += int64(w.rowFilter.estimatedSize(b) + w.colFilter.estimatedSize(b))
	}
	n += int64(len(w.props.SmallestKey)+len(w.prevKey)+len(w.props.LocalityGroup)) + 64
	return n
}

// Finish writes the filter, index and properties blocks and the footer, and
// returns the properties. It does not close the underlying writer.
func (w *Writer) Finish() (Properties, error) {
	if w.err != nil {
		return Properties{}, w.err
	}
	if w.finished {
		return Properties{}, ErrWriterClosed
	}
	if w.data.nEntries > 0 {
		if err := w.flushBlock(); err != nil {
			return Properties{}, err
		}
	}
	w.props.NumDataBlocks = uint64(w.nIndex)
	w.props.LargestKey = bytes.Clone(w.prevKey)
	if w.props.NumEntries == 0 {
		w.props.LargestKey = nil
	}

	var f footer
	var err error
	bits := w.opts.BloomBitsPerKey
	// Bloom bits are random: compressing them would cost time for nothing.
	filterBlock := encodeFilterBlock(w.rowFilter.build(bits), w.colFilter.build(bits))
	if f.filter, err = w.writeBlock(filterBlock, NoCompression); err != nil {
		return Properties{}, err
	}
	if f.index, err = w.writeBlock(w.index.finish(), w.opts.Compression); err != nil {
		return Properties{}, err
	}
	if f.properties, err = w.writeBlock(encodeProperties(&w.props), NoCompression); err != nil {
		return Properties{}, err
	}
	f.version = formatVersion
	if _, err := w.w.Write(f.encode()); err != nil {
		w.err = fmt.Errorf("sstable: write footer at offset %d: %w", w.offset, err)
		return Properties{}, w.err
	}
	w.offset += footerLen
	if w.offset > math.MaxInt64 {
		w.err = errors.New("sstable: file too large")
		return Properties{}, w.err
	}
	w.finished = true
	w.props.FileSize = int64(w.offset)
	p := w.props
	p.SmallestKey = bytes.Clone(p.SmallestKey)
	p.LargestKey = bytes.Clone(p.LargestKey)
	return p, nil
}
