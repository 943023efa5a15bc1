// Package beamio reads Tabula tables into Apache Beam pipelines and
// writes PCollections of mutations back, with Beam's Go SDK.
//
// Read is a splittable DoFn over row-key ranges (package keyrange): its
// initial restrictions are the table's tablets (from Tabula's client,
// with sizes from SampleRowKeys), cut further to a target size, and a
// runner may split a running restriction at any row key (prism does so
// when a bundle stalls, Dataflow to balance work). Each restriction is
// read straight from the tablet server that holds it through
// storage/client's Scanner, which follows splits and moves and resumes
// after the last row on a retry; every row is claimed through the
// tracker before it is emitted, so no row is emitted twice or lost when
// the runner splits.
//
// Write applies RowMutations in batches bounded by entries and bytes,
// with the bytes in flight bounded, retries transient failures with
// backoff and sends entries that fail permanently to a dead-letter
// PCollection instead of failing the pipeline. Its per-bundle results
// let a pipeline run a step only after the writes (Wait).
//
// The element types (Row, RowMutation, FailedMutation, WriteResult) are
// plain structs registered with Beam, with compact coders of their own.
package beamio
