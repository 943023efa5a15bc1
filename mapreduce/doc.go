// Package mapreduce is Tabula's MapReduce runner: Bigtable tables (and files
// written by earlier jobs) as input splits, tables and files as outputs, with
// none of Hadoop's setup.
//
// A Job says what to compute: an Input (TableInput: one map task per tablet,
// sub-split at sampled keys; FileInput), a Map function (row → key/value
// pairs, or rows written straight to the output in a map-only job), an
// optional Combine, a Partitioner, a Reduce function and an Output
// (TableOutput, FileOutput, or nil for counters only). Keys and values are
// bytes at the core; Codec and the Typed* helpers give them Go types.
//
// Run executes a job: a coordinator in the calling process splits the input,
// drives a pure scheduler (package mapreduce/sched) and hands task attempts
// to Workers — goroutines in this process (LocalWorker) or, through package
// mapreduce/remote, `tabula worker` processes. Map output is partitioned,
// combined, sorted and spilled to local disk under a memory budget and merged
// externally (package mapreduce/shuffle); reducers fetch their partition from
// every map through Worker.FetchPartition. Failed attempts are retried (up to
// MaxAttempts per task), lost workers' tasks re-run, stragglers near the end
// of a phase get a backup attempt, and exactly one attempt of each task
// commits.
//
// Jobs that remote workers run are registered by name (Register): a worker
// rebuilds the job from its name and configuration bytes, so the submitting
// process and the workers run the same code. What the coordinator decides
// at submission travels with every task in its JobSpec: the read time (the
// consistent view: only cells written up to the job's start), the output
// timestamp (fixed per run, so a re-executed task rewrites identical cells),
// a total order's partition bounds (TotalOrder), the project and instance.
//
// Outputs commit once: table outputs are idempotent by their fixed
// timestamps; file outputs are written under _temporary/JOBID and moved into
// place with a _SUCCESS manifest only when every task has committed — a job
// that fails leaves nothing. A committed attempt may also hand a small
// report back to the caller (Result.Reports: a script's merged tables, the
// rows verify found different).
//
// Package mapreduce/jobs holds the built-in jobs (rowcounter, copytable,
// verify, export, import, wordcount, script); `tabula mr` runs them.
package mapreduce
