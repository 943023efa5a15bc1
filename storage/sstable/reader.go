package sstable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"

	"github.com/tabuladb/tabula/storage/cell"
)

// ReaderAt is what a Reader reads from: a blob.Object satisfies it. ReadAt
// must be safe for concurrent use, as io.ReaderAt requires.
type ReaderAt interface {
	io.ReaderAt
	Size() int64
}

// ReaderOptions configure Open.
type ReaderOptions struct {
	// Cache is shared by all open files; nil means no caching.
	Cache *Cache
	// InMemory loads the whole file into memory at open (locality groups
	// marked in-memory); reads then touch no storage.
	InMemory bool

	// blockLimit overrides maxDecodedBlockSize, the largest decoded block a
	// reader accepts. A file can claim any size up to the limit, and a
	// reader allocates what it claims before decoding; the fuzz test lowers
	// the limit so that exploring such claims stays cheap.
	blockLimit int
}

// IndexEntry is one data block's entry in the index.
type IndexEntry struct {
	LastKey []byte // the last internal key in the block
	Offset  int64  // where the block starts in the file
	// Length is the bytes the block occupies, trailer included: the data
	// blocks tile the start of the file, so Offset+Length is the next
	// block's Offset and Offset is the data that precedes the block.
	Length int64
}

// ErrClosed is returned by iterators of a closed Reader.
var ErrClosed = errors.New("sstable: reader closed")

// Reader reads one SSTable. It is safe for concurrent use.
type Reader struct {
	name   string
	src    ReaderAt
	mem    []byte // the whole file when opened InMemory
	cache  *Cache
	fileID uint64
	index  []IndexEntry
	// indexWindows is the search index of the index's last keys: a seek's
	// binary search over the blocks reads one array of numbers instead of
	// an entry and its key at every probe.
	indexWindows keyWindows
	props        Properties

	rowFilter, colFilter *filter
	// memBlocks holds the uncompressed data blocks of an InMemory file,
	// decoded at open; compressed ones go through the cache.
	memBlocks  []*block
	blockLimit int
	closed     atomic.Bool
	// loads shares one read of a block among the readers that miss it at
	// the same time: without it, concurrent point reads of neighbouring
	// rows (a sequential read workload) each fetch and decode the same
	// block, as the cache admits blocks asynchronously.
	loads singleflight.Group
}

// Open reads the footer, index, filter and properties blocks of the file
// named name (the name is used in errors and as the cache key). A file that
// is not a valid SSTable gives a *CorruptionError; a failed read of r is
// returned wrapped.
func Open(r ReaderAt, name string, opts ReaderOptions) (*Reader, error) {
	rd := &Reader{name: name, src: r, cache: opts.Cache, blockLimit: maxDecodedBlockSize}
	if opts.blockLimit > 0 {
		rd.blockLimit = opts.blockLimit
	}
	size := r.Size()
	if size < footerLen {
		return nil, rd.corrupt(0, "file of %d bytes is shorter than the footer", size)
	}
	if opts.InMemory {
		mem, err := rd.readAt(0, size)
		if err != nil {
			return nil, err
		}
		rd.mem = mem
	}
	fb, err := rd.readAt(size-footerLen, footerLen)
	if err != nil {
		return nil, err
	}
	f, err := decodeFooter(fb, size)
	if err != nil {
		return nil, corruptAt(name, size-footerLen, err)
	}

	// The meta blocks follow each other up to the footer: one read fetches
	// them all, which matters on an object store where a read is a request.
	metaStart := int64(f.filter.offset)
	meta, err := rd.readAt(metaStart, size-footerLen-metaStart)
	if err != nil {
		return nil, err
	}
	metaBlock := func(h handle) ([]byte, error) {
		start := int64(h.offset) - metaStart
		return rd.blockFrom(meta[start:start+int64(h.length)], int64(h.offset))
	}

	raw, err := metaBlock(f.properties)
	if err != nil {
		return nil, err
	}
	if rd.props, err = decodeProperties(raw); err != nil {
		return nil, corruptAt(name, int64(f.properties.offset), err)
	}
	rd.props.FileSize = size

	if raw, err = metaBlock(f.index); err != nil {
		return nil, err
	}
	if err := rd.decodeIndex(raw, f.filter.offset); err != nil {
		return nil, corruptAt(name, int64(f.index.offset), err)
	}
	if err := rd.checkProperties(); err != nil {
		return nil, corruptAt(name, int64(f.properties.offset), err)
	}

	if raw, err = metaBlock(f.filter); err != nil {
		return nil, err
	}
	if rd.rowFilter, rd.colFilter, err = decodeFilterBlock(raw); err != nil {
		return nil, corruptAt(name, int64(f.filter.offset), err)
	}

	if rd.mem != nil {
		if err := rd.loadMemBlocks(); err != nil {
			return nil, err
		}
	}
	if rd.cache != nil {
		rd.fileID = rd.cache.newFileID()
	}
	return rd, nil
}

func (r *Reader) corrupt(off int64, format string, args ...any) error {
	return &CorruptionError{File: r.name, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// readAt returns n bytes at off. A file that ends early is corrupt (the
// footer promised those bytes); any other failure is an I/O error.
func (r *Reader) readAt(off, n int64) ([]byte, error) {
	if r.mem != nil {
		return r.mem[off : off+n : off+n], nil
	}
	buf := make([]byte, n)
	if err := r.readInto(buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

func (r *Reader) readInto(buf []byte, off int64) error {
	got, err := r.src.ReadAt(buf, off)
	if got == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return r.corrupt(off, "truncated: read %d of %d bytes", got, len(buf))
	}
	return fmt.Errorf("sstable %s: read %d bytes at offset %d: %w", r.name, len(buf), off, err)
}

// readBufs recycles the buffers compressed blocks are read into: unlike an
// uncompressed block, which is used in place, they are garbage as soon as
// they are decompressed.
var readBufs sync.Pool // of *[]byte

// blockFrom checks the trailer of the block whose stored bytes and trailer
// are b, found at offset off, and returns its raw (decompressed) bytes,
// which are b's own for an uncompressed block.
func (r *Reader) blockFrom(b []byte, off int64) ([]byte, error) {
	stored, c, err := checkTrailer(b)
	if err != nil {
		return nil, corruptAt(r.name, off, err)
	}
	raw, err := decompress(stored, c, r.blockLimit)
	if err != nil {
		return nil, corruptAt(r.name, off, err)
	}
	return raw, nil
}

// readDataBlock reads the data block of h from storage and returns its raw
// bytes, having checked its checksum. Errors name the file and h's offset.
func (r *Reader) readDataBlock(h handle) ([]byte, error) {
	bufp, _ := readBufs.Get().(*[]byte)
	if bufp == nil || uint64(cap(*bufp)) < h.length {
		nb := make([]byte, h.length)
		bufp = &nb
	}
	b := (*bufp)[:h.length]
	if err := r.readInto(b, int64(h.offset)); err != nil {
		readBufs.Put(bufp)
		return nil, err
	}
	raw, err := r.blockFrom(b, int64(h.offset))
	if err != nil || len(raw) == 0 || &raw[0] != &b[0] {
		// Decompressed into a buffer of its own (or failed): b is free.
		readBufs.Put(bufp)
	}
	return raw, err
}

// decodeIndex decodes the index block and checks that its entries are in
// key order and tile the data region [0, dataEnd).
func (r *Reader) decodeIndex(raw []byte, dataEnd uint64) error {
	b, err := parseBlock(raw)
	if err != nil {
		return err
	}
	var it blockIter
	it.init(b)
	var arena []byte // one allocation for every LastKey
	type pos struct{ start, end int }
	var keys []pos
	var next uint64
	ok, err := it.first()
	for ; ok && err == nil; ok, err = it.step() {
		// Index entries are all restart points (full keys): this keeps the
		// decoded keys no larger than the block, whatever the file claims.
		if it.off != it.b.restart(min(len(r.index), it.b.numRestarts-1)) {
			return corruptf("index entry %d is not a restart point", len(r.index))
		}
		off, n := binary.Uvarint(it.val)
		length, m := binary.Uvarint(it.val[max(n, 0):])
		if n <= 0 || m <= 0 || n+m != len(it.val) {
			return corruptf("index entry %d: bad block handle", len(r.index))
		}
		if off != next || length < trailerLen || length > dataEnd-off {
			return corruptf("index entry %d: block (offset %d, length %d) does not follow at %d within %d", len(r.index), off, length, next, dataEnd)
		}
		if len(keys) > 0 && bytes.Compare(arena[keys[len(keys)-1].start:], it.key) >= 0 {
			return corruptf("index entry %d: keys out of order", len(r.index))
		}
		next = off + length
		keys = append(keys, pos{len(arena), len(arena) + len(it.key)})
		arena = append(arena, it.key...)
		r.index = append(r.index, IndexEntry{Offset: int64(off), Length: int64(length)})
	}
	if err != nil {
		return err
	}
	if next != dataEnd {
		return corruptf("index covers %d of %d data bytes", next, dataEnd)
	}
	for i, k := range keys {
		r.index[i].LastKey = arena[k.start:k.end:k.end]
	}
	if n := len(r.index); n > 0 {
		r.indexWindows = newKeyWindows(r.index[0].LastKey, r.index[n-1].LastKey, n, func(i int) []byte { return r.index[i].LastKey })
	}
	return nil
}

// checkProperties cross-checks the properties against the index.
func (r *Reader) checkProperties() error {
	p := &r.props
	if p.NumDataBlocks != uint64(len(r.index)) {
		return corruptf("properties: %d data blocks, index has %d", p.NumDataBlocks, len(r.index))
	}
	if (p.NumEntries == 0) != (len(r.index) == 0) || p.NumEntries < p.NumDataBlocks || p.NumDeletions > p.NumEntries {
		return corruptf("properties: %d entries (%d deletions) in %d blocks", p.NumEntries, p.NumDeletions, len(r.index))
	}
	if len(r.index) > 0 && !bytes.Equal(p.LargestKey, r.index[len(r.index)-1].LastKey) {
		return corruptf("properties: largest key differs from the index's last key")
	}
	return nil
}

// loadMemBlocks checks every data block of an InMemory file once, so that
// later reads need no checksum, and decodes the uncompressed ones, which
// then cost neither a copy nor cache space.
func (r *Reader) loadMemBlocks() error {
	r.memBlocks = make([]*block, len(r.index))
	for i, e := range r.index {
		b := r.mem[e.Offset : e.Offset+e.Length]
		stored, c, err := checkTrailer(b)
		if err != nil {
			return corruptAt(r.name, e.Offset, err)
		}
		if c != NoCompression {
			continue
		}
		if r.memBlocks[i], err = parseDataBlock(stored); err != nil {
			return corruptAt(r.name, e.Offset, err)
		}
	}
	return nil
}

// dataBlock returns data block i, from memory, the cache or storage.
func (r *Reader) dataBlock(i int) (*block, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if r.memBlocks != nil && r.memBlocks[i] != nil {
		return r.memBlocks[i], nil
	}
	e := r.index[i]
	if r.cache != nil {
		if b := r.cache.get(r.fileID, uint64(e.Offset)); b != nil {
			return b, nil
		}
	}
	v, err, _ := r.loads.Do(strconv.Itoa(i), func() (any, error) { return r.loadDataBlock(e) })
	if err != nil {
		return nil, err
	}
	return v.(*block), nil
}

// Prime puts blocks, the data blocks the file's Writer retained
// (WriterOptions.RetainBytes), into the block cache as if each had just
// been read, so that the first reads of a file just written need not read
// it back. The blocks are trusted to be this file's: a block whose offset,
// length and last key are not those of one of the file's index entries is
// skipped, which guards against a mix-up with a file laid out otherwise,
// but the bytes themselves are not checked against the file. Prime does
// nothing without a cache or for a file held in memory.
func (r *Reader) Prime(blocks []RetainedBlock) {
	if r.cache == nil || r.memBlocks != nil {
		return
	}
	i := 0
	for _, rb := range blocks {
		for i < len(r.index) && uint64(r.index[i].Offset) < rb.Offset {
			i++
		}
		if i == len(r.index) {
			return
		}
		if e := r.index[i]; uint64(e.Offset) != rb.Offset || uint64(e.Length) != rb.Length || !bytes.Equal(e.LastKey, rb.LastKey) {
			continue
		}
		b, err := parseDataBlock(rb.Data)
		if err != nil {
			continue // read from the file when needed, where a fault shows
		}
		r.cache.set(r.fileID, rb.Offset, b)
	}
}

// loadDataBlock reads, checks, decompresses and parses one data block and
// offers it to the cache.
func (r *Reader) loadDataBlock(e IndexEntry) (*block, error) {
	var raw []byte
	var err error
	if r.mem != nil {
		// Checked at open: decompress straight from memory.
		stored := r.mem[e.Offset : e.Offset+e.Length-trailerLen]
		if raw, err = decompress(stored, Compression(r.mem[e.Offset+e.Length-trailerLen]), r.blockLimit); err != nil {
			err = corruptAt(r.name, e.Offset, err)
		}
	} else {
		raw, err = r.readDataBlock(handle{offset: uint64(e.Offset), length: uint64(e.Length)})
	}
	if err != nil {
		return nil, err
	}
	b, err := parseDataBlock(raw)
	if err != nil {
		return nil, corruptAt(r.name, e.Offset, err)
	}
	if r.cache != nil {
		r.cache.set(r.fileID, uint64(e.Offset), b)
	}
	return b, nil
}

// Name is the name the file was opened under.
func (r *Reader) Name() string { return r.name }

// Properties returns the file's properties block, with FileSize the size
// of the file opened. Its key slices must not be modified.
func (r *Reader) Properties() Properties { return r.props }

// Index returns the data blocks' index entries in order. The slice is the
// caller's; the LastKey bytes are shared and must not be modified.
func (r *Reader) Index() []IndexEntry { return append([]IndexEntry(nil), r.index...) }

// MayContainRow reports whether the file may hold entries of row; false
// is certain.
func (r *Reader) MayContainRow(row []byte) bool {
	return r.MayContainRowPrefix(cell.RowPrefix(row))
}

// MayContainRowPrefix is MayContainRow for a row given as its encoded
// prefix (cell.RowPrefix), which readers probing many files for one row
// encode once. The file's key range is checked before its filter.
func (r *Reader) MayContainRowPrefix(prefix []byte) bool {
	if r.props.NumEntries == 0 {
		return false
	}
	// The row's keys are the keys with this prefix: the file holds none
	// when its largest key sorts before the prefix or its smallest after
	// every key with it.
	if bytes.Compare(r.props.LargestKey, prefix) < 0 ||
		(bytes.Compare(r.props.SmallestKey, prefix) > 0 && !bytes.HasPrefix(r.props.SmallestKey, prefix)) {
		return false
	}
	return r.rowFilter.mayContain(prefix)
}

// MayContainColumn reports whether the file may hold entries that matter to
// one column of a row: its cells and column markers, or a family or row
// marker that shadows it. False is certain.
func (r *Reader) MayContainColumn(row []byte, family string, qualifier []byte) bool {
	if r.props.NumEntries == 0 {
		return false
	}
	if r.colFilter == nil {
		return true
	}
	// The family and row prefixes are prefixes of the column prefix: one
	// encoding serves all three probes.
	col := cell.ColumnPrefix(row, family, qualifier)
	rowLen := cell.RowPrefixLen(col)
	famLen := rowLen + 1 + escapedLen(family)
	return r.colFilter.mayContain(col) ||
		r.colFilter.mayContain(col[:famLen]) ||
		r.colFilter.mayContain(col[:rowLen])
}

// escapedLen is the length of s escaped and terminated as in an internal
// key: every zero byte doubles, and two terminator bytes follow.
func escapedLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			n++
		}
	}
	return n
}

// NewIterator returns an iterator over the file's entries. It is used by
// one goroutine at a time and must be closed before the Reader.
func (r *Reader) NewIterator() cell.Iterator {
	return &iterator{r: r, blockIdx: -1}
}

// IteratorCache lends one iterator at a time, over any Reader, reusing its
// memory (the key buffer, the iterator itself) from one file to the next:
// a point read probes many files, and allocating an iterator for each was
// a good part of its garbage. The zero value is ready for use; it is used
// by one goroutine at a time.
type IteratorCache struct{ it iterator }

// Iterator returns an iterator over r's entries, valid until Done. Only
// one is lent at a time: call Done before the next Iterator.
func (c *IteratorCache) Iterator(r *Reader) cell.Iterator {
	key := c.it.bi.key[:0]
	c.it = iterator{r: r, blockIdx: -1}
	c.it.bi.key = key
	return &c.it
}

// Done closes the iterator Iterator lent and returns the first error it
// met. The cache then keeps no reference to its Reader or blocks.
func (c *IteratorCache) Done(it cell.Iterator) error {
	key := c.it.bi.key
	err := it.Close()
	c.it = iterator{blockIdx: -1}
	c.it.bi.key = key[:0]
	return err
}

// Close releases the file and drops its blocks from the cache. Iterators
// must be closed first; positioning one afterwards fails with ErrClosed.
// Close does not close the ReaderAt.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	if r.cache != nil {
		for _, e := range r.index {
			r.cache.drop(r.fileID, uint64(e.Offset))
		}
	}
	return nil
}
