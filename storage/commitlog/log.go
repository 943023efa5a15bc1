package commitlog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Log is an open commit log, safe for concurrent use.
//
// Appenders encode their record in their own goroutine, then, under the
// mutex, take its Position and copy its frame into the open batch at the end
// of the queue. A single flusher goroutine pops one batch at a time and
// makes it durable with one write and one fsync (or one PUT); while it does,
// new appends collect in the next batch. That is the group commit: the
// longer a flush takes, the more records the next one carries.
type Log struct {
	opts    Options
	backend backend

	mu   sync.Mutex
	cond *sync.Cond // signalled when a batch is queued or the log closes
	seg  uint64     // segment of the next record
	off  int64      // offset of the next record in seg
	// segObjects counts the flushes of seg taken by the flusher: past
	// Options.SegmentObjects the next records go to a new segment.
	segObjects int
	queue      []*batch // batches not yet taken by the flusher, in log order
	free       [][]byte // batch buffers to reuse
	closing    bool
	failed     error  // first flush error; sticky
	liveSeg    uint64 // lowest segment still being written: Truncate keeps it
	stats      Stats
	// inFlight are the batches whose flush started and that are not yet
	// acknowledged, in log order (flushPipelined only).
	inFlight []*batch

	flusherDone chan struct{}
	failedCh    chan struct{} // closed when failed is set
	closeErr    error
	closeOnce   sync.Once

	// beforeFlush, when set (by tests, before the first Append), runs in
	// the flusher before each flush: it lets tests hold a flush to make
	// group commit deterministic.
	beforeFlush func()
}

// batch is the unit of one flush: consecutive frames of one segment.
type batch struct {
	seg     uint64
	off     int64 // offset of the first frame in seg
	buf     []byte
	records int
	done    chan struct{} // closed when the flush finished
	err     error         // set before done is closed

	// With several flushes in flight (flushPipelined): watermark is the
	// offset up to which seg was stored when this flush started (see
	// objectLog), and putErr, set before putDone is closed, is this
	// flush's own outcome, before the outcomes of earlier ones are taken
	// into account.
	watermark int64
	putDone   chan struct{}
	putErr    error
	// took is how long the flush itself took (set before done or
	// putDone is closed).
	took time.Duration
}

// backend makes batches durable: a local directory or an object store.
type backend interface {
	// firstOffset is where the first record of a new segment goes.
	firstOffset(seg uint64) int64
	// rollover prepares seg for writing (after the previous segment,
	// whose flushes all succeeded).
	rollover(seg uint64) error
	// flush makes b durable.
	flush(b *batch) error
	// truncate deletes every segment numbered below before.
	truncate(ctx context.Context, before uint64) error
	// close releases what the backend holds once the flusher stopped.
	close() error
}

// Open opens the log for appending. Appends go to a new segment after every
// existing one, so earlier records are never overwritten.
func Open(ctx context.Context, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var be backend
	var seg uint64
	if opts.Dir != "" {
		be, seg, err = openLocal(opts.Dir)
	} else {
		be, seg, err = openObject(ctx, opts.Store, opts.Prefix)
	}
	if err != nil {
		return nil, err
	}
	l := &Log{
		opts:        opts,
		backend:     be,
		seg:         seg,
		off:         be.firstOffset(seg),
		liveSeg:     seg,
		flusherDone: make(chan struct{}),
		failedCh:    make(chan struct{}),
	}
	l.cond = sync.NewCond(&l.mu)
	if opts.Store != nil && opts.FlushConcurrency > 1 {
		go l.flushPipelined(opts.FlushConcurrency)
	} else {
		go l.flusher()
	}
	return l, nil
}

// Commit is the handle of one appended record.
type Commit struct {
	// Pos is where the record was appended. It is meaningful only when
	// Wait returns nil.
	Pos tabletdesc.LogPosition
	b   *batch
}

// Wait blocks until the record is durable or its flush failed. It returns
// nil only once the flush holding the record (and every earlier one) is
// durable. If ctx ends first it returns ctx's error; the record may still
// become durable later.
func (c *Commit) Wait(ctx context.Context) error {
	select {
	case <-c.b.done:
		return c.b.err
	default:
	}
	select {
	case <-c.b.done:
		return c.b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failedCommit is a Commit whose Wait returns err at once.
func failedCommit(err error) *Commit {
	b := &batch{done: make(chan struct{}), err: err}
	close(b.done)
	return &Commit{b: b}
}

// Append enqueues rec for the next group-commit flush and returns at once;
// Wait on the returned Commit acknowledges it. Records appended earlier are
// flushed no later than records appended after them, and get smaller
// Positions. rec is encoded before Append returns, so the caller may reuse
// its buffers.
//
// A record appended after Close, after a failed flush (ErrFailed) or too
// large to log (ErrRecordTooLarge) gets a Commit whose Wait returns that
// error.
func (l *Log) Append(rec Record) *Commit {
	bp := framePool.Get().(*[]byte)
	frame := appendRecordFrame((*bp)[:0], &rec)
	defer func() {
		*bp = frame
		if cap(frame) <= maxPooledFrame {
			framePool.Put(bp)
		}
	}()
	if len(frame)-frameHeaderLen > MaxRecordBytes {
		return failedCommit(fmt.Errorf("%w: %d bytes encoded, limit %d", ErrRecordTooLarge, len(frame)-frameHeaderLen, MaxRecordBytes))
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := l.batchFor(len(frame))
	if err != nil {
		return failedCommit(err)
	}
	pos := l.tailLocked()
	b.buf = append(b.buf, frame...)
	l.appendedLocked(b, len(frame))
	return &Commit{Pos: pos, b: b}
}

// batchFor returns the open batch a frame of frameLen bytes goes into,
// starting one if the last is taken, full or of an earlier segment; or the
// error an append gets after Close or a failed flush. l.mu held.
func (l *Log) batchFor(frameLen int) (*batch, error) {
	if l.closing {
		return nil, ErrClosed
	}
	if l.failed != nil {
		return nil, fmt.Errorf("%w: an earlier flush failed: %w", ErrFailed, l.failed)
	}
	if n := len(l.queue); n > 0 {
		b := l.queue[n-1]
		if b.seg == l.seg && len(b.buf)+frameLen <= l.opts.MaxBatchBytes {
			return b, nil
		}
	}
	b := &batch{seg: l.seg, off: l.off, watermark: l.off, done: make(chan struct{})}
	if n := len(l.free); n > 0 {
		b.buf, l.free = l.free[n-1], l.free[:n-1]
	}
	l.queue = append(l.queue, b)
	l.cond.Signal()
	return b, nil
}

// tailLocked is the position of the next record; l.mu held.
func (l *Log) tailLocked() tabletdesc.LogPosition {
	return tabletdesc.LogPosition{Segment: l.seg, Offset: l.off}
}

// appendedLocked accounts for a frame of frameLen bytes just appended to
// b: the tail moves past it, to a new segment past SegmentBytes. l.mu held.
func (l *Log) appendedLocked(b *batch, frameLen int) {
	b.records++
	if n := len(b.buf); n >= l.opts.ConcurrentFlushBytes && n-frameLen < l.opts.ConcurrentFlushBytes {
		l.cond.Signal() // large enough to flush beside the ones in flight
	}
	l.off += int64(frameLen)
	if l.off >= l.opts.SegmentBytes {
		l.seg++
		l.off = l.backend.firstOffset(l.seg)
		l.segObjects = 0
	}
	l.stats.Appends++
}

// countObjectLocked counts b, taken by the flusher, as an object of its
// segment, and once the segment has Options.SegmentObjects of them sends
// the next records to a new one. l.mu held. Only an object-store log
// counts: each flush there is an object, which recovery reads with a GET of
// its own, so a server taking a trickle of writes would otherwise gather
// tens of thousands of tiny objects in one 64 MiB segment — all read at a
// crash — while Host.TruncateLog, which bounds the log by whole segments
// behind the tail, would never see the tail move on.
func (l *Log) countObjectLocked(b *batch) {
	if l.opts.Store == nil || b.seg != l.seg {
		return
	}
	l.segObjects++
	if l.segObjects >= l.opts.SegmentObjects {
		l.seg++
		l.off = l.backend.firstOffset(l.seg)
		l.segObjects = 0
	}
}

// framePool holds encoding buffers for Append, so that encoding outside the
// lock does not allocate per record.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledFrame keeps one huge record from pinning its buffer in the pool.
const maxPooledFrame = 1 << 20

// Write appends rec and waits until it is durable.
func (l *Log) Write(ctx context.Context, rec Record) (tabletdesc.LogPosition, error) {
	c := l.Append(rec)
	return c.Pos, c.Wait(ctx)
}

// Failed is closed when a flush has failed: the log accepts nothing more
// (every Append fails with ErrFailed), so its owner should stop serving
// — a tablet server stops, and the master recovers its tablets from
// what the log made durable — rather than answer errors forever.
func (l *Log) Failed() <-chan struct{} { return l.failedCh }

// Tail returns the position the next appended record will get.
func (l *Log) Tail() tabletdesc.LogPosition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return tabletdesc.LogPosition{Segment: l.seg, Offset: l.off}
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Truncate deletes every segment that lies wholly before pos (the smallest
// redo point of the tablets using the log): the segments numbered below
// pos.Segment, except the segment being written and any after it. It may
// run concurrently with appends. A crash during Truncate leaves some of
// those segments, or in an object store a prefix of one of them; a later
// Truncate deletes them.
func (l *Log) Truncate(ctx context.Context, pos tabletdesc.LogPosition) error {
	l.mu.Lock()
	before := min(pos.Segment, l.liveSeg)
	l.mu.Unlock()
	return l.backend.truncate(ctx, before)
}

// Close flushes what is pending, stops the flusher and closes the log.
// Appends after Close fail with ErrClosed. Close returns the error of the
// first failed flush, if any, or of releasing the segment; calling it again
// returns the same.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closing = true
		l.cond.Signal()
		l.mu.Unlock()
		<-l.flusherDone
		err := l.backend.close()
		l.mu.Lock()
		if l.failed != nil {
			err = l.failed
		}
		l.mu.Unlock()
		l.closeErr = err
	})
	return l.closeErr
}

// flusher makes the queued batches durable, one at a time and in order.
func (l *Log) flusher() {
	defer close(l.flusherDone)
	curSeg := l.liveSeg
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.closing {
			l.cond.Wait()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			return
		}
		b := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.liveSeg = b.seg
		failed := l.failed
		l.countObjectLocked(b)
		l.mu.Unlock()

		var err error
		switch {
		case failed != nil:
			err = fmt.Errorf("%w: an earlier flush failed: %w", ErrFailed, failed)
		case b.seg != curSeg:
			err = l.backend.rollover(b.seg)
			curSeg = b.seg
		}
		if err == nil {
			if l.beforeFlush != nil {
				l.beforeFlush()
			}
			start := time.Now()
			err = l.backend.flush(b)
			b.took = time.Since(start)
		}

		l.mu.Lock()
		if err != nil && l.failed == nil {
			l.failed = err
			close(l.failedCh)
		}
		if err == nil {
			l.countFlushLocked(b)
		}
		if cap(b.buf) <= 2*l.opts.MaxBatchBytes && len(l.free) < 4 {
			l.free = append(l.free, b.buf[:0])
		}
		b.buf = nil
		l.mu.Unlock()
		b.err = err
		close(b.done)
	}
}

// flushPipelined is the flusher of an object-store log with up to k
// flushes (PUTs) in flight: it starts the flush of each queued batch, in
// log order, as soon as fewer than k are unacknowledged, while acknowledge
// completes them in the same order. A batch is acknowledged only once its
// own PUT and every earlier one succeeded; after a failed PUT, later
// batches fail with ErrFailed even if their own PUT succeeded, and no new
// PUT starts. Before the first flush of a new segment every flush of the
// previous one must have been acknowledged (a gap never precedes a later
// segment of the same run: see objectLog for why recovery needs that).
func (l *Log) flushPipelined(k int) {
	defer close(l.flusherDone)
	slots := make(chan struct{}, k) // one per unacknowledged flush
	order := make(chan *batch, k)   // started flushes, in log order
	acked := make(chan struct{})    // acknowledge has returned
	go l.acknowledge(order, slots, acked)
	drain := func() {
		for range k {
			slots <- struct{}{}
		}
		for range k {
			<-slots
		}
	}
	curSeg := l.liveSeg
	for {
		l.mu.Lock()
		for !l.closing && !l.readyToFlush() {
			l.cond.Wait()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			break
		}
		b := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.countObjectLocked(b)
		l.mu.Unlock()

		var rollErr error
		if b.seg != curSeg {
			drain()
			curSeg = b.seg
			rollErr = l.backend.rollover(b.seg)
		}
		slots <- struct{}{}
		b.putDone = make(chan struct{})
		l.mu.Lock()
		l.liveSeg = b.seg
		b.watermark = b.off
		if len(l.inFlight) > 0 {
			b.watermark = l.inFlight[0].off
		}
		l.inFlight = append(l.inFlight, b)
		failed := l.failed
		l.mu.Unlock()
		order <- b
		if rollErr != nil {
			b.putErr = rollErr
			close(b.putDone)
			continue
		}
		if failed != nil {
			b.putErr = fmt.Errorf("%w: an earlier flush failed: %w", ErrFailed, failed)
			close(b.putDone)
			continue
		}
		if l.beforeFlush != nil {
			l.beforeFlush()
		}
		go func() {
			start := time.Now()
			b.putErr = l.backend.flush(b)
			b.took = time.Since(start)
			close(b.putDone)
		}()
	}
	close(order)
	<-acked
}

// readyToFlush reports whether flushPipelined should start the flush of
// the queue's first batch now (l.mu held): at once when nothing is in
// flight or the batch is closed (a later one exists); otherwise only once
// it holds ConcurrentFlushBytes. Small batches thus wait for the flush in
// flight and gather company, as with one flush at a time — a PUT costs
// the store about as much for a few records as for many — while a stream
// of large batches (bulk writes) overlaps its PUTs.
func (l *Log) readyToFlush() bool {
	switch {
	case len(l.queue) == 0:
		return false
	case len(l.inFlight) == 0 || len(l.queue) > 1:
		return true
	}
	return len(l.queue[0].buf) >= l.opts.ConcurrentFlushBytes
}

// acknowledge completes the batches flushPipelined started, in log order,
// each once its own flush is done; see flushPipelined.
func (l *Log) acknowledge(order <-chan *batch, slots <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for b := range order {
		<-b.putDone
		err := b.putErr
		l.mu.Lock()
		if err == nil && l.failed != nil {
			// Stored, but after a hole: not acknowledged.
			err = fmt.Errorf("%w: an earlier flush failed: %w", ErrFailed, l.failed)
		}
		if err != nil && l.failed == nil {
			l.failed = err
			close(l.failedCh)
		}
		if err == nil {
			l.countFlushLocked(b)
		}
		l.inFlight[0] = nil
		l.inFlight = l.inFlight[1:]
		l.cond.Signal() // the batch waiting for company may go now
		if cap(b.buf) <= 2*l.opts.MaxBatchBytes && len(l.free) < 4+cap(slots) {
			l.free = append(l.free, b.buf[:0])
		}
		b.buf = nil
		l.mu.Unlock()
		b.err = err
		close(b.done)
		<-slots
	}
}

// countFlushLocked adds the completed flush of b to the stats; l.mu held.
func (l *Log) countFlushLocked(b *batch) {
	l.stats.Flushes++
	l.stats.FlushedRecords += int64(b.records)
	l.stats.FlushedBytes += int64(len(b.buf))
	l.stats.FlushTime += b.took
}

// segmentName is the file name (local) or object path element of a segment.
func segmentName(seg uint64) string { return fmt.Sprintf("%020d", seg) }
