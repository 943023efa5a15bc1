package cell

// Iterator walks the entries (encoded internal key, value) of one sorted
// source — a memtable, an SSTable, a merged view — in key order.
//
// Positioning methods return whether the iterator is now at an entry. Key and
// Value are valid only until the next positioning call: callers that keep
// them must copy. When a positioning method returns false, Error tells
// whether the source ended or failed. An iterator is used by one goroutine at
// a time; Close releases what it holds (cached blocks, references) and
// reports the first error met.
type Iterator interface {
	// First moves to the first entry.
	First() bool
	// SeekGE moves to the first entry whose key is >= key.
	SeekGE(key []byte) bool
	// SeekLT moves to the last entry whose key is < key; reversed scans use
	// it to step back one row at a time.
	SeekLT(key []byte) bool
	// Next moves to the following entry.
	Next() bool
	// Key is the current entry's encoded internal key.
	Key() []byte
	// Value is the current entry's value.
	Value() []byte
	// Error is the error that stopped the iteration, if any.
	Error() error
	// Close releases the iterator.
	Close() error
}
