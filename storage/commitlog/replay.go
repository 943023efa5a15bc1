package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Replay calls fn for every record at or after from, in log order, reading
// the log described by opts (which may belong to a dead server; Replay does
// not write). It stops at the first error fn returns and returns it as is.
//
// Segments before from.Segment are not read; in from's segment reading
// starts at from.Offset, which must be a record boundary (a Commit's Pos or
// a Tail). The Record passed to fn is fn's to keep. A missing directory is
// an empty log.
//
// A torn tail (see the package documentation) is dropped and reported in
// the result; corruption is an error matching ErrCorrupt that names the
// segment file or object and the position. Records before the damage have
// been passed to fn when the error is returned.
func Replay(ctx context.Context, opts Options, from tabletdesc.LogPosition, fn func(tabletdesc.LogPosition, Record) error) (ReplayResult, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return ReplayResult{}, err
	}
	r := replayer{ctx: ctx, from: from, fn: fn}
	if opts.Dir != "" {
		err = r.local(opts.Dir)
	} else {
		err = r.objects(opts.Store, logPrefix(opts.Prefix))
	}
	return r.res, err
}

type replayer struct {
	ctx  context.Context
	from tabletdesc.LogPosition
	fn   func(tabletdesc.LogPosition, Record) error
	res  ReplayResult
}

// emit decodes payload (already checksummed) and hands it to fn. A payload
// that does not decode is returned as a damage reason.
func (r *replayer) emit(pos tabletdesc.LogPosition, payload []byte) (reason string, err error) {
	if payload[0] != typeRecord {
		return "unexpected segment header", nil
	}
	// One copy per record, which the decoded slices alias, so fn may keep
	// the record while the read buffer is reused.
	rec, derr := decodeRecord(bytes.Clone(payload))
	if derr != nil {
		return "undecodable record", nil
	}
	r.res.Records++
	if r.res.Records%64 == 0 {
		if err := r.ctx.Err(); err != nil {
			return "", err
		}
	}
	return "", r.fn(pos, rec)
}

// tiledPrefix is the objects of one segment before its first gap: what
// replay still delivers before it reports the gap as corruption.
func tiledPrefix(objs []logObject) []logObject {
	var end int64
	for i, o := range objs {
		if o.off != end {
			return objs[:i]
		}
		end = o.off + o.size
	}
	return objs
}

func (r *replayer) torn(pos tabletdesc.LogPosition) {
	r.res.TornTail = true
	r.res.TornAt = pos
	r.res.Torn = append(r.res.Torn, pos)
}

func corrupt(name string, pos tabletdesc.LogPosition, format string, args ...any) error {
	return &CorruptionError{Name: name, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

// local replays the segment files of dir.
func (r *replayer) local(dir string) error {
	segs, err := listSegmentFiles(dir)
	if err != nil {
		return err
	}
	for len(segs) > 0 && segs[0] < r.from.Segment {
		segs = segs[1:]
	}
	for i, seg := range segs {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		start := int64(0)
		if seg == r.from.Segment {
			start = r.from.Offset
		}
		path := filepath.Join(dir, segmentFileName(seg))
		tornAt, reason, err := r.localSegment(path, seg, start)
		if err != nil {
			return err
		}
		if tornAt < 0 {
			continue
		}
		pos := tabletdesc.LogPosition{Segment: seg, Offset: tornAt}
		if i+1 < len(segs) {
			// A tear is the end of a run of the server: only then
			// did Open start the next segment. A segment the log
			// rolled over from was complete.
			opened, err := segmentOpened(dir, segs[i+1])
			if err != nil {
				return err
			}
			if !opened {
				return corrupt(path, pos, "%s, and the log continues in segment %d", reason, segs[i+1])
			}
		}
		r.torn(pos)
	}
	return nil
}

// localSegment replays one segment file from offset start. It returns the
// offset of a torn tail (-1 if none) and its reason.
func (r *replayer) localSegment(path string, seg uint64, start int64) (tornAt int64, reason string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return -1, "", fmt.Errorf("commitlog: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return -1, "", fmt.Errorf("commitlog: %w", err)
	}
	s := &segReader{r: f, size: fi.Size()}
	for off := start; off < s.size; {
		pos := tabletdesc.LogPosition{Segment: seg, Offset: off}
		payload, next, reason, err := s.frame(off)
		if err != nil {
			return -1, "", fmt.Errorf("commitlog: reading %s: %w", path, err)
		}
		if reason == "" {
			if off == 0 {
				reason = checkSegmentHeader(payload, seg)
			} else {
				reason, err = r.emit(pos, payload)
				if err != nil {
					return -1, "", err
				}
			}
		}
		if reason != "" {
			pad, err := s.isPadding(off)
			if err != nil {
				return -1, "", fmt.Errorf("commitlog: reading %s: %w", path, err)
			}
			if pad {
				return -1, "", nil
			}
			// Damage is a torn tail only if nothing valid
			// follows it: a crash can cut the last flush short,
			// but cannot damage a record and leave good ones
			// after it.
			valid, err := s.validFrameAfter(off + 1)
			if err != nil {
				return -1, "", fmt.Errorf("commitlog: reading %s: %w", path, err)
			}
			if valid >= 0 {
				return -1, "", corrupt(path, pos, "%s, followed by a valid record at offset %d", reason, valid)
			}
			return off, reason, nil
		}
		off = next
	}
	return -1, "", nil
}

// checkSegmentHeader returns why payload is not the header of segment seg,
// or "".
func checkSegmentHeader(payload []byte, seg uint64) string {
	h, err := decodeSegmentHeader(payload)
	switch {
	case err != nil:
		return "bad segment header"
	case h.seg != seg:
		return fmt.Sprintf("segment header names segment %d", h.seg)
	}
	return ""
}

// segmentOpened reports whether segment seg was started by Open. An empty
// file (a crash while creating it) counts as opened: no record in it was
// acknowledged, and creating it was the last thing its run did.
func segmentOpened(dir string, seg uint64) (bool, error) {
	path := filepath.Join(dir, segmentFileName(seg))
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("commitlog: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("commitlog: %w", err)
	}
	if fi.Size() == 0 {
		return true, nil
	}
	s := &segReader{r: f, size: fi.Size()}
	payload, _, reason, err := s.frame(0)
	if err != nil {
		return false, fmt.Errorf("commitlog: reading %s: %w", path, err)
	}
	if reason == "" {
		reason = checkSegmentHeader(payload, seg)
	}
	if reason != "" {
		return false, corrupt(path, tabletdesc.LogPosition{Segment: seg, Offset: 0}, "%s", reason)
	}
	h, _ := decodeSegmentHeader(payload)
	return h.flags&segOpened != 0, nil
}

// objects replays the log objects under prefix.
func (r *replayer) objects(store blob.Store, prefix string) error {
	objs, err := listObjects(r.ctx, store, prefix)
	if err != nil {
		return err
	}
	// Plan from the listing: the objects to read, segment by segment, and
	// the first corruption (a gap that is no torn tail: see tileSegment),
	// reported once the records before it are replayed.
	var plan []logObject
	var gap error
	for len(objs) > 0 && gap == nil {
		n := 1
		for n < len(objs) && objs[n].seg == objs[0].seg {
			n++
		}
		segObjs := objs[:n]
		objs = objs[n:]
		seg := segObjs[0].seg
		if seg < r.from.Segment {
			continue
		}
		kept, end, torn, err := tileSegment(segObjs)
		if err != nil {
			gap = err
			kept, end, torn = tiledPrefix(segObjs), 0, false
		}
		if torn {
			r.torn(tabletdesc.LogPosition{Segment: seg, Offset: end})
		}
		for _, o := range kept {
			if o.seg == r.from.Segment && o.off+o.size <= r.from.Offset {
				continue
			}
			plan = append(plan, o)
		}
	}

	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	next := prefetch(ctx, store, plan)
	for _, o := range plan {
		data, err := next()
		if err != nil {
			return fmt.Errorf("commitlog: reading %s: %w", o.name, err)
		}
		switch {
		case len(data) == 0:
			return corrupt(o.name, tabletdesc.LogPosition{Segment: o.seg, Offset: o.off}, "empty log object")
		case int64(len(data)) != o.size:
			return corrupt(o.name, tabletdesc.LogPosition{Segment: o.seg, Offset: o.off}, "object is %d bytes, listed as %d", len(data), o.size)
		}
		if err := r.object(o, data); err != nil {
			return err
		}
	}
	return gap
}

// replayPrefetch is how many log objects replay fetches ahead. Each flush
// is one small object, so reading them one GET at a time would make
// recovery from an object store latency-bound. A variable only for
// BenchmarkS3ReplayPrefetch.
var replayPrefetch = 8

// prefetch starts fetching objs, at most replayPrefetch ahead of the
// consumer, and returns a function that yields their contents in order.
// Cancelling ctx stops it.
func prefetch(ctx context.Context, store blob.Store, objs []logObject) func() ([]byte, error) {
	return fetchAhead(ctx, len(objs), replayPrefetch, func(ctx context.Context, i int) ([]byte, error) {
		return store.Get(ctx, objs[i].name)
	})
}

// fetchAhead runs fetch(ctx, i) for i in [0, n), at most ahead of them
// started and not yet consumed, and returns a function that yields their
// results in order of i; it must be called at most n times. Cancelling ctx
// stops starting more.
func fetchAhead[T any](ctx context.Context, n, ahead int, fetch func(context.Context, int) (T, error)) func() (T, error) {
	type fetched struct {
		v   T
		err error
	}
	results := make([]chan fetched, n)
	for i := range results {
		results[i] = make(chan fetched, 1) // fetchers never block
	}
	slots := make(chan struct{}, ahead)
	go func() {
		for i := range n {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				v, err := fetch(ctx, i)
				results[i] <- fetched{v, err}
			}()
		}
	}()
	i := 0
	return func() (T, error) {
		f := <-results[i]
		<-slots
		i++
		return f.v, f.err
	}
}

// object replays the frames of one log object. Objects are written whole,
// so any damage is corruption.
func (r *replayer) object(o logObject, data []byte) error {
	s := &segReader{mem: data, size: int64(len(data))}
	for off := int64(0); off < s.size; {
		pos := tabletdesc.LogPosition{Segment: o.seg, Offset: o.off + off}
		payload, next, reason, err := s.frame(off)
		if err != nil {
			return err
		}
		if reason == "" && pos.Compare(r.from) >= 0 {
			reason, err = r.emit(pos, payload)
			if err != nil {
				return err
			}
		}
		if reason != "" {
			return corrupt(o.name, pos, "%s", reason)
		}
		off = next
	}
	return nil
}

// segReader reads frames of one segment file or object. Reads of a file go
// through a window buffer, so a segment costs a few large reads, not two
// small ones per record.
type segReader struct {
	r      io.ReaderAt
	mem    []byte // whole segment in memory, instead of r
	size   int64
	buf    []byte
	bufOff int64
	// maxPayload bounds a frame's payload; zero means MaxRecordBytes.
	// Sorted copies wrap records in slightly larger payloads.
	maxPayload int64
}

const readWindow = 1 << 20

// at returns the n bytes at off, valid until the next call. The caller
// ensures off+n <= size, so a damaged length can never make it allocate
// more than the data there is.
func (s *segReader) at(off int64, n int) ([]byte, error) {
	if s.mem != nil {
		return s.mem[off : off+int64(n)], nil
	}
	if off >= s.bufOff && off+int64(n) <= s.bufOff+int64(len(s.buf)) {
		return s.buf[off-s.bufOff:][:n], nil
	}
	want := int(min(max(int64(n), readWindow), s.size-off))
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:want]
	m, err := s.r.ReadAt(s.buf, off)
	if m < want {
		s.buf = s.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		return nil, err
	}
	s.bufOff = off
	return s.buf[:n], nil
}

// header returns the payload length and stored checksum of the frame at
// off, or why there is no plausible frame there.
func (s *segReader) header(off int64) (n int, crc uint32, reason string, err error) {
	if s.size-off < frameHeaderLen {
		return 0, 0, "partial frame header", nil
	}
	h, err := s.at(off, frameHeaderLen)
	if err != nil {
		return 0, 0, "", err
	}
	length := binary.LittleEndian.Uint32(h)
	crc = binary.LittleEndian.Uint32(h[4:])
	limit := s.maxPayload
	if limit == 0 {
		limit = MaxRecordBytes
	}
	switch left := s.size - off - frameHeaderLen; {
	case length == 0:
		return 0, 0, "empty frame", nil
	case int64(length) > limit:
		return 0, 0, fmt.Sprintf("frame length %d over the limit", length), nil
	case int64(length) > left:
		return 0, 0, fmt.Sprintf("frame length %d runs past the end (%d bytes left)", length, left), nil
	}
	return int(length), crc, "", nil
}

// frame reads the frame at off and verifies its checksum. A damaged frame
// gives a reason; err is for I/O errors only.
func (s *segReader) frame(off int64) (payload []byte, next int64, reason string, err error) {
	n, crc, reason, err := s.header(off)
	if err != nil || reason != "" {
		return nil, 0, reason, err
	}
	payload, err = s.at(off+frameHeaderLen, n)
	if err != nil {
		return nil, 0, "", err
	}
	if payloadCRC(payload) != crc {
		return nil, 0, "checksum mismatch", nil
	}
	return payload, off + frameHeaderLen + int64(n), "", nil
}

// isPadding reports whether the bytes from off to the end are the zero
// padding a direct write leaves after the last frame (see localLog): all
// zero, fewer than a block, up to a block boundary. A segment ends there
// as cleanly as at the end of its file.
func (s *segReader) isPadding(off int64) (bool, error) {
	n := s.size - off
	if s.size%directBlock != 0 || n <= 0 || n >= directBlock {
		return false, nil
	}
	b, err := s.at(off, int(n))
	if err != nil {
		return false, err
	}
	for _, c := range b {
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

// validFrameAfter returns the offset of the first valid frame (checksum and
// decoding both good) that starts at or after off, or -1.
func (s *segReader) validFrameAfter(off int64) (int64, error) {
	for ; s.size-off >= frameHeaderLen; off++ {
		n, crc, reason, err := s.header(off)
		if err != nil {
			return -1, err
		}
		if reason != "" {
			continue
		}
		payload, err := s.at(off+frameHeaderLen, n)
		if err != nil {
			return -1, err
		}
		// Decoding fails within a few bytes on garbage, while a
		// checksum reads the whole claimed length: check it first.
		if validPayload(payload) && payloadCRC(payload) == crc {
			return off, nil
		}
	}
	return -1, nil
}
