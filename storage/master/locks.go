package master

import (
	"sync"

	"github.com/tabuladb/tabula/storage/meta"
)

// tableLocks serialises the changes of each table: a change reads the
// catalog entry, checks the request against it, writes it back and tells
// the tablets, and two changes interleaving would lose one of them. Locks of
// different tables are independent, so a slow DropRowRange of one table does
// not hold up the others.
type tableLocks struct {
	mu sync.Mutex
	m  map[meta.TableID]*tableLock
}

type tableLock struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry is removed at zero
}

// lock locks table id and returns the function that unlocks it.
func (l *tableLocks) lock(id meta.TableID) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[meta.TableID]*tableLock)
	}
	e := l.m[id]
	if e == nil {
		e = &tableLock{}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}
