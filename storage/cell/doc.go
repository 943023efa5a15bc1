// Package cell is Tabula's data model: rows, columns, timestamped cells and
// the mutations that change them, the limits every mutation is validated
// against, and the internal key encoding that orders entries in memtables and
// SSTables.
//
// A cell is addressed by (row, family, qualifier, timestamp). Internally every
// write is an entry whose encoded key sorts by row ascending, family ascending,
// qualifier ascending, timestamp descending, then sequence number descending,
// so that a forward scan meets the newest version of a column first, and a
// delete marker before the cells it shadows. The encoding is order-preserving:
// bytes.Compare on two encoded keys gives their internal order, which lets
// every layer (memtable, SSTable blocks and index, bloom filters) treat keys as
// plain byte strings.
//
// The package also defines Iterator, the contract every sorted source of
// entries (memtable, SSTable, merged views) implements.
package cell
