package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// LocationCacheOptions configure NewLocationCache. Zero values take the
// documented defaults.
type LocationCacheOptions struct {
	// Capacity bounds the number of cached tablet locations; the least
	// recently used are evicted beyond it. Default 100,000 (a few tens of
	// MiB: the paper's clients cache every location they have seen).
	Capacity int
	// Prefetch is how many consecutive METADATA rows Locate reads on a
	// miss: the tablet asked for and its successors. Default 16.
	Prefetch int
	// MaxAttempts bounds the "not serving" refreshes Locate makes at each
	// level of the hierarchy before giving up. Default 4.
	MaxAttempts int
}

func (o *LocationCacheOptions) setDefaults() {
	if o.Capacity <= 0 {
		o.Capacity = 100_000
	}
	if o.Prefetch <= 0 {
		o.Prefetch = 16
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
}

// locKey names a cached location: cached ranges of a table never overlap,
// so the end row identifies one ("" is the table's last tablet).
type locKey struct {
	table meta.TableID
	end   string
}

// fingerprint identifies one assignment of one tablet.
type fingerprint struct {
	tablet, server string
	epoch          uint64
}

func fingerprintOf(l meta.Location) fingerprint {
	return fingerprint{tablet: l.TabletID, server: l.Server, epoch: l.Epoch}
}

// LocationCache is the client's cache of tablet locations (paper §5.1),
// for user tables and for METADATA itself (table meta.MetadataTable, whose
// first tablet is the root). It is plain logic, with no I/O but Locate's
// calls to a MetadataSource, and safe for concurrent use.
//
// Contract:
//   - cached ranges of one table never overlap: Insert replaces the
//     entries a new location overlaps (splits, merges, moves), unless one
//     of them has a larger epoch, in which case the new location is stale
//     and dropped;
//   - Lookup only answers from the cache; a hit may still be stale, which
//     the tablet server reveals by answering "not serving", and Invalidate
//     drops it;
//   - at most Capacity locations are kept, the least recently used (looked
//     up, listed or inserted) evicted first.
//
// The Locations it returns share their Start and End with the cache: callers
// must not modify them.
type LocationCache struct {
	opts LocationCacheOptions

	mu sync.Mutex
	// tables holds each table's entries sorted by end row (the last
	// tablet, with an empty end, last); ranges do not overlap, so starts
	// are sorted too.
	tables map[meta.TableID][]*meta.Location
	lru    *simplelru.LRU[locKey, *meta.Location]
	failed *simplelru.LRU[locKey, fingerprint] // the last location of a range that answered "not serving"

	statsMu sync.Mutex
	stats   LocateStats
}

// LocateStats counts the reads of the location hierarchy that
// LocationCache.Locate made: what a cache miss costs, and how far up the
// hierarchy lookups went. The three levels (paper §5.1) are the lock
// service's pointer to the root tablet, the root tablet (the rows of the
// other METADATA tablets), and a METADATA tablet (the rows of user
// tablets).
type LocateStats struct {
	// Lookups is how many Locate calls read the hierarchy (missed the
	// cache); Reads is how many reads they made: root locations asked for
	// (MetadataSource.Root) plus METADATA tablets read
	// (MetadataSource.ScanMetadata).
	Lookups, Reads uint64
	// ByLevels[n] counts the lookups that went n levels up the hierarchy:
	// 1 read only the tablet holding the row's location (or, for a row of
	// the root tablet, only the root's location), 2 also the tablet above
	// it, 3 up to the root's location. ByLevels[0] is unused.
	ByLevels [4]uint64
	// MaxLevels is the most levels one lookup went up, MaxReads the most
	// reads one lookup made (refreshes after "not serving", and reads of
	// a next METADATA tablet when one held no row at or after the lookup
	// key, included).
	MaxLevels, MaxReads int
}

// Stats returns the counts of Locate's reads since the cache was made.
func (c *LocationCache) Stats() LocateStats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.stats
}

// lookupTrace follows one Locate: its reads and how deep the deepest was.
type lookupTrace struct {
	reads   int
	deepest int // the largest recursion depth at which a read was made
}

func (tr *lookupTrace) read(depth int) {
	tr.reads++
	tr.deepest = max(tr.deepest, depth)
}

// record adds a finished Locate's trace to the stats.
func (c *LocationCache) record(tr *lookupTrace) {
	if tr.reads == 0 {
		return
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	levels := tr.deepest + 1
	c.stats.Lookups++
	c.stats.Reads += uint64(tr.reads)
	c.stats.ByLevels[min(levels, len(c.stats.ByLevels)-1)]++
	c.stats.MaxLevels = max(c.stats.MaxLevels, levels)
	c.stats.MaxReads = max(c.stats.MaxReads, tr.reads)
}

// NewLocationCache returns an empty cache.
func NewLocationCache(opts LocationCacheOptions) *LocationCache {
	opts.setDefaults()
	c := &LocationCache{opts: opts, tables: make(map[meta.TableID][]*meta.Location)}
	// Every removal from the LRU — eviction or ours — goes through
	// unindex, so the LRU and the index hold the same entries.
	c.lru, _ = simplelru.NewLRU(opts.Capacity, c.unindex)
	c.failed, _ = simplelru.NewLRU[locKey, fingerprint](1024, nil)
	return c
}

// firstEndingAfter returns the index of the first entry whose end is after
// row (the only entry that may hold row).
func firstEndingAfter(ents []*meta.Location, row []byte) int {
	return sort.Search(len(ents), func(i int) bool { return ents[i].Range().EndsAfter(row) })
}

func keyOf(l *meta.Location) locKey { return locKey{table: l.Table, end: string(l.End)} }

// unindex removes l from its table's index; the LRU calls it on every
// removal.
func (c *LocationCache) unindex(k locKey, l *meta.Location) {
	ents := c.tables[k.table]
	i := sort.Search(len(ents), func(i int) bool { return tabletdesc.CompareEnds(ents[i].End, l.End) >= 0 })
	if i < len(ents) && ents[i] == l {
		ents = slices.Delete(ents, i, i+1)
		if len(ents) == 0 {
			delete(c.tables, k.table)
		} else {
			c.tables[k.table] = ents
		}
	}
}

// overlapping returns the index range [i, j) of the entries of ents that
// overlap [start, end) (empty end: unbounded).
func overlapping(ents []*meta.Location, start, end []byte) (int, int) {
	i := firstEndingAfter(ents, start)
	j := i
	want := tabletdesc.KeyRange{Start: start, End: end}
	for j < len(ents) && want.EndsAfter(ents[j].Start) {
		j++
	}
	return i, j
}

// Insert caches locations, typically the consecutive tablets one METADATA
// scan returned (prefetch). Each is handled in order:
//   - a location with an empty range (End ≤ Start) is ignored;
//   - if a cached location it overlaps has a larger epoch, it is stale and
//     ignored;
//   - otherwise the cached locations it overlaps are dropped, and it is
//     cached unless unassigned (Server ""), which only drops them.
//
// Insert returns how many locations it cached.
func (c *LocationCache) Insert(locs ...meta.Location) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range locs {
		if c.insertLocked(l) {
			n++
		}
	}
	return n
}

func (c *LocationCache) insertLocked(l meta.Location) bool {
	if l.Range().Empty() {
		return false
	}
	ents := c.tables[l.Table]
	i, j := overlapping(ents, l.Start, l.End)
	for _, e := range ents[i:j] {
		if e.Epoch > l.Epoch {
			return false
		}
	}
	for _, e := range slices.Clone(ents[i:j]) {
		c.lru.Remove(keyOf(e)) // unindexes
	}
	if l.Server == "" {
		return false
	}
	nl := &meta.Location{Table: l.Table, Start: bytes.Clone(l.Start), End: bytes.Clone(l.End),
		TabletID: l.TabletID, Server: l.Server, Epoch: l.Epoch}
	if len(nl.End) == 0 {
		nl.End = nil
	}
	if len(nl.Start) == 0 {
		nl.Start = nil
	}
	ents = c.tables[l.Table] // removals may have changed it
	i = firstEndingAfter(ents, nl.Start)
	c.tables[l.Table] = slices.Insert(ents, i, nl)
	c.lru.Add(keyOf(nl), nl) // may evict (and unindex) the least recently used
	return true
}

// Lookup returns the cached location of the tablet of table holding row,
// and whether there is one. A hit counts as a use for eviction.
func (c *LocationCache) Lookup(table meta.TableID, row []byte) (meta.Location, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ents := c.tables[table]
	i := firstEndingAfter(ents, row)
	if i == len(ents) || bytes.Compare(ents[i].Start, row) > 0 {
		return meta.Location{}, false
	}
	c.lru.Get(keyOf(ents[i]))
	return *ents[i], true
}

// TabletsInRange returns the cached locations of table overlapping [start,
// end) (empty end: to the end of the table), in row order, and whether they
// cover the range completely, without gaps. When complete is false the
// caller reads METADATA for the range; the locations returned are then only
// the cached part.
func (c *LocationCache) TabletsInRange(table meta.TableID, start, end []byte) (locs []meta.Location, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ents := c.tables[table]
	i, j := overlapping(ents, start, end)
	complete = i < j && bytes.Compare(ents[i].Start, start) <= 0
	for k, e := range ents[i:j] {
		if k > 0 && !bytes.Equal(ents[i+k-1].End, e.Start) {
			complete = false
		}
		c.lru.Get(keyOf(e))
		locs = append(locs, *e)
	}
	if complete && tabletdesc.CompareEnds(ents[j-1].End, end) < 0 {
		complete = false // the range's end (perhaps the table's) is not covered
	}
	return locs, complete
}

// Invalidation says what Invalidate did.
type Invalidation int

const (
	// InvalidateIgnored: the cache no longer held that location (already
	// dropped, or replaced by a newer one): nothing changed.
	InvalidateIgnored Invalidation = iota
	// InvalidateDropped: the location was dropped; the next lookup reads
	// its METADATA row again.
	InvalidateDropped
	// InvalidateWalkedUp: the location was dropped, and because it had
	// failed before and was read back unchanged since, the location of
	// the METADATA tablet that supplied it was dropped too, so the next
	// lookup goes one level further up (for a METADATA tablet: to the
	// root; for the root: to the lock service).
	InvalidateWalkedUp
)

// Invalidate reports that loc's server answered "not serving" for loc's
// tablet. It drops the cached entry if it is still that location (same
// range, tablet, server and epoch). When the same location fails a second
// time after having been read back from METADATA unchanged, the METADATA
// tablet that supplied it is suspect as well and its entry is dropped:
// walking up the hierarchy, as the paper's client does.
func (c *LocationCache) Invalidate(loc meta.Location) Invalidation {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := locKey{table: loc.Table, end: string(loc.End)}
	cur, ok := c.lru.Peek(k)
	fp := fingerprintOf(loc)
	if !ok || fingerprintOf(*cur) != fp || !bytes.Equal(cur.Start, loc.Start) {
		return InvalidateIgnored
	}
	c.lru.Remove(k)
	// The entry was dropped at the first failure, so finding it again
	// means it was read back from METADATA unchanged.
	if f, ok := c.failed.Peek(k); ok && f == fp {
		c.failed.Remove(k)
		if !loc.IsRoot() {
			if p := c.parentLocked(loc); p != nil {
				c.lru.Remove(keyOf(p))
			}
		}
		return InvalidateWalkedUp
	}
	c.failed.Add(k, fp)
	return InvalidateDropped
}

// parentLocked returns the cached METADATA tablet holding loc's row, or nil.
func (c *LocationCache) parentLocked(loc meta.Location) *meta.Location {
	key := loc.MetadataKey()
	ents := c.tables[meta.MetadataTable]
	i := firstEndingAfter(ents, key)
	if i == len(ents) || bytes.Compare(ents[i].Start, key) > 0 {
		return nil
	}
	return ents[i]
}

// RemoveTable drops every cached location of table (after it is deleted).
func (c *LocationCache) RemoveTable(table meta.TableID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range slices.Clone(c.tables[table]) {
		c.lru.Remove(keyOf(e))
	}
}

// Len returns the number of cached locations.
func (c *LocationCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// MetadataSource reads the location hierarchy for Locate: the lock
// service's pointer to the root tablet, and METADATA tablets. The cluster
// client implements it with a lock-service read and ReadRows calls; tests
// with maps.
type MetadataSource interface {
	// Root returns the root tablet's location (coord key `root`).
	Root(ctx context.Context) (meta.Location, error)
	// ScanMetadata reads up to limit rows of the METADATA tablet tab, from
	// row key from (inclusive) to tab's end, and returns their locations
	// in key order (possibly none). When tab's server does not serve tab
	// the error matches tabletdesc.ErrNotServing.
	ScanMetadata(ctx context.Context, tab meta.Location, from []byte, limit int) ([]meta.Location, error)
}

// ErrNoTablet is matched (errors.Is) by Locate's error when METADATA has no
// tablet for the row: the table does not exist (any more), or METADATA was
// caught between the two halves of a change. The caller may retry.
var ErrNoTablet = errors.New("no tablet holds the row")

// ErrUnassigned is matched (errors.Is) by Locate's error when METADATA
// says the tablet holding the row is served by no server (between an
// unload and the next load). The caller retries with backoff.
var ErrUnassigned = errors.New("tablet not assigned")

// Locate returns the location of the tablet of table holding row: from the
// cache if it can, else by reading METADATA through src, walking up the
// hierarchy as far as needed — at most the root's location from the lock
// service, the root tablet, and one METADATA tablet — and caching what it
// reads (Prefetch rows per METADATA read). A METADATA tablet that answers
// "not serving" is invalidated and looked up again, at most MaxAttempts
// times per level. Errors from src other than "not serving" are returned
// as they are.
//
// Stats counts the reads and levels of every Locate that read something.
func (c *LocationCache) Locate(ctx context.Context, src MetadataSource, table meta.TableID, row []byte) (meta.Location, error) {
	var tr lookupTrace
	defer c.record(&tr)
	return c.locate(ctx, src, table, row, 0, &tr)
}

func (c *LocationCache) locate(ctx context.Context, src MetadataSource, table meta.TableID, row []byte, depth int, tr *lookupTrace) (meta.Location, error) {
	if depth > 2 {
		return meta.Location{}, fmt.Errorf("client: location of %s row %q deeper than three levels", table, row)
	}
	for attempt := 0; ; attempt++ {
		if l, ok := c.Lookup(table, row); ok {
			return l, nil
		}
		if err := ctx.Err(); err != nil {
			return meta.Location{}, err
		}
		if attempt == c.opts.MaxAttempts {
			return meta.Location{}, fmt.Errorf("client: locating %s row %q: gave up after %d refreshes: %w", table, row, attempt, tabletdesc.ErrNotServing)
		}
		if table == meta.MetadataTable && bytes.Compare(row, meta.RootTabletEnd()) < 0 {
			tr.read(depth)
			root, err := src.Root(ctx)
			if err != nil {
				return meta.Location{}, err
			}
			if root.Server == "" {
				return meta.Location{}, fmt.Errorf("client: the root tablet: %w", ErrUnassigned)
			}
			if !root.IsRoot() {
				return meta.Location{}, fmt.Errorf("client: the lock service's root location %+v is not the root tablet's range", root)
			}
			c.Insert(root)
			continue
		}
		l, found, retry, err := c.readMetadata(ctx, src, table, row, depth, tr)
		if retry {
			continue // the METADATA tablet was invalidated; look it up again
		}
		if err != nil {
			return meta.Location{}, err
		}
		if found {
			return l, nil
		}
	}
}

// readMetadata reads the METADATA rows for (table, row), starting in the
// METADATA tablet holding the lookup key and going on to the following
// METADATA tablets while they have no row at or after it. It caches what
// it reads and returns the location holding row, if one did. retry says
// that a METADATA tablet answered "not serving" and was invalidated.
func (c *LocationCache) readMetadata(ctx context.Context, src MetadataSource, table meta.TableID, row []byte, depth int, tr *lookupTrace) (l meta.Location, found, retry bool, err error) {
	from := meta.MetadataLookupKey(table, row)
	for {
		parent, err := c.locate(ctx, src, meta.MetadataTable, from, depth+1, tr)
		if err != nil {
			return meta.Location{}, false, false, err
		}
		tr.read(depth)
		locs, err := src.ScanMetadata(ctx, parent, from, c.opts.Prefetch)
		if errors.Is(err, tabletdesc.ErrNotServing) {
			c.Invalidate(parent)
			return meta.Location{}, false, true, err
		}
		if err != nil {
			return meta.Location{}, false, false, err
		}
		if len(locs) == 0 {
			if parent.IsRoot() {
				// The root holds a row for every other METADATA tablet, and
				// they cover the rest of METADATA without gaps (splits
				// never leave one): no row at or after from means the
				// master has not yet written METADATA's first tablet (a
				// cluster just started). Going on at the root's end would
				// look that very row up in the root again.
				return meta.Location{}, false, false, fmt.Errorf("client: %s row %q: the root tablet has no row of a METADATA tablet at or after %q yet: %w", table, row, from, ErrUnassigned)
			}
			if len(parent.End) == 0 {
				return meta.Location{}, false, false, fmt.Errorf("client: %s row %q: %w", table, row, ErrNoTablet)
			}
			from = parent.End // the row is in the next METADATA tablet
			continue
		}
		c.Insert(locs...)
		if first := locs[0]; first.Table == table && first.Contains(row) {
			if first.Server == "" {
				return meta.Location{}, false, false, fmt.Errorf("client: %s tablet %s: %w", table, first.TabletID, ErrUnassigned)
			}
			return first, true, false, nil
		}
		return meta.Location{}, false, false, fmt.Errorf("client: %s row %q: first METADATA row after it is %s tablet %s [%q, %q): %w",
			table, row, locs[0].Table, locs[0].TabletID, locs[0].Start, locs[0].End, ErrNoTablet)
	}
}
