package tablet

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// entry is one internal entry: an encoded cell.Key and its value.
type entry struct {
	key, value []byte
}

func entrySize(es []entry) int64 {
	n := int64(0)
	for _, e := range es {
		n += int64(len(e.key)+len(e.value)) + 48
	}
	return n
}

// sortEntries orders entries of one or several sources by internal key.
func sortEntries(es []entry) {
	slices.SortStableFunc(es, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
}

// Column names one column of a row.
type Column struct {
	Family    string
	Qualifier []byte
}

// ReadOptions filter what a read returns. The zero value returns every live
// version of every column.
type ReadOptions struct {
	// Families and Columns restrict the read: when either is non-nil, a
	// cell is returned only if its family is in Families or its column is
	// in Columns. Unknown families match nothing.
	Families []string
	Columns  []Column
	// StartTimestamp and EndTimestamp keep versions with timestamps in
	// [StartTimestamp, EndTimestamp); EndTimestamp 0 means no upper bound.
	StartTimestamp, EndTimestamp int64
	// MaxVersions > 0 returns at most that many versions of each column,
	// the newest within the time range.
	MaxVersions int
}

func (ro ReadOptions) allColumns() bool { return ro.Families == nil && ro.Columns == nil }

// wantsFamily reports whether any cell of family may be returned.
func (ro ReadOptions) wantsFamily(family string) bool {
	if ro.allColumns() || slices.Contains(ro.Families, family) {
		return true
	}
	for _, c := range ro.Columns {
		if c.Family == family {
			return true
		}
	}
	return false
}

func (ro ReadOptions) wantsColumn(family string, qualifier []byte) bool {
	if ro.allColumns() || slices.Contains(ro.Families, family) {
		return true
	}
	for _, c := range ro.Columns {
		if c.Family == family && bytes.Equal(c.Qualifier, qualifier) {
			return true
		}
	}
	return false
}

func (ro ReadOptions) inTimeRange(ts int64) bool {
	end := ro.EndTimestamp
	if end == 0 {
		end = math.MaxInt64
	}
	return ts >= ro.StartTimestamp && ts < end
}

// resolveParams say how resolveRow treats a row's entries.
type resolveParams struct {
	// snap: entries with a greater sequence number are invisible.
	snap uint64
	// families that exist; entries of other families are dropped.
	families map[string]tabletdesc.Family
	// drops: family → sequence number at which it was dropped from the
	// schema; it shadows the family's older entries like a family marker
	// in every row.
	drops map[string]uint64
	// now, in microseconds, for MaxAge policies.
	now int64
	// noGC skips the GC policies (merging compactions use no GC).
	noGC bool
}

// cellVersion is one live version of a column: its decoded key, its value and
// the entry it came from.
type cellVersion struct {
	key   cell.Key
	value []byte
	raw   entry
}

// resolveRow computes the live versions of one row from its entries, given
// in internal key order (duplicates of an entry, such as a row marker
// written to several locality groups, are allowed). The rules:
//
//   - entries with seq > snap are ignored;
//   - a row marker with seq S shadows every entry of the row with seq < S; a
//     family marker (or the family's drop) those of its family; a column
//     marker those of its column whose timestamps lie in its range;
//   - of the versions with the same timestamp only the one with the highest
//     seq counts (if it is shadowed, so are the others) — except in an
//     aggregate family, where every write of the version that is not
//     shadowed is folded in with the family's aggregator, the result keeping
//     the key of the newest;
//   - families not in p.families are dropped;
//   - then the family's GC policy collects versions (unless p.noGC).
//
// The result is in cell order: family, qualifier, timestamp descending.
func resolveRow(entries []entry, p resolveParams) ([]cellVersion, error) {
	var rs resolver
	return rs.resolve(entries, p)
}

// resolver holds resolveRow's buffers, reused from row to row by a scan: a
// result is valid until the next call.
type resolver struct {
	out, colVers []cellVersion
	markers      []colMarker

	// slabCells: assemble carves rows' cells from slabs shared by
	// consecutive rows (a scan's), instead of one allocation a row.
	slabCells bool
	cells     []cell.Cell // the row being filtered, reused
	slab      []cell.Cell // the unused rest of the current slab
}

// cellSlabCells is the number of cells a slab of resolver.slab holds (at
// least).
const cellSlabCells = 256

// resolve is resolveRow with rs's buffers.
func (rs *resolver) resolve(entries []entry, p resolveParams) ([]cellVersion, error) {
	out := rs.out[:0]
	defer func() { rs.out = out[:0] }()
	var rowDel uint64
	i := 0
	// Row markers come first.
	for ; i < len(entries); i++ {
		if key := entries[i].key; len(key) > 0 && cell.KindOf(key) != cell.KindRowDelete {
			// Not a row marker (the loop below decodes and checks
			// it); decoding only the last byte here saves a whole
			// decode of the row's first entry.
			break
		}
		k, err := cell.DecodeKey(entries[i].key)
		if err != nil {
			return nil, err
		}
		if k.Kind != cell.KindRowDelete {
			break
		}
		if k.Seq <= p.snap && k.Seq > rowDel {
			rowDel = k.Seq
		}
	}
	var (
		curFam    string
		famOK     bool
		fam       tabletdesc.Family
		famDel    uint64
		haveFam   bool
		curQual   []byte
		haveCol   bool
		markers   = rs.markers[:0]
		colVers   = rs.colVers[:0]
		lastTS    int64
		haveTS    bool
		decodeErr error
		// folding: the version at lastTS is live and its family
		// aggregates; foldSeq is the seq of the last write folded in.
		folding bool
		foldSeq uint64
		// folder accumulates the version's writes from the second on
		// (nil while it has one: the common case costs nothing).
		folder  *cell.Folder
		foldErr error
	)
	// finishFold stores the folded state in the version being folded.
	finishFold := func() {
		if folder == nil {
			return
		}
		cv := &colVers[len(colVers)-1]
		merged, err := folder.State()
		folder = nil
		if err != nil {
			if foldErr == nil {
				foldErr = fmt.Errorf("tablet: row %q, column %s:%q at %d: %w", cv.key.Row, cv.key.Family, cv.key.Qualifier, cv.key.Timestamp, err)
			}
			return
		}
		// The folded version keeps the key of its newest write, so
		// that a compaction writing it stays shadowed by exactly the
		// markers that shadow that write.
		cv.value = merged
		cv.raw = entry{key: cv.raw.key, value: merged}
	}
	flushColumn := func() {
		finishFold()
		for idx, v := range colVers {
			if !p.noGC && fam.GC.Collects(idx, v.key.Timestamp, p.now) {
				break
			}
			out = append(out, v)
		}
		colVers = colVers[:0]
		markers = markers[:0]
		haveTS = false
	}
	for ; i < len(entries); i++ {
		e := entries[i]
		k, err := cell.DecodeKeyWithFamily(e.key, curFam)
		if err != nil {
			decodeErr = err
			break
		}
		if k.Kind == cell.KindRowDelete {
			// Sorted input puts row markers first; a row marker here
			// means the entries are not one sorted row.
			return nil, fmt.Errorf("tablet: row marker after family entries in row %q", k.Row)
		}
		if !haveFam || k.Family != curFam {
			if haveCol {
				flushColumn()
				haveCol = false
			}
			haveFam = true
			curFam = k.Family
			fam, famOK = p.families[k.Family]
			famDel = max(rowDel, p.drops[k.Family])
		}
		if !famOK {
			continue
		}
		if k.Kind == cell.KindFamilyDelete {
			if k.Seq <= p.snap && k.Seq > famDel {
				famDel = k.Seq
			}
			continue
		}
		if !haveCol || !bytes.Equal(k.Qualifier, curQual) {
			if haveCol {
				flushColumn()
			}
			haveCol = true
			curQual = k.Qualifier
		}
		if k.Seq > p.snap {
			continue
		}
		if k.Kind == cell.KindColumnDelete {
			start, end, err := cell.DecodeTimeRange(e.value)
			if err != nil {
				return nil, err
			}
			markers = append(markers, colMarker{seq: k.Seq, start: start, end: end})
			continue
		}
		if haveTS && k.Timestamp == lastTS {
			// An older write of the same version: hidden, unless the
			// family aggregates, which folds every live write of
			// the version into one (the same entry met twice, as
			// sequence numbers are unique, counts once).
			if !folding || k.Seq == foldSeq {
				continue
			}
			if k.Seq < famDel || shadowedByColumn(markers, k.Seq, k.Timestamp) {
				// Shadowing is monotone in seq: so are the rest.
				folding = false
				continue
			}
			if folder == nil {
				folder = fam.Aggregate.NewFolder(colVers[len(colVers)-1].value)
			}
			folder.Add(e.value)
			foldSeq = k.Seq
			continue
		}
		finishFold()
		haveTS, lastTS = true, k.Timestamp
		folding = false
		if k.Seq < famDel || shadowedByColumn(markers, k.Seq, k.Timestamp) {
			continue
		}
		colVers = append(colVers, cellVersion{key: k, value: e.value, raw: e})
		folding, foldSeq = fam.Aggregate != cell.NoAggregator, k.Seq
	}
	rs.markers, rs.colVers = markers[:0], colVers[:0]
	if decodeErr != nil {
		return nil, decodeErr
	}
	if haveCol {
		flushColumn()
	}
	if foldErr != nil {
		return nil, foldErr
	}
	return out, nil
}

type colMarker struct {
	seq        uint64
	start, end int64
}

func shadowedByColumn(ms []colMarker, seq uint64, ts int64) bool {
	for _, m := range ms {
		if m.seq > seq && ts >= m.start && ts < m.end {
			return true
		}
	}
	return false
}

// filterVersions applies the ReadOptions to live versions (already in cell
// order) and returns the row's cells. Qualifiers and values are not
// copied: they alias the entries, whose bytes are never modified (see
// readRowEntries), with their capacity clipped so that a caller appending
// to one gets a copy instead of writing over its neighbour.
func filterVersions(vs []cellVersion, ro ReadOptions) []cell.Cell {
	return appendFilteredVersions(nil, vs, ro)
}

// appendFilteredVersions is filterVersions appending to cells (nil: a
// slice of its own, allocated once).
func appendFilteredVersions(cells []cell.Cell, vs []cellVersion, ro ReadOptions) []cell.Cell {
	count := 0
	for i, v := range vs {
		if i == 0 || v.key.Family != vs[i-1].key.Family || !bytes.Equal(v.key.Qualifier, vs[i-1].key.Qualifier) {
			count = 0
		}
		if !ro.wantsColumn(v.key.Family, v.key.Qualifier) || !ro.inTimeRange(v.key.Timestamp) {
			continue
		}
		if ro.MaxVersions > 0 && count >= ro.MaxVersions {
			continue
		}
		count++
		if cap(cells) == 0 {
			// Most rows keep most of their versions: one allocation.
			cells = make([]cell.Cell, 0, len(vs)-i)
		}
		q, val := v.key.Qualifier, v.value
		cells = append(cells, cell.Cell{
			Family:    v.key.Family,
			Qualifier: q[:len(q):len(q)],
			Timestamp: v.key.Timestamp,
			Value:     val[:len(val):len(val)],
		})
	}
	return cells
}

// assembleRow turns one row's sorted entries into the row a read returns;
// ok is false when no cell remains. The row's key is row itself and its
// cells alias the entries (see filterVersions): the entries' keys and
// values must be the caller's to give away, never to be modified.
func assembleRow(row []byte, entries []entry, p resolveParams, ro ReadOptions) (cell.Row, bool, error) {
	var rs resolver
	return rs.assemble(row, entries, p, ro)
}

// assemble is assembleRow with rs's buffers (the row it returns does not
// use them).
func (rs *resolver) assemble(row []byte, entries []entry, p resolveParams, ro ReadOptions) (cell.Row, bool, error) {
	vs, err := rs.resolve(entries, p)
	if err != nil {
		return cell.Row{}, false, err
	}
	var cells []cell.Cell
	if rs.slabCells {
		rs.cells = appendFilteredVersions(rs.cells[:0], vs, ro)
		cells = rs.carve(rs.cells)
	} else {
		cells = filterVersions(vs, ro)
	}
	if len(cells) == 0 {
		return cell.Row{}, false, nil
	}
	return cell.Row{Key: row[:len(row):len(row)], Cells: cells}, true, nil
}

// carve returns a copy of cells in the slab, its capacity clipped to its
// length (nil when cells is empty). A row's cells keep the whole slab
// alive with them.
func (rs *resolver) carve(cells []cell.Cell) []cell.Cell {
	n := len(cells)
	if n == 0 {
		return nil
	}
	if len(rs.slab) < n {
		rs.slab = make([]cell.Cell, max(cellSlabCells, n))
	}
	out := rs.slab[:n:n]
	copy(out, cells)
	rs.slab = rs.slab[n:]
	return out
}
