package tablet

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/memtable"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// ReadRow reads one row. ok is false when the row has no cell left after
// deletes, garbage collection and ro.
func (t *Tablet) ReadRow(ctx context.Context, row []byte, ro ReadOptions) (cell.Row, bool, error) {
	if !t.Contains(row) {
		return cell.Row{}, false, t.notServing(row, "row outside the tablet's range")
	}
	v, snap, err := t.acquire()
	if err != nil {
		return cell.Row{}, false, err
	}
	defer v.unref()
	return t.readRow(ctx, v, snap, row, ro)
}

// groupsFor returns the names of the version's locality groups that may
// hold cells ro asks for, sorted.
func groupsFor(v *version, ro ReadOptions) []string {
	var out []string
	for name := range v.groups {
		want := false
		for fname, f := range v.schema.Families {
			if f.Group() == name && ro.wantsFamily(fname) {
				want = true
				break
			}
		}
		if want {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// memRowEntries appends the entries of row in m; memtable keys and values
// stay valid for the memtable's life, so they are not copied.
func memRowEntries(dst []entry, m *memtable.Memtable, prefix []byte) []entry {
	it := m.NewIterator()
	for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		dst = append(dst, entry{key: it.Key(), value: it.Value()})
	}
	return dst
}

// groupRowEntries appends the entries of row in a group's SSTables to dst,
// newest file first (not sorted), taking them from the scan cache when it
// holds them. Bloom filters skip files that cannot hold the row.
//
// Values alias the files' blocks, which are immutable and never recycled,
// unless the entries go into the scan cache: its accounting of their size
// must not hide whole blocks kept alive behind them, so those are copied.
// Keys are always copied (an iterator reuses its key buffer): into keys,
// or with the values of a row going into the cache. its lends the
// iterators.
func (t *Tablet) groupRowEntries(ctx context.Context, g *groupFiles, row, prefix []byte, dst []entry, keys *keyBuf, its *sstable.IteratorCache) ([]entry, error) {
	// Only a row read before, recently, is worth copying into the scan
	// cache: most rows of a random read workload are read once in the
	// cache's lifetime, and copying every version of them costs more than
	// the few hits pay back (TinyLFU's doorkeeper, ScanCache.admit). Nor
	// is such a row looked up: the doorkeeper answers sooner than the
	// cache's map, and a cached row it forgot (its window ended) is found
	// again from its next read on.
	sc := t.opts.ScanCache
	keep := false
	if sc != nil {
		if keep = sc.admit(g.gen, row); !keep {
			sc.misses.Add(1)
		} else if es, ok := sc.get(g.gen, row); ok {
			return append(dst, es...), nil
		}
	}
	first := len(dst)
	var vals []byte // the free tail of the current copy buffer (keep only)
	for _, f := range g.files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !f.r.MayContainRowPrefix(prefix) {
			continue
		}
		it := its.Iterator(f.r)
		for ok := it.SeekGE(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
			k, v := it.Key(), it.Value()
			if !keep {
				dst = append(dst, entry{key: keys.copy(k), value: v})
				continue
			}
			// Key and value together in buffers of the cached row's
			// own, so that the cache charges what it keeps alive.
			if n := len(k) + len(v); len(vals)+n > cap(vals) {
				// Room for a few entries like this one, twice as
				// many as the last buffer held.
				vals = make([]byte, 0, max(2*cap(vals), 2*n, 256))
			}
			off := len(vals)
			vals = append(append(vals, k...), v...)
			kEnd := off + len(k)
			dst = append(dst, entry{key: vals[off:kEnd:kEnd], value: vals[kEnd:len(vals):len(vals)]})
		}
		if err := its.Done(it); err != nil {
			return nil, err
		}
	}
	if keep {
		es := slices.Clone(dst[first:])
		sortEntries(es)
		sc.set(g.gen, row, es)
	}
	return dst, nil
}

// keyBuf hands out copies of keys carved from shared buffers: one
// allocation for the keys of a typical row instead of one a file.
type keyBuf struct{ buf []byte }

// copy returns a copy of k, its capacity clipped to its length.
func (b *keyBuf) copy(k []byte) []byte {
	if len(b.buf)+len(k) > cap(b.buf) {
		// A new buffer; the keys already copied keep the old one.
		b.buf = make([]byte, 0, max(2*cap(b.buf), len(k), keyBufBytes/4))
	}
	off := len(b.buf)
	b.buf = append(b.buf, k...)
	return b.buf[off:len(b.buf):len(b.buf)]
}

// resolvers recycles the buffers of point reads' row assembly.
var resolvers = sync.Pool{New: func() any { return new(pointRead) }}

// pointRead is what one point read reuses from the last: the resolver's
// buffers, the entries slice and an SSTable iterator. Nothing the returned
// row references is among them.
type pointRead struct {
	rs  resolver
	es  []entry
	its sstable.IteratorCache
}

// readRow reads row from version v at snapshot snap.
func (t *Tablet) readRow(ctx context.Context, v *version, snap uint64, row []byte, ro ReadOptions) (cell.Row, bool, error) {
	pr := resolvers.Get().(*pointRead)
	defer func() {
		clear(pr.es) // drop the references to blocks and keys
		pr.es = pr.es[:0]
		resolvers.Put(pr)
	}()
	prefix := cell.RowPrefix(row)
	es := memRowEntries(pr.es[:0], v.mem, prefix)
	if v.frozen != nil {
		es = memRowEntries(es, v.frozen, prefix)
	}
	var keys keyBuf
	var err error
	for _, name := range groupsFor(v, ro) {
		if es, err = t.groupRowEntries(ctx, v.groups[name], row, prefix, es, &keys, &pr.its); err != nil {
			pr.es = es[:0]
			return cell.Row{}, false, err
		}
	}
	pr.es = es
	// One stable sort: equal keys keep their sources' order (memtables,
	// then groups by name, each newest file first).
	sortEntries(es)
	return pr.rs.assemble(bytes.Clone(row), es, t.params(v, snap), ro)
}

func (t *Tablet) params(v *version, snap uint64) resolveParams {
	return resolveParams{snap: snap, families: v.schema.Families, drops: v.drops, now: t.opts.Clock()}
}

// ScanOptions say which rows a Scan returns.
type ScanOptions struct {
	// Start and End bound the scan to rows in [Start, End), clipped to the
	// tablet's range; nil means unbounded.
	Start, End []byte
	// Reverse returns rows in descending key order.
	Reverse bool
	// Limit > 0 stops after that many rows.
	Limit int
	ReadOptions
}

// Scan calls fn for every row in range that has cells left after deletes,
// garbage collection and so.ReadOptions, in key order (descending with
// Reverse), all at one snapshot. It stops at the first error fn returns and
// returns it. fn may call the tablet's other methods. A row is fn's to keep:
// it is never modified afterwards (its key, cells and values share buffers
// with other rows, and its Cells' capacity is its length, so appending to
// them copies).
func (t *Tablet) Scan(ctx context.Context, so ScanOptions, fn func(cell.Row) error) error {
	lower, upper := t.lower, t.upper
	if len(so.Start) > 0 && bytes.Compare(so.Start, t.rng.Start) > 0 {
		lower = cell.RowPrefix(so.Start)
	}
	if tabletdesc.CompareEnds(so.End, t.rng.End) < 0 {
		upper = cell.RowPrefix(so.End)
	}
	if lower != nil && upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	v, snap, err := t.acquire()
	if err != nil {
		return err
	}
	defer v.unref()
	it := t.newIter(v, groupsFor(v, so.ReadOptions), lower, upper)
	p := t.params(v, snap)
	n := 0
	var rs resolver
	emit := func(es []entry) (bool, error) {
		k, err := cell.DecodeKey(es[0].key)
		if err != nil {
			return false, err
		}
		r, ok, err := rs.assemble(k.Row, es, p, so.ReadOptions)
		if err != nil || !ok {
			return false, err
		}
		if err := fn(r); err != nil {
			return false, err
		}
		n++
		return so.Limit > 0 && n >= so.Limit, nil
	}
	// Rows' keys and cells are carved from slabs shared by consecutive
	// rows: two allocations per row (its keys' buffer and its cells)
	// were half of a scan's garbage.
	rs.slabCells = true
	keys := keySlab{size: keySlabBytes}
	var es []entry
	if !so.Reverse {
		ok := it.First()
		for ok {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, it.Close())
			}
			es, ok = keys.readRowEntries(it, es[:0])
			done, err := emit(es)
			if err != nil || done {
				return errors.Join(err, it.Close())
			}
		}
		return it.Close()
	}
	pos := upper
	if pos == nil {
		pos = t.maxKey
	}
	for it.SeekLT(pos) {
		if err := ctx.Err(); err != nil {
			return errors.Join(err, it.Close())
		}
		n := cell.RowPrefixLen(it.Key())
		if n < 0 {
			return errors.Join(cell.ErrMalformedKey, it.Close())
		}
		pos = bytes.Clone(it.Key()[:n])
		if !it.SeekGE(pos) {
			break
		}
		es, _ = keys.readRowEntries(it, es[:0])
		done, err := emit(es)
		if err != nil || done {
			return errors.Join(err, it.Close())
		}
	}
	return it.Close()
}

// readRowEntries collects the entries of the row the iterator is at and
// leaves it at the next row; ok is false when the iterator ended.
//
// Keys are copied, all of a row's into one new buffer (an SSTable
// iterator reuses its key buffer), and handed over with the row: the
// cells' qualifiers and the row key alias them. Values are not copied:
// the iterator's sources are memtables, whose arena is append-only, and
// SSTable blocks, which are never modified or recycled once read (see
// storage/sstable's iterator), so a value stays valid — and unchanged —
// after the iterator moves, for as long as it is referenced.
func readRowEntries(it *mergingIter, dst []entry) ([]entry, bool) {
	var keys keySlab // the row's own: compactions keep rows' entries
	return keys.readRowEntries(it, dst)
}

// keySlab is the buffer keys are copied into, shared by the rows of a
// scan: a row's keys stay valid (and unchanged) for as long as they are
// referenced, and keep the whole slab alive with them.
type keySlab struct {
	buf  []byte // the free tail of the current buffer
	size int    // of a new buffer; 0: keyBufBytes
}

// readRowEntries is readRowEntries with the keys copied into s.
func (s *keySlab) readRowEntries(it *mergingIter, dst []entry) ([]entry, bool) {
	var prefix []byte
	for {
		k := it.Key()
		if len(s.buf)+len(k) > cap(s.buf) {
			// A new buffer; the keys already copied keep the old one.
			size := s.size
			if size == 0 {
				size = keyBufBytes
			}
			s.buf = make([]byte, 0, max(size, len(k)))
		}
		off := len(s.buf)
		s.buf = append(s.buf, k...)
		key := s.buf[off:len(s.buf):len(s.buf)]
		if prefix == nil {
			prefix = key[:max(cell.RowPrefixLen(key), 0)]
		}
		dst = append(dst, entry{key: key, value: it.Value()})
		if !it.Next() {
			return dst, false
		}
		if !bytes.HasPrefix(it.Key(), prefix) {
			return dst, true
		}
	}
}

// keyBufBytes is the size of the buffers readRowEntries copies keys into:
// a typical row's keys fit in one. A scan's slabs (keySlabBytes) hold
// those of many rows.
const (
	keyBufBytes  = 512
	keySlabBytes = 8 << 10
)

// newIter merges the memtables and the SSTables of the given groups,
// clipped to [lower, upper).
func (t *Tablet) newIter(v *version, groups []string, lower, upper []byte) *mergingIter {
	srcs := []cell.Iterator{v.mem.NewIterator()}
	if v.frozen != nil {
		srcs = append(srcs, v.frozen.NewIterator())
	}
	for _, name := range groups {
		for _, f := range v.groups[name].files {
			srcs = append(srcs, f.r.NewIterator())
		}
	}
	return newMergingIter(lower, upper, srcs...)
}
