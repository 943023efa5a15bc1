package beamio

import (
	"fmt"
	"reflect"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/cell"
)

// Row is one row read from a table: its key and the cells the read kept,
// ordered by family, qualifier, then timestamp descending (newest
// first) — every version unless a filter limited them. It converts to
// and from cell.Row: cell.Row(r), Row(cr).
type Row struct {
	Key   []byte
	Cells []cell.Cell
}

// RowMutation is an atomic set of mutations to one row, what Write
// applies; it converts to and from cell.RowMutation. A SetCell with
// cell.ServerTimestamp gets the server's time, and is applied again if
// a retry or a re-run bundle sends it twice: give cells explicit
// timestamps for exactly-once results.
type RowMutation struct {
	Row       []byte
	Mutations []cell.Mutation
}

// FailedMutation is a mutation that Write could not apply for a reason a
// retry cannot fix (an unknown family, a key over the limit, a missing
// table, …): the dead-letter output.
type FailedMutation struct {
	Mutation RowMutation
	// Code is the gRPC status code of the failure (codes.Code).
	Code uint32
	// Message is the status message, naming the field and the limit.
	Message string
}

func (f FailedMutation) String() string {
	return fmt.Sprintf("row %q: %v: %s", f.Mutation.Row, codes.Code(f.Code), f.Message)
}

// WriteResult summarizes what one bundle of Write applied, in the
// results output: one per bundle.
type WriteResult struct {
	Table string
	// Written entries (row mutations) applied; Failed sent to the dead
	// letters; Bytes the approximate size of the written ones.
	Written, Failed, Bytes int64
	// Requests is the ApplyBulk calls made, Retries how many of them
	// re-sent entries after transient failures.
	Requests, Retries int64
	// Elapsed is the bundle's time from its first write to its last
	// answer.
	Elapsed time.Duration
}

func init() {
	// The coders' functions, registered so that the SDK calls them
	// through generated callers rather than reflect.Value.Call (it
	// encodes a sample of every PCollection's elements to measure them,
	// and every element that crosses a stage boundary).
	register.Function1x1(encodeRow)
	register.Function1x2(decodeRow)
	register.Function1x1(encodeRowMutation)
	register.Function1x2(decodeRowMutation)
	register.Function1x1(encodeFailed)
	register.Function1x2(decodeFailed)
	beam.RegisterType(reflect.TypeOf((*cell.Cell)(nil)).Elem())
	beam.RegisterType(reflect.TypeOf((*cell.Mutation)(nil)).Elem())
	beam.RegisterCoder(reflect.TypeOf((*Row)(nil)).Elem(), encodeRow, decodeRow)
	beam.RegisterCoder(reflect.TypeOf((*RowMutation)(nil)).Elem(), encodeRowMutation, decodeRowMutation)
	beam.RegisterCoder(reflect.TypeOf((*FailedMutation)(nil)).Elem(), encodeFailed, decodeFailed)
	beam.RegisterType(reflect.TypeOf((*WriteResult)(nil)).Elem())
}
