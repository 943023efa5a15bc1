// Package memtable is the tablet's in-memory sorted buffer of recent writes:
// a skiplist of internal entries that one writer appends to while any number
// of readers iterate it without locks.
package memtable

import "github.com/tabuladb/tabula/storage/cell"

// Memtable is a sorted buffer of internal entries. Add must be called by one
// goroutine at a time (the tablet serialises writers); iterators and the
// accessors may run concurrently with Add and never block it.
type Memtable struct{}

// New returns an empty memtable.
func New() *Memtable { panic("unimplemented") }

// Add inserts an entry; key is an encoded internal key (unique: it carries a
// sequence number). Add copies key and value.
func (m *Memtable) Add(key, value []byte) { panic("unimplemented") }

// Size is the approximate memory the memtable holds, in bytes.
func (m *Memtable) Size() int64 { panic("unimplemented") }

// Len is the number of entries.
func (m *Memtable) Len() int { panic("unimplemented") }

// NewIterator returns an iterator over the entries. An iterator sees every
// entry added before it was positioned and may see later ones.
func (m *Memtable) NewIterator() cell.Iterator { panic("unimplemented") }
