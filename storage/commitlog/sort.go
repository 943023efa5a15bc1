package commitlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// This file is the paper's refinement of recovery (§6, "Commit-log
// implementation"): when many tablets of a dead server are recovered, its
// log is sorted once, segment by segment (segments can be sorted in
// parallel, on different servers), and each recovering tablet then reads
// only its own records instead of the whole log.
//
// # Sorted segment format
//
// Segment seg of a log is sorted into the one object
// <SortedLog.Prefix>/<seg:020d>.sorted, written with a single Put so that
// a half-written sort is never read. It holds one section per tablet with
// records in the segment, tablets in byte order, each section holding the
// tablet's records in log order; then an index frame and a trailer:
//
//	section(tablet 1) … section(tablet n) | index frame | trailer
//
// Every record is a frame in the log's framing (length, masked CRC-32C,
// payload) whose payload is
//
//	typeSortedRecord byte
//	uvarint  offset of the record's frame in the segment
//	         the record's log payload, verbatim (encoding.go)
//
// so each record keeps its original Position: a tablet's redo point and
// flushed sequence filter a sorted replay exactly as they filter a replay
// of the log. The index frame's payload is
//
//	typeSortIndex byte, sortFormatVersion byte
//	uvarint  segment number
//	uvarint  source bytes: the segment's size in the log when it was sorted
//	uvarint  records in the object
//	uvarint  number of sections, then per section:
//	         uvarint-length tablet name
//	         uvarint offset and uvarint length of the section in the object
//	         uvarint records in the section
//	         uvarint offset in the segment of the section's last record
//
// Sections tile the object from offset 0 to the index frame. The trailer
// is 16 bytes: the index frame's offset (uint64, little-endian), then the
// magic "tblsort1". A recovering tablet reads the object's tail (trailer
// and index), then its own section: two ranged reads per segment, one when
// the object is small.
//
// Sorting within a tablet keeps log order, which is the tablet's sequence
// order (the paper sorts by ⟨tablet, sequence⟩): a sorted replay delivers
// exactly the records, positions and order of a replay of the log
// filtered to the tablet.

// Payload types of a sorted segment (see encoding.go for the log's).
const (
	typeSortedRecord = 3
	typeSortIndex    = 4
)

// sortFormatVersion is the version of the sorted segment format.
const sortFormatVersion = 1

const (
	sortedMagic            = "tblsort1"
	sortedTrailerLen int64 = 8 + int64(len(sortedMagic))
	// sortedRecordOverhead bounds what a sorted record's payload adds to
	// the log payload it wraps: the type byte and the offset.
	sortedRecordOverhead = 1 + binary.MaxVarintLen64
	// sortedTailRead is how much of a sorted object's end a reader fetches
	// at once: the trailer, the index and, in a small object, the
	// sections too.
	sortedTailRead = 16 << 10
)

// SortedLog locates the sorted copy of an object-store log: segment seg of
// the log is sorted into the object <Prefix>/<seg:020d>.sorted of Store.
type SortedLog struct {
	Store  blob.Store
	Prefix string
}

// ErrNotSorted is matched (errors.Is) by the errors of ReplaySorted that
// say the sorted copy does not cover the log: a segment of the log whose
// sorted object is missing, or whose sorted object was made from a
// different number of bytes than the log's segment now holds. Sorting the
// log again repairs it.
var ErrNotSorted = errors.New("commitlog: sorted copy does not cover the log")

// SortStats describe one sorted segment.
type SortStats struct {
	Segment uint64
	// Records and Tablets are what the segment holds.
	Records int
	Tablets int
	// SourceBytes is the segment's size in the log; SortedBytes the size
	// of its sorted object.
	SourceBytes int64
	SortedBytes int64
}

// sortedObjectName is the name of segment seg's sorted object under prefix
// ("" or ending in "/").
func sortedObjectName(prefix string, seg uint64) string {
	return prefix + segmentName(seg) + ".sorted"
}

// objectSource returns the store and normalised prefix of an object-store
// log; logs in a local directory are not sorted.
func objectSource(log Options) (blob.Store, string, error) {
	if log.Store == nil || log.Dir != "" {
		return nil, "", errors.New("commitlog: only a log in an object store (Options.Store) is sorted")
	}
	return log.Store, logPrefix(log.Prefix), nil
}

// Segments returns the numbers of the segments of the object-store log
// described by log, in ascending order: the units SortSegment sorts.
func Segments(ctx context.Context, log Options) ([]uint64, error) {
	store, prefix, err := objectSource(log)
	if err != nil {
		return nil, err
	}
	objs, err := listObjects(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	var segs []uint64
	for _, o := range objs {
		if len(segs) == 0 || segs[len(segs)-1] != o.seg {
			segs = append(segs, o.seg)
		}
	}
	return segs, nil
}

// Sort sorts every segment of the log into dst, one after the other. A
// cluster spreads the segments over several servers instead (SortSegment).
func Sort(ctx context.Context, log Options, dst SortedLog) ([]SortStats, error) {
	segs, err := Segments(ctx, log)
	if err != nil {
		return nil, err
	}
	stats := make([]SortStats, 0, len(segs))
	for _, seg := range segs {
		st, err := SortSegment(ctx, log, seg, dst)
		if err != nil {
			return stats, err
		}
		stats = append(stats, st)
	}
	return stats, nil
}

// sortEntry is one record of the segment being sorted.
type sortEntry struct {
	tablet  string
	off     int64  // of its frame in the segment
	payload []byte // its log payload, aliasing the segment's data
}

// sortedSection is the index entry of one tablet's section.
type sortedSection struct {
	tablet  string
	off     int64 // of the section in the sorted object
	length  int64
	records int
	lastOff int64 // offset in the segment of the section's last record
}

// sortedIndex is a sorted object's index.
type sortedIndex struct {
	seg      uint64
	source   int64 // the segment's size in the log
	records  int
	sections []sortedSection
}

// SortSegment sorts segment seg of the object-store log described by log
// (which should be a dead server's: records appended after the sort are
// not in its copy, and ReplaySorted then refuses the copy) into its object
// of dst, replacing any earlier sort of it; the format is described at the
// top of sort.go. The segment is read and sorted in memory: segments are
// at most Options.SegmentBytes (plus one record).
//
// Corruption of the segment — a damaged frame, an undecodable record, a
// gap between its objects — fails the sort with an error matching
// ErrCorrupt: a sort never drops records. A segment with no objects is an
// error matching blob.ErrNotExist. Sorting is deterministic, so sorting
// a segment again (a retry, a second master) writes the same object.
func SortSegment(ctx context.Context, log Options, seg uint64, dst SortedLog) (SortStats, error) {
	stats := SortStats{Segment: seg}
	store, prefix, err := objectSource(log)
	if err != nil {
		return stats, err
	}
	if dst.Store == nil {
		return stats, errors.New("commitlog: SortSegment needs SortedLog.Store")
	}
	entries, source, err := readSegment(ctx, store, prefix, seg)
	if err != nil {
		return stats, err
	}
	// Stable: a tablet's records keep their log order.
	slices.SortStableFunc(entries, func(a, b sortEntry) int { return strings.Compare(a.tablet, b.tablet) })

	// Each record gains a type byte and its offset (at most 5 bytes in a
	// segment under 4 GiB).
	buf := make([]byte, 0, source+int64(len(entries))*6+4096)
	idx := sortedIndex{seg: seg, source: source, records: len(entries)}
	for i, e := range entries {
		if i == 0 || e.tablet != entries[i-1].tablet {
			idx.sections = append(idx.sections, sortedSection{tablet: e.tablet, off: int64(len(buf))})
		}
		buf = appendFrame(buf, func(b []byte) []byte {
			b = append(b, typeSortedRecord)
			b = binary.AppendUvarint(b, uint64(e.off))
			return append(b, e.payload...)
		})
		sec := &idx.sections[len(idx.sections)-1]
		sec.length = int64(len(buf)) - sec.off
		sec.records++
		sec.lastOff = e.off
	}
	indexOff := len(buf)
	buf = appendFrame(buf, func(b []byte) []byte { return appendSortIndex(b, &idx) })
	buf = binary.LittleEndian.AppendUint64(buf, uint64(indexOff))
	buf = append(buf, sortedMagic...)

	name := sortedObjectName(logPrefix(dst.Prefix), seg)
	if err := dst.Store.Put(ctx, name, buf); err != nil {
		return stats, fmt.Errorf("commitlog: writing %s: %w", name, err)
	}
	stats.Records = len(entries)
	stats.Tablets = len(idx.sections)
	stats.SourceBytes = source
	stats.SortedBytes = int64(len(buf))
	return stats, nil
}

// readSegment reads and checks every record of segment seg of the log
// under prefix, in log order, and returns them with the segment's size.
func readSegment(ctx context.Context, store blob.Store, prefix string, seg uint64) ([]sortEntry, int64, error) {
	objs, err := listSegmentObjects(ctx, store, prefix, seg)
	if err != nil {
		return nil, 0, err
	}
	if len(objs) == 0 {
		return nil, 0, fmt.Errorf("commitlog: segment %d of log %q has no objects: %w", seg, prefix, blob.ErrNotExist)
	}
	// A torn tail (several flushes were in flight at a crash) ends the
	// segment where Replay ends it.
	objs, size, _, err := tileSegment(objs)
	if err != nil {
		return nil, 0, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := prefetch(ctx, store, objs)
	var entries []sortEntry
	for _, o := range objs {
		data, err := next()
		if err != nil {
			return nil, 0, fmt.Errorf("commitlog: reading %s: %w", o.name, err)
		}
		switch {
		case len(data) == 0:
			return nil, 0, corrupt(o.name, tabletdesc.LogPosition{Segment: seg, Offset: o.off}, "empty log object")
		case int64(len(data)) != o.size:
			return nil, 0, corrupt(o.name, tabletdesc.LogPosition{Segment: seg, Offset: o.off}, "object is %d bytes, listed as %d", len(data), o.size)
		}
		s := &segReader{mem: data, size: int64(len(data))}
		for off := int64(0); off < s.size; {
			pos := tabletdesc.LogPosition{Segment: seg, Offset: o.off + off}
			payload, next, reason, err := s.frame(off)
			if err != nil {
				return nil, 0, err
			}
			if reason == "" {
				if payload[0] != typeRecord {
					reason = "unexpected segment header"
				} else if rec, err := decodeRecord(payload); err != nil {
					reason = "undecodable record"
				} else {
					entries = append(entries, sortEntry{tablet: rec.Tablet, off: pos.Offset, payload: payload})
				}
			}
			if reason != "" {
				return nil, 0, corrupt(o.name, pos, "%s", reason)
			}
			off = next
		}
	}
	return entries, size, nil
}

func appendSortIndex(b []byte, idx *sortedIndex) []byte {
	b = append(b, typeSortIndex, sortFormatVersion)
	b = binary.AppendUvarint(b, idx.seg)
	b = binary.AppendUvarint(b, uint64(idx.source))
	b = binary.AppendUvarint(b, uint64(idx.records))
	b = binary.AppendUvarint(b, uint64(len(idx.sections)))
	for _, s := range idx.sections {
		b = appendString(b, s.tablet)
		b = binary.AppendUvarint(b, uint64(s.off))
		b = binary.AppendUvarint(b, uint64(s.length))
		b = binary.AppendUvarint(b, uint64(s.records))
		b = binary.AppendUvarint(b, uint64(s.lastOff))
	}
	return b
}

// decodeSortIndex decodes an index payload found at indexOff and checks
// that it describes a well-formed object: sections in tablet order, each
// non-empty, tiling [0, indexOff). It returns why not, or "".
func decodeSortIndex(p []byte, indexOff int64) (sortedIndex, string) {
	d := decoder{b: p, ok: true}
	var idx sortedIndex
	if d.byte() != typeSortIndex {
		return idx, "not an index"
	}
	if v := d.byte(); v != sortFormatVersion {
		return idx, fmt.Sprintf("unknown format version %d", v)
	}
	idx.seg = d.uvarint()
	source := d.uvarint()
	records := d.uvarint()
	n := d.uvarint()
	// A section takes at least 5 bytes: a count beyond that is a lie,
	// and must not size an allocation.
	if !d.ok || source > math.MaxInt64 || n > uint64(len(d.b)/5) || records > uint64(indexOff) {
		return idx, "malformed index"
	}
	idx.source, idx.records = int64(source), int(records)
	idx.sections = make([]sortedSection, n)
	end, total := int64(0), 0
	for i := range idx.sections {
		s := &idx.sections[i]
		s.tablet = string(d.bytes())
		off, length, recs, last := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
		switch {
		case !d.ok:
			return idx, "malformed index"
		case i > 0 && s.tablet <= idx.sections[i-1].tablet:
			return idx, "sections out of tablet order"
		case off != uint64(end) || length == 0 || length > uint64(indexOff-end):
			return idx, fmt.Sprintf("section %d at [%d, +%d) does not follow the one before (ends at %d, index at %d)", i, off, length, end, indexOff)
		case recs == 0 || recs > length/frameHeaderLen || last >= source:
			return idx, fmt.Sprintf("section %d: implausible record count %d or last offset %d", i, recs, last)
		}
		s.off, s.length, s.records, s.lastOff = int64(off), int64(length), int(recs), int64(last)
		end += s.length
		total += s.records
	}
	switch {
	case !d.ok || len(d.b) != 0:
		return idx, "malformed index"
	case end != indexOff:
		return idx, fmt.Sprintf("sections end at %d, the index is at %d", end, indexOff)
	case total != idx.records:
		return idx, fmt.Sprintf("sections hold %d records, the index says %d", total, idx.records)
	}
	return idx, ""
}

// ReplaySorted calls fn for every record of tablet at or after from, in log
// order, reading the sorted copy of the object-store log described by log
// (every segment at or after from.Segment sorted by SortSegment into
// sorted) instead of the log itself. It delivers what Replay of the log
// would deliver for that tablet, with the same positions and in the same
// order. It stops at the first error fn returns and returns it as is; the
// Record passed to fn is fn's to keep. ReplayResult.Records counts the
// records passed to fn; there are no torn tails in an object store.
//
// The log is listed (not read) to learn its segments and their sizes:
// a segment at or after from.Segment without a sorted object, or whose
// sorted object was made from a different size of segment (records
// appended after the sort), is an error matching ErrNotSorted, never
// silently skipped. Damage in a sorted object is an error matching
// ErrCorrupt naming the object; its Pos is then (segment, offset in the
// sorted object). Records before the error have been passed to fn.
func ReplaySorted(ctx context.Context, log Options, sorted SortedLog, tablet string, from tabletdesc.LogPosition, fn func(tabletdesc.LogPosition, Record) error) (ReplayResult, error) {
	var res ReplayResult
	store, prefix, err := objectSource(log)
	if err != nil {
		return res, err
	}
	if sorted.Store == nil {
		return res, errors.New("commitlog: ReplaySorted needs SortedLog.Store")
	}
	objs, err := listObjects(ctx, store, prefix)
	if err != nil {
		return res, err
	}
	segs, err := segmentExtents(objs, from.Segment)
	if err != nil {
		return res, err
	}

	sortedPrefix := logPrefix(sorted.Prefix)
	fetchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := fetchAhead(fetchCtx, len(segs), replayPrefetch, func(ctx context.Context, i int) ([]posRecord, error) {
		return readSortedTablet(ctx, sorted.Store, sortedObjectName(sortedPrefix, segs[i].seg), segs[i], tablet, from)
	})
	for range segs {
		recs, err := next()
		if err != nil {
			return res, err
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		for _, r := range recs {
			res.Records++
			if err := fn(r.pos, r.rec); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// segExtent is one segment of a log and its size, from a listing.
type segExtent struct {
	seg  uint64
	size int64
}

// segmentExtents returns the segments numbered from or higher among objs
// (a listing in log order) with their sizes, as Replay and SortSegment
// see them: a segment ends at a torn tail, and a gap that is no torn tail
// is corruption (tileSegment).
func segmentExtents(objs []logObject, from uint64) ([]segExtent, error) {
	var segs []segExtent
	for len(objs) > 0 {
		n := 1
		for n < len(objs) && objs[n].seg == objs[0].seg {
			n++
		}
		segObjs := objs[:n]
		objs = objs[n:]
		if segObjs[0].seg < from {
			continue
		}
		_, end, _, err := tileSegment(segObjs)
		if err != nil {
			return nil, err
		}
		segs = append(segs, segExtent{seg: segObjs[0].seg, size: end})
	}
	return segs, nil
}

// posRecord is a record and its position in the log.
type posRecord struct {
	pos tabletdesc.LogPosition
	rec Record
}

// readSortedTablet reads tablet's records at or after from out of the
// sorted object name of segment seg.
func readSortedTablet(ctx context.Context, store blob.Store, name string, seg segExtent, tablet string, from tabletdesc.LogPosition) ([]posRecord, error) {
	obj, err := store.Open(ctx, name)
	if blob.IsNotExist(err) {
		return nil, fmt.Errorf("%w: segment %d has no sorted object %s", ErrNotSorted, seg.seg, name)
	}
	if err != nil {
		return nil, fmt.Errorf("commitlog: opening %s: %w", name, err)
	}
	defer obj.Close()
	idx, tail, tailOff, err := readSortedIndex(obj, name, seg.seg)
	if err != nil {
		return nil, err
	}
	if idx.source != seg.size {
		return nil, fmt.Errorf("%w: %s was sorted from %d bytes of segment %d, which now has %d", ErrNotSorted, name, idx.source, seg.seg, seg.size)
	}
	i, found := slices.BinarySearchFunc(idx.sections, tablet, func(s sortedSection, t string) int { return strings.Compare(s.tablet, t) })
	if !found {
		return nil, nil
	}
	sec := idx.sections[i]
	if seg.seg == from.Segment && sec.lastOff < from.Offset {
		return nil, nil // all before the redo point
	}
	var data []byte
	if sec.off >= tailOff {
		data = tail[sec.off-tailOff:][:sec.length]
	} else if data, err = readAt(obj, sec.off, sec.length); err != nil {
		return nil, fmt.Errorf("commitlog: reading %s: %w", name, err)
	}
	return decodeSection(name, seg, sec, data, from)
}

// readSortedIndex reads and checks the trailer and index of a sorted
// object. It returns the index and the object's tail as read (tail holds
// the bytes from tailOff to the end), which may hold sections too.
func readSortedIndex(obj blob.Object, name string, seg uint64) (idx sortedIndex, tail []byte, tailOff int64, err error) {
	size := obj.Size()
	bad := func(off int64, format string, args ...any) error {
		return corrupt(name, tabletdesc.LogPosition{Segment: seg, Offset: off}, "sorted object: "+format, args...)
	}
	if size < sortedTrailerLen+frameHeaderLen {
		return idx, nil, 0, bad(0, "%d bytes, too short", size)
	}
	tailOff = max(0, size-sortedTailRead)
	if tail, err = readAt(obj, tailOff, size-tailOff); err != nil {
		return idx, nil, 0, fmt.Errorf("commitlog: reading %s: %w", name, err)
	}
	trailer := tail[int64(len(tail))-sortedTrailerLen:]
	if string(trailer[8:]) != sortedMagic {
		return idx, nil, 0, bad(size-sortedTrailerLen, "bad magic number")
	}
	indexEnd := size - sortedTrailerLen
	indexOff := binary.LittleEndian.Uint64(trailer)
	if indexOff > uint64(indexEnd-frameHeaderLen) {
		return idx, nil, 0, bad(size-sortedTrailerLen, "index offset %d out of range", indexOff)
	}
	var frame []byte
	if off := int64(indexOff); off >= tailOff {
		frame = tail[off-tailOff : indexEnd-tailOff]
	} else if frame, err = readAt(obj, off, indexEnd-off); err != nil {
		return idx, nil, 0, fmt.Errorf("commitlog: reading %s: %w", name, err)
	}
	s := &segReader{mem: frame, size: int64(len(frame)), maxPayload: int64(len(frame))}
	payload, next, reason, err := s.frame(0)
	switch {
	case err != nil:
		return idx, nil, 0, err
	case reason != "":
		return idx, nil, 0, bad(int64(indexOff), "index: %s", reason)
	case next != int64(len(frame)):
		return idx, nil, 0, bad(int64(indexOff), "index frame ends at %d, the trailer is at %d", int64(indexOff)+next, indexEnd)
	}
	idx, reason = decodeSortIndex(payload, int64(indexOff))
	switch {
	case reason != "":
		return idx, nil, 0, bad(int64(indexOff), "index: %s", reason)
	case idx.seg != seg:
		return idx, nil, 0, bad(int64(indexOff), "index names segment %d", idx.seg)
	}
	return idx, tail, tailOff, nil
}

// decodeSection decodes a tablet's section of the sorted object name and
// returns its records at or after from. The records alias data.
func decodeSection(name string, seg segExtent, sec sortedSection, data []byte, from tabletdesc.LogPosition) ([]posRecord, error) {
	s := &segReader{mem: data, size: int64(len(data)), maxPayload: MaxRecordBytes + sortedRecordOverhead}
	var out []posRecord
	n, prev := 0, int64(-1)
	for off := int64(0); off < s.size; {
		payload, next, reason, err := s.frame(off)
		if err != nil {
			return nil, err
		}
		var r posRecord
		if reason == "" {
			r, reason = decodeSortedRecord(payload, seg.seg)
		}
		switch {
		case reason != "":
		case r.rec.Tablet != sec.tablet:
			reason = fmt.Sprintf("record of tablet %q in the section of %q", r.rec.Tablet, sec.tablet)
		case r.pos.Offset <= prev || r.pos.Offset >= seg.size:
			reason = fmt.Sprintf("record offset %d out of order or past the segment", r.pos.Offset)
		}
		if reason != "" {
			return nil, corrupt(name, tabletdesc.LogPosition{Segment: seg.seg, Offset: sec.off + off}, "sorted object: %s", reason)
		}
		n, prev = n+1, r.pos.Offset
		if r.pos.Compare(from) >= 0 {
			out = append(out, r)
		}
		off = next
	}
	if n != sec.records || prev != sec.lastOff {
		return nil, corrupt(name, tabletdesc.LogPosition{Segment: seg.seg, Offset: sec.off}, "sorted object: section of %q holds %d records ending at %d, the index says %d ending at %d",
			sec.tablet, n, prev, sec.records, sec.lastOff)
	}
	return out, nil
}

// decodeSortedRecord decodes a sorted record payload of segment seg.
func decodeSortedRecord(p []byte, seg uint64) (posRecord, string) {
	d := decoder{b: p, ok: true}
	typ := d.byte()
	off := d.uvarint()
	if !d.ok || typ != typeSortedRecord || off > math.MaxInt64 {
		return posRecord{}, "not a sorted record"
	}
	rec, err := decodeRecord(d.b)
	if err != nil {
		return posRecord{}, "undecodable record"
	}
	return posRecord{pos: tabletdesc.LogPosition{Segment: seg, Offset: int64(off)}, rec: rec}, ""
}

// readAt reads n bytes at off of obj.
func readAt(obj blob.Object, off, n int64) ([]byte, error) {
	buf := make([]byte, n)
	m, err := obj.ReadAt(buf, off)
	if int64(m) == n {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, err
}
