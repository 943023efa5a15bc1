package mapreduce

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/client"
)

// Config configures Run.
type Config struct {
	// Addr is the cluster's address (any tablet server, or tabula dev):
	// where table inputs and outputs without their own address live.
	Addr string
	// Workers run the tasks. Empty: LocalWorkers in-process workers.
	// mapreduce/remote provides workers in other processes.
	Workers []Worker
	// LocalWorkers is the number of in-process workers made when Workers
	// is empty; default 4.
	LocalWorkers int
	// SortMemory is each map attempt's sort buffer (in-process workers);
	// default DefaultSortMemory.
	SortMemory int64
	// TempDir holds in-process workers' map outputs; default os.TempDir().
	TempDir string
	// MaxAttempts per task; default 4.
	MaxAttempts int
	// NoSpeculation turns backup attempts for stragglers off. BackupAfter
	// is the least time an attempt runs before it may get a backup
	// (default 5 s; it also needs twice the phase's median duration).
	NoSpeculation bool
	BackupAfter   time.Duration
	// Client configures the clients of the cluster (project, instance).
	Client client.Options
	// WaitForWorkers keeps a job whose workers are all lost waiting for
	// new ones (remote pools) instead of failing it; implied by Discover.
	WaitForWorkers bool
	// Discover, when set, is asked now and then (every few hundred ms)
	// for the workers available now — a remote pool's Workers — and
	// those the job does not know yet join it mid-run: a worker restarted
	// after a crash takes tasks again.
	Discover func() []Worker
	// Progress, when set, is called about every ProgressInterval (default
	// 1 s) and once at the end with the job's status.
	Progress         func(Status)
	ProgressInterval time.Duration
	// Metrics, when set, receives the job's Prometheus metrics.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Status is a snapshot of a running job, for progress displays and status
// pages.
type Status struct {
	JobID, Name string
	Started     time.Time
	Elapsed     time.Duration
	// Map and Reduce are the tasks of each phase.
	Map, Reduce PhaseStatus
	// Counters are the committed attempts' counters plus the running
	// attempts' progress.
	Counters Counters
	// InputBytesEstimate is the estimated size of the input (from
	// sampled keys), for ETA.
	InputBytesEstimate int64
	Done               bool
}

// TaskReport is one task's report.
type TaskReport struct {
	Kind TaskKind
	Task int
	Data []byte
}

// PhaseStatus counts a phase's tasks.
type PhaseStatus struct {
	Total, Done, Running, Failed int
}

// Result is what a finished job reports.
type Result struct {
	JobID string
	// Counters of the committed attempts, plus failed and killed attempts.
	Counters Counters
	// Timestamp is the output timestamp of cells written without one.
	Timestamp int64
	// Files are the committed output files of a FileOutput.
	Files []string
	// Reports are the committed attempts' reports, maps then reduces, in
	// task order; tasks without one are left out.
	Reports []TaskReport
	Elapsed time.Duration
}

// Metrics are the Prometheus metrics of the jobs a process coordinates.
type Metrics struct {
	Jobs     *prometheus.CounterVec // by name, outcome
	Attempts *prometheus.CounterVec // by kind, outcome
	Running  *prometheus.GaugeVec   // running attempts by kind
	Counters *prometheus.CounterVec // committed job counters by name
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Jobs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tabula_mr_jobs_total", Help: "MapReduce jobs finished, by job name and outcome."}, []string{"job", "outcome"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tabula_mr_attempts_total", Help: "Task attempts finished, by kind (map, reduce) and outcome (succeeded, failed, killed)."}, []string{"kind", "outcome"}),
		Running:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tabula_mr_attempts_running", Help: "Task attempts running now, by kind."}, []string{"kind"}),
		Counters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tabula_mr_counter_total", Help: "Job counters of committed attempts, summed over jobs."}, []string{"counter"}),
	}
	if reg != nil {
		reg.MustRegister(m.Jobs, m.Attempts, m.Running, m.Counters)
	}
	return m
}
