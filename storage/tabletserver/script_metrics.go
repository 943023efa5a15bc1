package tabletserver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// scriptMetrics count the script service's work: runs by mode, rows the
// scripts processed, failed runs by kind (compile, runtime, limit,
// request, canceled, server).
type scriptMetrics struct {
	runs   *prometheus.CounterVec
	rows   prometheus.Counter
	errors *prometheus.CounterVec
	active prometheus.Gauge
}

// newScriptMetrics registers the metrics on reg (nil: none); on an error
// it still returns usable, unregistered metrics.
func newScriptMetrics(reg prometheus.Registerer) (*scriptMetrics, error) {
	m := &scriptMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_scripts_total", Help: "Script runs started, by mode (aggregate, filter).",
		}, []string{"mode"}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_script_rows_total", Help: "Rows processed by scripts in completed runs.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_script_errors_total", Help: "Failed script runs by kind (compile, runtime, limit, request, canceled, server).",
		}, []string{"kind"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tabula_script_runs_active", Help: "Script runs evaluating now (at most ScriptOptions.MaxRuns).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	// A second service on the same registry (a restart in one process)
	// shares the counters already registered.
	var err1, err2, err3, err4 error
	m.runs, err1 = register(reg, m.runs)
	m.rows, err2 = register(reg, m.rows)
	m.errors, err3 = register(reg, m.errors)
	m.active, err4 = register(reg, m.active)
	return m, errors.Join(err1, err2, err3, err4)
}

// register registers c, or returns the equal collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old, nil
			}
		}
		return c, err
	}
	return c, nil
}
