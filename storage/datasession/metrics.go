package datasession

import (
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts sessions and their calls.
type Metrics struct {
	open  *prometheus.GaugeVec
	calls *prometheus.CounterVec
}

// NewMetrics registers the session metrics with reg:
// tabula_sessions_open{kind} and tabula_session_calls_total{method,code}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tabula_sessions_open",
			Help: "Sessions of the session data plane open now, by kind (table, authorized_view).",
		}, []string{"kind"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_session_calls_total",
			Help: "Calls served on sessions, by method (ReadRow, MutateRow) and gRPC code.",
		}, []string{"method", "code"}),
	}
	reg.MustRegister(m.open, m.calls)
	return m
}

func (m *Metrics) opened(kind string) {
	if m != nil {
		m.open.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) closed(kind string) {
	if m != nil {
		m.open.WithLabelValues(kind).Dec()
	}
}

func (m *Metrics) called(method string, err error) {
	if m != nil {
		m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	}
}
