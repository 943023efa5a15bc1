package commitlog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// objectLog writes each flush as one object. Objects are atomic, so there
// is no segment header and no torn tail: segment seg is the set of objects
// <prefix>/<seg:020d>/<offset:020d>.log.
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

func objectName(prefix string, seg uint64, off int64) string {
	return fmt.Sprintf("%s%020d/%020d.log", prefix, seg, off)
}

// logObject is one flush object found by listing.
type logObject struct {
	name string
	seg  uint64
	off  int64
	size int64
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
	if !ok || len(offStr) != 20 {
		return logObject{}, false
	}
	seg, err1 := strconv.ParseUint(segStr, 10, 64)
	off, err2 := strconv.ParseInt(offStr, 10, 64)
	if err1 != nil || err2 != nil {
		return logObject{}, false
	}
	return logObject{name: a.Name, seg: seg, off: off, size: a.Size}, true
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

func (o *objectLog) flush(b *batch) error {
	// No deadline here: the Store applies its own timeouts and retries,
	// and a flush that gives up must fail the log anyway.
	name := objectName(o.prefix, b.seg, b.off)
	if err := o.store.Put(context.Background(), name, b.buf); err != nil {
		return fmt.Errorf("commitlog: writing %s: %w", name, err)
	}
	return nil
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
