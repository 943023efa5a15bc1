// Package sstable is Tabula's immutable sorted file: the paper's SSTable.
//
// Layout (all integers little-endian unless noted):
//
//	data block 0 | trailer … data block N | trailer
//	filter block | trailer    bloom filters: rows, and row+column
//	index block  | trailer    last key of each data block → (offset, length)
//	properties block | trailer
//	footer (fixed size: handles of filter, index and properties blocks,
//	        format version, magic number)
//
// Each block is followed by a trailer of one compression byte and a CRC-32C
// (Castagnoli) of the stored block bytes plus that byte. Data blocks hold
// entries with prefix compression and restart points. The index and
// properties blocks are read once when a file opens; data blocks are read
// through a Cache shared by every open file and bounded in bytes.
//
// A corrupt or truncated file yields a *CorruptionError naming the file and
// offset — never a panic and never wrong data.
package sstable

import (
	"errors"
	"fmt"
	"io"

	"github.com/tabuladb/tabula/storage/cell"
)

// Compression is a per-block compression codec.
type Compression uint8

// The codecs.
const (
	NoCompression     Compression = 0
	SnappyCompression Compression = 1
	ZstdCompression   Compression = 2
)

// ErrCorrupt is matched (errors.Is) by every *CorruptionError.
var ErrCorrupt = errors.New("sstable: corrupt")

// CorruptionError reports bytes of a file that are not a valid SSTable.
type CorruptionError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("sstable %s: corrupt at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// WriterOptions configure a Writer. Zero values take the defaults.
type WriterOptions struct {
	BlockSize       int         // target uncompressed data block size; default 64 KiB
	RestartInterval int         // entries between restart points; default 16
	Compression     Compression // default SnappyCompression
	BloomBitsPerKey int         // default 10; negative: no bloom filters
	LocalityGroup   string      // recorded in the properties block
}

// Properties describe a file; they are written in its properties block.
type Properties struct {
	NumEntries    uint64
	NumDeletions  uint64 // delete markers among the entries
	NumDataBlocks uint64
	RawKeyBytes   uint64
	RawValueBytes uint64
	SmallestKey   []byte
	LargestKey    []byte
	MinTimestamp  int64 // over KindSet entries; 0 when there are none
	MaxTimestamp  int64
	MaxSeq        uint64
	LocalityGroup string
	FileSize      int64
}

// Writer builds one SSTable onto an io.Writer (typically a blob.Writer).
type Writer struct{}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer, opts WriterOptions) *Writer { panic("unimplemented") }

// Add appends an entry. Keys must be valid internal keys (cell.EncodeKey)
// in strictly increasing order; Add copies what it keeps.
func (w *Writer) Add(key, value []byte) error { panic("unimplemented") }

// EstimatedSize is the number of bytes the file would have if finished now.
func (w *Writer) EstimatedSize() int64 { panic("unimplemented") }

// Finish writes the filter, index and properties blocks and the footer, and
// returns the properties. It does not close the underlying writer.
func (w *Writer) Finish() (Properties, error) { panic("unimplemented") }

// Cache holds decoded data blocks of every open file, bounded in bytes. It
// is safe for concurrent use.
type Cache struct{}

// NewCache returns a cache holding at most capacityBytes of blocks.
func NewCache(capacityBytes int64) *Cache { panic("unimplemented") }

// CacheStats are counters of a Cache.
type CacheStats struct {
	Hits, Misses uint64
	Bytes        int64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats { panic("unimplemented") }

// ReaderAt is what a Reader reads from: a blob.Object satisfies it.
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
}

// Reader reads one SSTable. It is safe for concurrent use.
type Reader struct{}

// IndexEntry is one data block's entry in the index.
type IndexEntry struct {
	LastKey []byte // the last internal key in the block
	Offset  int64
	Length  int64
}

// Open reads the footer, index, filter and properties blocks of the file
// named name (the name is used in errors and as the cache key).
func Open(r ReaderAt, name string, opts ReaderOptions) (*Reader, error) { panic("unimplemented") }

// Name is the name the file was opened under.
func (r *Reader) Name() string { panic("unimplemented") }

// Properties returns the file's properties block.
func (r *Reader) Properties() Properties { panic("unimplemented") }

// Index returns the data blocks' index entries in order.
func (r *Reader) Index() []IndexEntry { panic("unimplemented") }

// MayContainRow reports whether the file may hold entries of row; false
// is certain.
func (r *Reader) MayContainRow(row []byte) bool { panic("unimplemented") }

// MayContainColumn reports whether the file may hold entries that matter to
// one column of a row: its cells and column markers, or a family or row
// marker that shadows it. False is certain.
func (r *Reader) MayContainColumn(row []byte, family string, qualifier []byte) bool {
	panic("unimplemented")
}

// NewIterator returns an iterator over the file's entries.
func (r *Reader) NewIterator() cell.Iterator { panic("unimplemented") }

// Close releases the file. Iterators must be closed first.
func (r *Reader) Close() error { panic("unimplemented") }
