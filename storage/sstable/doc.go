// Package sstable is Tabula's immutable sorted file: the paper's SSTable.
//
// A Writer turns a stream of (internal key, value) entries in strictly
// increasing key order into one file; a Reader opens such a file over ranged
// reads (a blob.Object, an os.File, a byte slice) and serves iterators and
// bloom-filter probes. Readers share one Cache of decoded data blocks,
// bounded in bytes.
//
// # Layout
//
// All fixed-width integers are little-endian.
//
//	data block 0 | trailer … data block N | trailer
//	filter block | trailer    bloom filters: rows, and row+column
//	index block  | trailer    last key of each data block → (offset, length)
//	properties block | trailer
//	footer (64 bytes)
//
// Every block is followed by a 5-byte trailer: one compression byte
// (Compression) and a CRC-32C (Castagnoli) of the stored block bytes followed
// by that byte. A block handle (offset, length) covers the stored bytes and
// the trailer, so the data blocks tile [0, filter offset) without gaps and the
// meta blocks follow each other up to the footer.
//
// Data and index blocks share one entry format with prefix compression:
//
//	entry:   uvarint shared | uvarint unshared | uvarint value length |
//	         key[shared:] | value
//	restart: uint32 offset of an entry whose shared length is 0, every
//	         RestartInterval entries or sooner once 2 KiB of entries
//	         follow the last one, starting with the first
//	block:   entries | restart offsets | uint32 restart count
//
// Index entries map the full last key of a data block to uvarint offset and
// uvarint length of the block's handle. Full keys keep SeekGE and SeekLT
// exact with one binary search. Every index entry is a restart point, so
// no index key shares a prefix with its predecessor.
//
// Compressed blocks are stored as the codec's own block format: snappy's
// (which carries the decoded length), or uvarint decoded length followed by
// one zstd frame, so a reader can bound the memory a block needs before it
// decodes it.
//
// The filter block holds two bloom filters, each as uvarint length followed
// by the filter in github.com/bits-and-blooms/bloom/v3's binary format
// (length 0: no filter). The filters hold the xxhash64 (little-endian) of
//   - the row filter: every distinct row prefix, cell.RowPrefix(row);
//   - the column filter: cell.ColumnPrefix(row, family, qualifier) of every
//     cell and column marker, cell.FamilyPrefix(row, family) of every family
//     marker, and cell.RowPrefix(row) of every row marker;
//
// so that a probe for a column also finds the markers that shadow it.
//
// The properties block is a sequence of fields, each uvarint tag | uvarint
// length | payload, in increasing tag order; readers skip tags they do not
// know, so a field can be added without a new format version.
//
// The footer is, at fixed offsets: the filter, index and properties handles
// (uint64 offset and length each, 48 bytes), the uint32 format version, a
// uint32 CRC-32C of the preceding 52 bytes and the 8-byte magic "tabulaSS".
//
// # Errors
//
// Everything read from a file is untrusted. A corrupt or truncated file
// yields a *CorruptionError naming the file and the offset of the bad block
// (errors.Is(err, ErrCorrupt)) — never a panic and never wrong data. Errors
// of the underlying ReaderAt are returned wrapped, not as corruption.
package sstable
