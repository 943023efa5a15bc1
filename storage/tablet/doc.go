// Package tablet is one Bigtable tablet: a contiguous row range of a table
// served from one memtable (plus, while a minor compaction runs, the frozen
// memtable being flushed) and one stack of SSTables per locality group, with
// a commit log for durability — sections 5.3, 5.4 and 6 of the Bigtable
// paper.
//
// # Writes
//
// Apply validates a row mutation, and under the tablet's write mutex assigns
// one sequence number per mutation, appends the record to the commit log and
// inserts the mutation's entries (cell.Key encoded) into the memtable. It
// then waits for the log's group commit and publishes the mutation: readers
// read at a snapshot sequence number, the highest published one, so a row
// mutation becomes visible whole and only once it is durable.
//
// # Reads
//
// A read merges the memtables and the SSTables of the locality groups that
// hold the requested families, clipped to the tablet's row range (a split's
// children share their parent's files). Per row, delete markers shadow the
// older entries of their scope, duplicate timestamps collapse to the newest
// write, the family's garbage-collection policy is applied, then the
// ReadOptions filter (families and columns, time range, versions per
// column). See assembleRow in assemble.go for the exact rules.
//
// # Compactions
//
// A minor compaction (Flush) freezes the memtable, writes one SSTable per
// locality group, persists the new State (file lists and redo point) through
// the StateStore and installs the files; writes go on into a fresh memtable.
// A merging compaction bounds the number of SSTables of a group; a major
// compaction rewrites every SSTable of every group into one per group,
// dropping delete markers, shadowed data and what the GC policies collect.
// The background's merges collect too: one of all a group's files as a
// major does, one of its newest files keeping their markers for the older
// ones (autoMergeLocked); neither applies GC to a row with a delete marker
// in the memtable, which they do not read.
// Readers hold a reference to the version (memtables and file lists) they
// started on, so compactions never disturb them.
//
// # Files
//
// A tablet never deletes an SSTable: after a split several tablets share
// files, and a compaction's inputs may still be read. The master's sweep
// (master.SweepFiles, deciding with assign.PlanSweep) deletes the files no
// live State references, in the cluster and in `tabula dev` alike.
package tablet
