// Package commitlog is the tablet server's redo log: one log per server,
// shared by all its tablets, as in the Bigtable paper. Writers append
// records; concurrent appends share one flush (group commit), and an append
// is acknowledged only once its flush is durable — fsync of the segment file
// on a local directory, one completed object PUT per flush on an object
// store.
//
// Records are checksummed. Replay reads from a position forward; a torn
// final record (a crash in the middle of a flush) is dropped and reported,
// while a corrupt record before the end is an error. Segments are deleted by
// Truncate once no tablet's redo point needs them.
package commitlog

import (
	"context"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
)

// Record is one logged row mutation of one tablet. Its i-th mutation carries
// sequence number FirstSeq+i.
type Record struct {
	Tablet   string
	FirstSeq uint64
	Mutation cell.RowMutation
}

// Position is a place in a server's log, totally ordered by (Segment,
// Offset). The zero Position is before every record.
type Position struct {
	Segment uint64
	Offset  int64
}

// Compare returns -1, 0 or +1 as p is before, at or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Segment < q.Segment:
		return -1
	case p.Segment > q.Segment:
		return 1
	case p.Offset < q.Offset:
		return -1
	case p.Offset > q.Offset:
		return 1
	}
	return 0
}

// Options configure a log. Exactly one of Dir and Store is set.
type Options struct {
	// Dir is a local directory: segments are files appended to and
	// fsynced.
	Dir string
	// Store and Prefix place the log in an object store: each flush is one
	// object under Prefix.
	Store  blob.Store
	Prefix string
	// SegmentBytes starts a new segment past this size; default 64 MiB.
	SegmentBytes int64
	// MaxBatchBytes bounds one group-commit flush; default 4 MiB.
	MaxBatchBytes int
}

// Log is an open commit log, safe for concurrent use.
type Log struct{}

// Open opens the log for appending. Appends go to a new segment after every
// existing one, so earlier records are never overwritten.
func Open(ctx context.Context, opts Options) (*Log, error) { panic("unimplemented") }

// Commit is the handle of one appended record.
type Commit struct {
	// Pos is where the record was appended.
	Pos Position
}

// Wait blocks until the record is durable or its flush failed.
func (c *Commit) Wait(ctx context.Context) error { panic("unimplemented") }

// Append enqueues rec for the next group-commit flush and returns at once;
// Wait on the returned Commit acknowledges it. Records appended earlier are
// flushed no later than records appended after them.
func (l *Log) Append(rec Record) *Commit { panic("unimplemented") }

// Write appends rec and waits until it is durable.
func (l *Log) Write(ctx context.Context, rec Record) (Position, error) {
	c := l.Append(rec)
	return c.Pos, c.Wait(ctx)
}

// Tail returns the position the next appended record will get.
func (l *Log) Tail() Position { panic("unimplemented") }

// Truncate deletes every segment that lies wholly before pos (the smallest
// redo point of the tablets using the log).
func (l *Log) Truncate(ctx context.Context, pos Position) error { panic("unimplemented") }

// Close flushes what is pending and closes the log.
func (l *Log) Close() error { panic("unimplemented") }

// ReplayResult summarises a replay.
type ReplayResult struct {
	Records int
	// TornTail is set when the log ended in a partial record, which was
	// dropped; TornAt is where it began.
	TornTail bool
	TornAt   Position
}

// Replay calls fn for every record at or after from, in log order, reading
// the log described by opts (which may belong to a dead server). It stops at
// the first error fn returns.
func Replay(ctx context.Context, opts Options, from Position, fn func(Position, Record) error) (ReplayResult, error) {
	panic("unimplemented")
}
