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
//
// # Format
//
// A log is a sequence of numbered segments. Each record is framed as
//
//	length  uint32, little-endian: payload bytes
//	crc     uint32, little-endian: masked CRC-32C (Castagnoli) of the payload
//	payload type byte, then the fields (see encoding.go)
//
// In a local directory a segment is the file <dir>/<segment:020d>.log, and
// it starts with a segment header frame that carries the format version,
// the segment number and whether the segment was started by Open (so the
// segment before it may end in a torn record) or by rolling over (so the
// segment before it is complete). In an object store each flush is one
// object <prefix>/<segment:020d>/<offset:020d>.log holding whole frames;
// offset is the logical byte offset of its first frame in the segment, so
// object names sort in log order and a missing object shows as a gap.
//
// A local segment is written with direct I/O where the file system takes
// it (O_DIRECT, Linux): whole 4 KiB blocks, so a segment being written
// ends in zero padding after its last frame, up to the block boundary.
// The padding is cut when the segment is closed; replay reads padding it
// finds (a crash) as the segment's end, not as a torn record.
//
// A position in the log is a tabletdesc.LogPosition: (segment, byte offset
// of the record's frame within the segment), in both modes. It is a value
// type of its own package because tablet states (storage/meta's METADATA
// rows, read by the client) record one as their redo point.
//
// # Torn tails
//
// A crash while a local flush is being written can leave the end of the
// segment with a partial record. Replay drops such a record when nothing
// valid follows it in its segment and the segment is the last one or was
// the last one written before a restart (the next segment was started by
// Open); anything else that fails its checksum or does not decode is
// corruption (ErrCorrupt). Objects are written atomically, so in an object
// store every bad frame is corruption.
package commitlog

import (
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Record is one logged row mutation of one tablet. Its i-th mutation carries
// sequence number FirstSeq+i.
type Record struct {
	Tablet   string
	FirstSeq uint64
	Mutation cell.RowMutation
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
	// SegmentObjects starts a new segment of an object-store log once
	// this many flushes (objects) went to the current one; default
	// DefaultSegmentObjects. It bounds the objects a recovery reads: the
	// tablet server flushes tablets whose redo point lies a few segments
	// behind the tail so that the segments can be deleted.
	SegmentObjects int
	// MaxBatchBytes bounds one group-commit flush; default 4 MiB. A record
	// larger than this is flushed alone.
	MaxBatchBytes int
	// FlushConcurrency is how many flushes (object PUTs) of an
	// object-store log may be in flight at once, 1 to
	// MaxFlushConcurrency; default 1. Each write is still acknowledged
	// only once its own object and every earlier one are stored. A local
	// directory always flushes one batch at a time (a write and an
	// fsync of one file).
	FlushConcurrency int
	// ConcurrentFlushBytes is how large a batch must be to start its flush
	// while others are in flight (FlushConcurrency above 1); a smaller one
	// waits for the flush in flight and keeps gathering records. Default
	// DefaultConcurrentFlushBytes.
	ConcurrentFlushBytes int
}

// Defaults of Options.
const (
	DefaultSegmentBytes = 64 << 20
	// DefaultSegmentObjects is the default of Options.SegmentObjects.
	DefaultSegmentObjects = 1024
	DefaultMaxBatchBytes  = 4 << 20
	// MaxRecordBytes bounds the encoded size of one record. Larger
	// records are refused (ErrRecordTooLarge); the reader treats a frame
	// claiming more as damaged, so a corrupt length never makes it
	// allocate more.
	MaxRecordBytes = 1 << 30
	// DefaultConcurrentFlushBytes is the default of
	// Options.ConcurrentFlushBytes.
	DefaultConcurrentFlushBytes = 1 << 20
	// MaxFlushConcurrency bounds Options.FlushConcurrency.
	MaxFlushConcurrency = 64
)

func (o Options) withDefaults() (Options, error) {
	if (o.Dir == "") == (o.Store == nil) {
		return o, errors.New("commitlog: exactly one of Options.Dir and Options.Store must be set")
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentObjects <= 0 {
		o.SegmentObjects = DefaultSegmentObjects
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.ConcurrentFlushBytes <= 0 {
		o.ConcurrentFlushBytes = DefaultConcurrentFlushBytes
	}
	if o.FlushConcurrency < 0 || o.FlushConcurrency > MaxFlushConcurrency {
		return o, fmt.Errorf("commitlog: Options.FlushConcurrency %d: want 1 to %d", o.FlushConcurrency, MaxFlushConcurrency)
	}
	return o, nil
}

// Errors.
var (
	// ErrCorrupt is matched (errors.Is) by every *CorruptionError.
	ErrCorrupt = errors.New("commitlog: corrupt")
	// ErrClosed is returned by Wait for a record appended after Close.
	ErrClosed = errors.New("commitlog: log closed")
	// ErrFailed is returned (wrapped together with the original error) by
	// Wait for every record appended after a flush failed: the log then
	// has a hole and must not acknowledge anything after it. The server
	// must open a new log.
	ErrFailed = errors.New("commitlog: log failed")
	// ErrRecordTooLarge is returned by Wait for a record whose encoding
	// exceeds MaxRecordBytes; it does not fail the log.
	ErrRecordTooLarge = errors.New("commitlog: record too large")
)

// CorruptionError reports log bytes that are neither valid records nor a
// torn tail. Name is the segment file or object.
type CorruptionError struct {
	Name   string
	Pos    tabletdesc.LogPosition
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("commitlog: corrupt log %s at segment %d offset %d: %s", e.Name, e.Pos.Segment, e.Pos.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// Stats count what a log has done since Open.
type Stats struct {
	// Appends is the number of records accepted by Append.
	Appends int64
	// Flushes is the number of durable flushes (fsyncs or object PUTs)
	// that completed; FlushedRecords and FlushedBytes are what they
	// carried. FlushedRecords/Flushes is the mean group-commit size.
	Flushes        int64
	FlushedRecords int64
	FlushedBytes   int64
	// FlushTime is the time the completed flushes took, each from the
	// start of its write (or PUT) to its end: FlushTime/Flushes is the
	// mean time a group commit waits for the disk or the store.
	FlushTime time.Duration
}

// ReplayResult summarises a replay.
type ReplayResult struct {
	Records int
	// TornTail is set when the log ended in a partial record, which was
	// dropped; TornAt is where it began.
	TornTail bool
	TornAt   tabletdesc.LogPosition
	// Torn lists every dropped torn tail in log order; TornAt is the last.
	// There is more than one when the server crashed more than once
	// within the replayed part of the log: each crash leaves one at the
	// end of the segment it was writing.
	Torn []tabletdesc.LogPosition
}
