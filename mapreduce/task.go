package mapreduce

import (
	"fmt"
	"strconv"
	"strings"
)

// TaskKind says whether a task maps a split or reduces a partition.
type TaskKind int

const (
	// MapTask reads one split of the input.
	MapTask TaskKind = iota
	// ReduceTask reduces one partition of the map output.
	ReduceTask
)

// String returns "m" or "r", as attempt IDs spell them.
func (k TaskKind) String() string {
	if k == ReduceTask {
		return "r"
	}
	return "m"
}

// AttemptID names one attempt of one task of one job run. Its String form
// (JOB-m-00003-1) is what logs, file names and the wire use.
type AttemptID struct {
	Job     string   `json:"job"`     // the run's unique ID (JobSpec.ID)
	Kind    TaskKind `json:"kind"`    // map or reduce
	Task    int      `json:"task"`    // index among the job's tasks of that kind
	Attempt int      `json:"attempt"` // 0 for the first attempt, then 1, 2, …
}

// String formats the ID as JOB-m-00003-1.
func (a AttemptID) String() string {
	return fmt.Sprintf("%s-%s-%05d-%d", a.Job, a.Kind, a.Task, a.Attempt)
}

// TaskName names the task (JOB-m-00003) without the attempt.
func (a AttemptID) TaskName() string {
	return fmt.Sprintf("%s-%s-%05d", a.Job, a.Kind, a.Task)
}

// ParseAttemptID parses what String returns.
func ParseAttemptID(s string) (AttemptID, error) {
	parts := strings.Split(s, "-")
	if len(parts) < 4 {
		return AttemptID{}, fmt.Errorf("mapreduce: attempt ID %q: want JOB-m|r-TASK-ATTEMPT", s)
	}
	n := len(parts)
	var a AttemptID
	switch parts[n-3] {
	case "m":
		a.Kind = MapTask
	case "r":
		a.Kind = ReduceTask
	default:
		return AttemptID{}, fmt.Errorf("mapreduce: attempt ID %q: kind %q is not m or r", s, parts[n-3])
	}
	var err error
	if a.Task, err = strconv.Atoi(parts[n-2]); err != nil || a.Task < 0 {
		return AttemptID{}, fmt.Errorf("mapreduce: attempt ID %q: bad task number", s)
	}
	if a.Attempt, err = strconv.Atoi(parts[n-1]); err != nil || a.Attempt < 0 {
		return AttemptID{}, fmt.Errorf("mapreduce: attempt ID %q: bad attempt number", s)
	}
	a.Job = strings.Join(parts[:n-3], "-")
	return a, nil
}

// JobSpec is what every task of a job run carries about the job: enough for
// a worker in another process to rebuild it (Name, Conf through the
// registry) and to run its part consistently with the other tasks.
type JobSpec struct {
	// ID is unique per run (name, start time, random suffix); attempt IDs,
	// temporary file names and metrics carry it.
	ID string `json:"id"`
	// Name is the registered job name; Conf its configuration bytes, which
	// the registered builder decodes (Register).
	Name string `json:"name"`
	Conf []byte `json:"conf,omitempty"`
	// Project and Instance qualify the job's table names
	// (projects/P/instances/I/tables/T) on every worker; see TableName.
	Project  string `json:"project,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Addr is the cluster's address (host:port of any tablet server, or
	// tabula dev) that table inputs and outputs without their own address use.
	Addr string `json:"addr"`
	// ReadTime bounds the cells a table input reads: only timestamps ≤
	// ReadTime (microseconds), the consistent view of the job's start.
	// 0: no bound.
	ReadTime int64 `json:"read_time"`
	// Timestamp is the timestamp (microseconds) of the output cells a job
	// writes with JobTimestamp: fixed per run,
	// so a re-executed task rewrites identical cells. Reduce tasks get it
	// once the map phase is over (by default the newest input cell's
	// timestamp, so that re-running a job over unchanged input rewrites
	// the same cells).
	Timestamp int64 `json:"timestamp"`
	// Reducers is the number of reduce partitions; 0 for a map-only job.
	Reducers int `json:"reducers"`
	// Maps is the number of map tasks (known once the input is split).
	Maps int `json:"maps"`
	// Token is the job token: a random secret the coordinator issues per
	// run (as Hadoop's job tokens). A worker admits the attempts of a job
	// only with the token its first attempt brought, and serves the job's
	// map outputs (FetchPartition), kills its attempts and forgets it only
	// for callers presenting the token: the coordinator and the job's own
	// reducers. Never logged or shown.
	Token string `json:"token,omitempty"`
	// PartitionBounds, when set, are a TotalOrderPartitioner's bounds,
	// which every map uses whatever the job's rebuilt Partition says: a
	// partitioner picked from sampled keys at submission travels with the
	// tasks.
	PartitionBounds [][]byte `json:"partition_bounds,omitempty"`
}

// TableName returns the full name of table in the job's project and
// instance (table itself when already full, or when the job has none):
// what workers pass to their clients, whatever their own defaults.
func (s JobSpec) TableName(table string) string {
	if strings.HasPrefix(table, "projects/") || s.Project == "" || s.Instance == "" {
		return table
	}
	return "projects/" + s.Project + "/instances/" + s.Instance + "/tables/" + table
}

// Split is one map task's share of the input: a row range of a table, or
// one file.
type Split struct {
	// Table, Start, End: the rows [Start, End) of Table (nil End: to the
	// end of the table).
	Table string `json:"table,omitempty"`
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"`
	// Server is the address of the tablet server holding the range when
	// the split was made, and Host its host: the locality hint the
	// scheduler matches against Worker.Host.
	Server string `json:"server,omitempty"`
	Host   string `json:"host,omitempty"`
	// File is the file of a file input (a path or URL).
	File string `json:"file,omitempty"`
	// EstimatedBytes is the split's approximate size (from SampleRowKeys
	// or the file size), for progress and ETA; 0 when unknown.
	EstimatedBytes int64 `json:"estimated_bytes,omitempty"`
}

// MapOutputLocation says where a committed map attempt's output lives: on
// the worker named Worker, served by its FetchPartition.
type MapOutputLocation struct {
	Map     int       `json:"map"`
	Attempt AttemptID `json:"attempt"`
	Worker  string    `json:"worker"`
}

// Task is one attempt of one task, as a coordinator hands it to a Worker.
// It is plain data and serialises as JSON (encoding/json), so that
// mapreduce/remote can send it to another process.
type Task struct {
	Job     JobSpec   `json:"job"`
	Attempt AttemptID `json:"attempt"`
	// Split is a map task's input.
	Split *Split `json:"split,omitempty"`
	// Partition is a reduce task's partition (== Attempt.Task), and
	// MapOutputs the committed output of every map task, each to be
	// fetched for that partition.
	Partition  int                 `json:"partition,omitempty"`
	MapOutputs []MapOutputLocation `json:"map_outputs,omitempty"`
}

// TaskResult is what a successful attempt reports.
type TaskResult struct {
	// Counters are the attempt's counters (built-in and user).
	Counters Counters `json:"counters"`
	// PartitionBytes are a map attempt's output bytes per partition (nil
	// for a map-only job or a reduce).
	PartitionBytes []int64 `json:"partition_bytes,omitempty"`
	// MaxInputTimestamp is the newest cell timestamp a map attempt read;
	// the coordinator derives the job's output timestamp from it.
	MaxInputTimestamp int64 `json:"max_input_timestamp,omitempty"`
	// Output is the attempt's uncommitted output (file names under the
	// job's temporary directory), committed by the coordinator if this
	// attempt wins.
	Output []string `json:"output,omitempty"`
	// Report is the attempt's report (MapContext.Report,
	// ReduceContext.Report), nil for none.
	Report []byte `json:"report,omitempty"`
}
