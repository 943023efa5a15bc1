package commitlog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// objectLog writes each flush as one object. Objects are atomic, so there
// is no segment header and no torn record: segment seg is the set of
// objects <prefix>/<seg:020d>/<offset:020d>.log, or
// <prefix>/<seg:020d>/<offset:020d>-<watermark:020d>.log for an object
// whose PUT started while earlier objects of the segment were still in
// flight (Options.FlushConcurrency above 1): watermark is the offset up to
// which the segment was stored when the PUT started, below offset. An
// object without one was started once everything before it was stored
// (its watermark is its offset).
//
// # Several PUTs in flight, and what a crash leaves
//
// With several flushes in flight, a crash (or a failed PUT) can leave a
// segment whose objects do not tile it: objects 1, 2 and 4 stored, 3 lost.
// Nothing at or after the first gap was acknowledged — a flush is
// acknowledged only once its own object and every earlier one are stored
// (Log.acknowledge) — so recovery ends the segment at the gap and drops
// the objects after it, as a torn tail (tileSegment). That never skips or
// reorders an acknowledged record:
//   - Every acknowledged record lies before the gap: its object and all
//     earlier ones were stored when it was acknowledged, and stored objects
//     are never deleted except by Truncate, which deletes whole segments
//     below every tablet's redo point, last object first (a prefix
//     remains).
//   - Nothing after the gap is replayed, and the decision depends on the
//     listing alone, so every later recovery (and SortSegment, and
//     ReplaySorted's extents) makes the same one: records dropped once are
//     dropped always, even after a new run of the server reused their
//     sequence numbers in a later segment.
//   - A gap cannot be followed by a later segment of the same run: the
//     flusher starts no PUT of segment s+1 until every PUT of segment s
//     succeeded (Log.flushPipelined drains at rollover), and after a failed
//     PUT it starts none at all. A later segment is therefore a later run,
//     which began from the state recovered without the dropped records.
//   - A tablet's redo point may lie past a gap (the log's tail at a freeze
//     includes other tablets' records not yet stored), but its own records
//     before it are in its SSTables: it saved the redo point only once its
//     last record before the freeze was acknowledged, which puts all of
//     them before the gap. Replay from such a point reads nothing of the
//     segment, as it did before objects could be in flight together.
//
// The watermark tells a torn tail from a lost object: every object after a
// gap must have been started before the object of the gap was stored
// (watermark at or below the gap). An object started after the gap's
// offset had been stored proves the store lost an object it had accepted:
// that is corruption, never silently dropped.
type objectLog struct {
	store  blob.Store
	prefix string // "" or ending in "/"
}

// logPrefix normalises Options.Prefix to "" or "<prefix>/".
func logPrefix(prefix string) string {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return ""
	}
	return prefix + "/"
}

// objectName names the object of the flush at off of segment seg, started
// once everything before it was stored.
func objectName(prefix string, seg uint64, off int64) string {
	return objectNameAt(prefix, seg, off, off)
}

// objectNameAt names the object of the flush at off of segment seg, started
// when the segment was stored up to watermark (≤ off).
func objectNameAt(prefix string, seg uint64, off, watermark int64) string {
	if watermark >= off {
		return fmt.Sprintf("%s%020d/%020d.log", prefix, seg, off)
	}
	return fmt.Sprintf("%s%020d/%020d-%020d.log", prefix, seg, off, watermark)
}

// logObject is one flush object found by listing.
type logObject struct {
	name      string
	seg       uint64
	off       int64
	watermark int64 // see objectLog; off when the name has none
	size      int64
}

// tileSegment checks the objects of one segment (in offset order) and
// returns those recovery reads: the ones that tile the segment from offset
// 0, and end, the offset where they stop. When a gap follows them, it is
// the torn tail of a crash or failed flush with several PUTs in flight
// (see objectLog), torn is set and the objects after it are left out; if
// any of those was started after the gap's offset was stored, an object
// was lost and tileSegment returns a *CorruptionError.
func tileSegment(objs []logObject) (kept []logObject, end int64, torn bool, err error) {
	for i, o := range objs {
		if o.off != end {
			for _, later := range objs[i:] {
				if later.watermark > end {
					return nil, 0, false, corrupt(later.name, tabletdesc.LogPosition{Segment: o.seg, Offset: end},
						"log objects missing between offsets %d and %d (%s was started after offset %d was stored)", end, o.off, later.name, later.watermark)
				}
			}
			return objs[:i], end, true, nil
		}
		end = o.off + o.size
	}
	return objs, end, false, nil
}

// listObjects returns the log objects under prefix in log order. Names that
// are not log objects are ignored.
func listObjects(ctx context.Context, store blob.Store, prefix string) ([]logObject, error) {
	attrs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("commitlog: listing %q: %w", prefix, err)
	}
	var objs []logObject
	for _, a := range attrs {
		if o, ok := parseObjectName(prefix, a); ok {
			objs = append(objs, o)
		}
	}
	// Zero-padded names already sort in log order; sorting by number
	// keeps that true whatever order a Store lists in.
	slices.SortFunc(objs, func(a, b logObject) int {
		return tabletdesc.LogPosition{Segment: a.seg, Offset: a.off}.Compare(tabletdesc.LogPosition{Segment: b.seg, Offset: b.off})
	})
	return objs, nil
}

// listSegmentObjects returns the objects of segment seg of the log under
// prefix, in log order. It lists only that segment's names.
func listSegmentObjects(ctx context.Context, store blob.Store, prefix string, seg uint64) ([]logObject, error) {
	segPrefix := prefix + segmentName(seg) + "/"
	attrs, err := store.List(ctx, segPrefix)
	if err != nil {
		return nil, fmt.Errorf("commitlog: listing %q: %w", segPrefix, err)
	}
	var objs []logObject
	for _, a := range attrs {
		if o, ok := parseObjectName(prefix, a); ok && o.seg == seg {
			objs = append(objs, o)
		}
	}
	slices.SortFunc(objs, func(a, b logObject) int { return cmp.Compare(a.off, b.off) })
	return objs, nil
}

// parseObjectName recognises a log object of the log under prefix.
func parseObjectName(prefix string, a blob.Attrs) (logObject, bool) {
	rest := strings.TrimPrefix(a.Name, prefix)
	segStr, offStr, ok := strings.Cut(rest, "/")
	if !ok || len(segStr) != 20 {
		return logObject{}, false
	}
	offStr, ok = strings.CutSuffix(offStr, ".log")
	if !ok {
		return logObject{}, false
	}
	offStr, wmStr, hasWM := strings.Cut(offStr, "-")
	if len(offStr) != 20 || (hasWM && len(wmStr) != 20) {
		return logObject{}, false
	}
	seg, err1 := strconv.ParseUint(segStr, 10, 64)
	off, err2 := strconv.ParseInt(offStr, 10, 64)
	if err1 != nil || err2 != nil {
		return logObject{}, false
	}
	wm := off
	if hasWM {
		var err error
		if wm, err = strconv.ParseInt(wmStr, 10, 64); err != nil || wm > off || wm < 0 {
			return logObject{}, false
		}
	}
	return logObject{name: a.Name, seg: seg, off: off, watermark: wm, size: a.Size}, true
}

// openObject starts a new segment after every existing one. Objects are
// atomic, so unlike a local file no old segment can end torn; a new segment
// still keeps the logs of successive runs of a server apart.
func openObject(ctx context.Context, store blob.Store, prefix string) (*objectLog, uint64, error) {
	prefix = logPrefix(prefix)
	objs, err := listObjects(ctx, store, prefix)
	if err != nil {
		return nil, 0, err
	}
	seg := uint64(1)
	if len(objs) > 0 {
		seg = objs[len(objs)-1].seg + 1
	}
	return &objectLog{store: store, prefix: prefix}, seg, nil
}

func (o *objectLog) firstOffset(uint64) int64 { return 0 }

func (o *objectLog) rollover(uint64) error { return nil }

// Retries of a log object's write after the Store's own retries gave up:
// an object store restarting or paused for a few seconds must not fail
// the log (a failed log stops its tablet server). Put of a whole object
// under a fixed name is idempotent, so a retry after an ambiguous failure
// is safe; writes wait meanwhile, and are acknowledged only if the
// server's lease is still valid afterwards (tabletserver fences acks).
var (
	objectFlushRetryFor = 8 * time.Second
	objectFlushBackoff  = 100 * time.Millisecond
)

func (o *objectLog) flush(b *batch) error {
	name := objectNameAt(o.prefix, b.seg, b.off, b.watermark)
	deadline := time.Now().Add(objectFlushRetryFor)
	wait := objectFlushBackoff
	for {
		err := o.store.Put(context.Background(), name, b.buf)
		if err == nil {
			return nil
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("commitlog: writing %s: %w", name, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

func (o *objectLog) truncate(ctx context.Context, before uint64) error {
	objs, err := listObjects(ctx, o.store, o.prefix)
	if err != nil {
		return err
	}
	// Delete each segment's objects last to first, so a crash midway
	// leaves a prefix of the segment: still a valid (if partial) log.
	end := 0
	for end < len(objs) && objs[end].seg < before {
		end++
	}
	for i := end - 1; i >= 0; i-- {
		if err := o.store.Delete(ctx, objs[i].name); err != nil && !blob.IsNotExist(err) {
			return fmt.Errorf("commitlog: truncating: %w", err)
		}
	}
	return nil
}

func (o *objectLog) close() error { return nil }
