package mapreduce

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// Job is what a MapReduce computes. Exactly one of Map and MapSplit is set.
// With Reducers > 0 the map side emits key/value pairs (MapContext.Emit)
// that are partitioned, combined, sorted and reduced; with Reducers == 0
// (a map-only job) it writes rows to the output itself (MapContext.Write).
type Job struct {
	// Name is the registered name (Register) that remote workers rebuild
	// the job from, with Conf; a job built by a registered builder gets
	// them from Build. Jobs run only by in-process workers may leave
	// them empty.
	Name string
	Conf []byte

	Input Input
	// Map is called with each input row, in key order within a split.
	Map func(ctx context.Context, row cell.Row, out MapContext) error
	// MapSplit, instead, is handed the whole split (a job that reads it
	// its own way, such as a script run inside the tablet servers).
	MapSplit func(ctx context.Context, split Split, out MapContext) error
	// Combine, optional, pre-reduces one key's values on the map side
	// (within a spill and again while merging spills); it must be
	// associative and emit values the reducer accepts as its input.
	Combine func(key []byte, values iter.Seq[[]byte], emit func(value []byte) error) error
	// Partition assigns a key to a reduce partition; default
	// HashPartitioner.
	Partition Partitioner
	// Reduce is called once per key, in key order within a partition, with
	// all the key's values.
	Reduce func(ctx context.Context, key []byte, values iter.Seq[[]byte], out ReduceContext) error
	// Reducers is the number of reduce tasks; 0 makes a map-only job.
	Reducers int
	// Output receives what the job writes; nil keeps only counters.
	Output Output
	// Check, optional, is called by Run before any task starts, to check
	// what the job reads or writes beyond its Input and Output (verify's
	// second table): an error fails the job having written nothing.
	Check func(ctx context.Context, clients func(addr string) (*client.Client, error)) error
	// Timestamp, when not 0, is the output timestamp, of cells written
	// with JobTimestamp (JobSpec.Timestamp); by default it is the newest
	// input cell's timestamp for a job with reducers, and the job's read
	// time for a map-only job.
	Timestamp int64
}

// Validate checks the job's shape (not its input or output, which Run
// checks against the cluster before starting any task).
func (j *Job) Validate() error {
	switch {
	case j.Input == nil:
		return errors.New("mapreduce: job has no input")
	case (j.Map == nil) == (j.MapSplit == nil):
		return errors.New("mapreduce: job needs exactly one of Map and MapSplit")
	case j.Reducers < 0:
		return fmt.Errorf("mapreduce: Reducers %d is negative", j.Reducers)
	case j.Reducers > 0 && j.Reduce == nil:
		return fmt.Errorf("mapreduce: job has %d reducers but no Reduce", j.Reducers)
	case j.Reducers == 0 && (j.Reduce != nil || j.Combine != nil):
		return errors.New("mapreduce: a map-only job (Reducers 0) has no Reduce or Combine")
	}
	return nil
}

// MapContext is what a map function writes to.
type MapContext interface {
	// Emit sends a key/value pair to the shuffle (jobs with reducers).
	// The bytes are copied: the caller may reuse them.
	Emit(key, value []byte) error
	// Write writes a row to the job's output (map-only jobs). Cells with
	// Timestamp JobTimestamp get the job's output timestamp.
	Write(row cell.Row) error
	// Count adds n to the user counter name.
	Count(name string, n int64)
	// Report sets the attempt's report (see ReduceContext.Report).
	Report(data []byte)
	// Client returns the worker's shared client of the cluster at addr
	// ("": the job's, JobSpec.Addr), for jobs that read their split their
	// own way (MapSplit). It must not be closed.
	Client(addr string) (*client.Client, error)
	// Task is the attempt being run (its job spec, split, IDs).
	Task() Task
}

// ReduceContext is what a reduce function writes to.
type ReduceContext interface {
	// Write writes a row to the job's output. Cells with Timestamp
	// JobTimestamp get the job's output timestamp (JobSpec.Timestamp).
	Write(row cell.Row) error
	// Count adds n to the user counter name.
	Count(name string, n int64)
	// Report sets the attempt's report: a small result (at most
	// MaxReportBytes) that the committed attempt hands back to the caller
	// of Run (Result.Reports) — a script's merged aggregates, the first
	// rows a comparison found different. The last call wins.
	Report(data []byte)
	// Task is the attempt being run.
	Task() Task
}

// MaxReportBytes bounds an attempt's report.
const MaxReportBytes = 16 << 20

// JobTimestamp, as a written cell's timestamp, stands for the job's
// output timestamp (JobSpec.Timestamp): fixed per run, so that a
// re-executed task writes identical cells.
const JobTimestamp int64 = -2

// Input is where a job reads: *TableInput or *FileInput.
type Input interface{ input() }

// TableInput reads rows of a table, one map task per tablet (sub-split at
// sampled keys when larger than SplitBytes). Filters run inside the tablet
// servers; only what passes crosses the network.
type TableInput struct {
	// Addr is the cluster to read (default: JobSpec.Addr).
	Addr  string
	Table string
	// Start, End bound the rows to [Start, End); Prefix, instead, selects
	// the rows starting with it.
	Start, End, Prefix []byte
	// Families keeps only these column families; MaxVersions only the
	// newest versions of each column (0: all).
	Families    []string
	MaxVersions int
	// StartTime, EndTime keep cells with timestamps in [StartTime,
	// EndTime) µs (EndTime 0: up to the job's read time).
	StartTime, EndTime int64
	// Filter is a Bigtable RowFilter applied (in the servers) after the
	// options above.
	Filter *bigtablepb.RowFilter
	// Script, when not empty, is the source of a filter script (one that
	// emits to keep) run inside the servers: only rows it keeps are mapped.
	Script string
	// SplitBytes sub-splits tablets larger than this at sampled keys;
	// default 256 MiB.
	SplitBytes int64
	// NoReadTime reads cells newer than the job's start too
	// (no consistent view).
	NoReadTime bool
}

func (*TableInput) input() {}

// ScanOptions returns what a map task of this input scans: the rows of
// the task's split with the input's families, versions, time range
// (bounded by the job's read time) and filter. Jobs that read their split
// themselves (MapSplit) use it to read what a Map would be given.
func (in *TableInput) ScanOptions(t Task) client.ScanOptions {
	opts := scanOptions(in, t.Job.ReadTime)
	if t.Split != nil {
		opts.Start, opts.End = t.Split.Start, t.Split.End
	}
	return opts
}

// FileInput reads the row files a previous job wrote (package rowfile),
// one map task per file.
type FileInput struct {
	// URL is a directory or s3://bucket/prefix holding the files and
	// their manifest.
	URL string
	// Prefix names the shard set, PREFIX-SSSSS-of-NNNNN.parquet|jsonl.
	// Empty: "part" (what a job's file output writes) when such a set is
	// there, else the one set the location holds, whatever its prefix
	// (tabula export names its files after the table).
	Prefix string
}

func (*FileInput) input() {}

// Output is where a job writes: *TableOutput or *FileOutput.
type Output interface{ output() }

// TableOutput writes rows as batched mutations (client.ApplyBulk). Each
// cell is written with its own timestamp (copytable, import keep the
// source's), or the job's output timestamp when it is JobTimestamp: a
// re-executed task rewrites identical cells.
type TableOutput struct {
	// Addr is the cluster to write (default: JobSpec.Addr).
	Addr  string
	Table string
}

func (*TableOutput) output() {}

// FileOutput writes rows as files (package rowfile), each attempt under
// a temporary name, committed at the end of the job by rename and a
// manifest; a job that fails leaves no part of its output in place.
type FileOutput struct {
	// URL is a local directory or s3://bucket/prefix.
	URL string
	// Format is "jsonl" or "parquet".
	Format string
}

func (*FileOutput) output() {}
